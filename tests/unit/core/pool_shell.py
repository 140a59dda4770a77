"""The pool's launcher run by a real /bin/sh, for the unit tests of core.pool_delivery: each in a
process group of its own, every group killed when its test ends (a launcher left waiting on its
stdin, and the reader it waits for, would outlive the test run). Its stdin is a pipe, which
:func:`hand_over` writes and closes (the launcher must not need its stdin to end: a pod has no ``stdinOnce``)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from rolloutbatch.core import naming, pool_delivery

_STARTED: list[subprocess.Popen] = []
_BY_CLAIM: dict[str, subprocess.Popen] = {}   # claim directory -> the launcher waiting in it


def wait_for_file(path, seconds: float = 5.0) -> None:
    """Until the launcher made ``path`` (its ``warm`` file: prepared, waiting)."""
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def start_launcher(tmp_path, prepare: list[str] | None = None, prepare_timeout: int = 5,
                   **popen) -> subprocess.Popen:
    """The launcher without a verifier, waiting in ``tmp_path``; its termination message written
    to :func:`termination_message_file` (never the host's /dev/termination-log)."""
    script = pool_delivery.launcher(str(tmp_path), prepare_timeout).replace("$$", "$")
    script = script.replace(naming.TERMINATION_MESSAGE_PATH, str(termination_message_file(tmp_path)))
    return _start(["/bin/sh", "-c", script, "warm", *(prepare or [])], tmp_path, tmp_path, **popen)


def episode(*args, **fields) -> pool_delivery.Episode:
    """An episode as the operator hands it to a launcher: with its time (the watchdog's; here long
    enough never to fire unless a test says otherwise)."""
    return pool_delivery.Episode(*args, **{"timeout_seconds": 30, **fields})


def termination_message_file(claim) -> os.PathLike:
    return claim.parent / f"{claim.name}.termination-log"


def _start(argv: list[str], cwd, claim, **popen) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=cwd, start_new_session=True, stdin=subprocess.PIPE, **popen)
    _STARTED.append(proc)
    _BY_CLAIM[str(claim)] = proc
    return proc


def hand_over(claim, script: bytes, cut: int | None = None, keep_open: bool = False, before: bytes = b"") -> bool:
    """What the operator's attach does to the launcher waiting in ``claim``: ``before`` (pings),
    then the delivery (core.pool_delivery.delivery) on its stdin, which then ends, unless
    ``keep_open`` (a pod without stdinOnce: the stdin stays open for the next attach).
    ``cut``: only that many bytes arrive (a dropped connection). False when its stdin was closed
    already (a second attach writes to nothing)."""
    data = pool_delivery.delivery(script)
    return send(claim, before + (data if cut is None else data[:cut]), keep_open)


def send(claim, data: bytes, keep_open: bool = False) -> bool:
    """``data`` as it is on the stdin of the launcher waiting in ``claim`` (see :func:`hand_over`)."""
    stdin = _BY_CLAIM[str(claim)].stdin
    if stdin.closed:
        return False
    try:
        stdin.write(data)
        stdin.flush()
        if not keep_open:
            stdin.close()
    except BrokenPipeError:   # it ended already
        return False
    return True


def delivery_head(script: bytes) -> int:
    """How many bytes of a delivery of ``script`` come before the script (its length and key line)."""
    return pool_delivery.delivery(script).index(b"\n") + 1


# Every POSIX shell an image may have as /bin/sh that this machine has (busybox: Alpine's).
SHELLS = [argv for argv in (["sh"], ["dash"], ["bash", "--posix"], ["busybox", "sh"]) if shutil.which(argv[0])]


def has_pid_namespaces() -> bool:
    """Whether `unshare -p` works here: the verifier phases' launchers `kill -KILL -1`, which
    outside a PID namespace of their own would reach every process of the test's user."""
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True).returncode == 0


def kills_its_watchdog(watchdog_seconds: int, then: str) -> str:
    """A shell agent that kills its launcher's watchdog (the ``sleep N``, by its name or its full
    path, and the subshell above it) as soon as they exist, trying every 50 ms, then runs
    ``then``. One try after a fixed wait lost the race to the watchdog on a loaded CI run. Run it
    only in a PID namespace of its own."""
    return ('until killed=; for p in /proc/[0-9]*; do c=$(tr "\\0" " " < "$p/cmdline" 2>/dev/null); '
            f'case "$c" in "sleep {watchdog_seconds} "|*"/sleep {watchdog_seconds} ") '
            'kill -KILL "$(cut -d" " -f4 "$p/stat")" "${p#/proc/}" 2>/dev/null && killed=1;; esac; done; '
            '[ -n "$killed" ]; do sleep 0.05; done; ' + then)


def start_phase_launcher(script: str, tmp_path, message_file, claim, **popen) -> subprocess.Popen:
    """A launcher with a verifier phase (core.pool_delivery), waiting in ``claim``, as PID 1 of a
    PID namespace of its own, as a container's; its termination message written to ``message_file``."""
    text = script.replace("$$", "$").replace(naming.TERMINATION_MESSAGE_PATH, str(message_file))
    return _start(["unshare", "-p", "-f", "--mount-proc", "/bin/sh", "-c", text, "phase"], tmp_path, claim, **popen)


@pytest.fixture(autouse=True)
def reap_launchers():
    yield
    _BY_CLAIM.clear()
    while _STARTED:
        proc = _STARTED.pop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
