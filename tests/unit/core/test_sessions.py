"""Trainer-driven sessions in the pure core (core.sessions): the hold run by a real /bin/sh under
the agent launcher of a pool's pod (as PID 1 of a PID namespace, as in a container: the launcher
`kill -KILL -1`s), ended by the end command or by its watchdog, and the verdict such an agent gets;
the trainer's file commands run by sh."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile
import time

import pytest

from rolloutbatch.core import pool_delivery, sessions
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_line, parse_log, split_agent_record
from rolloutbatch.core.model import AgentFacts
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.verdict_verified import judge_verified
from tests.support.runtime_exec import StdinUnread, run_like_the_runtime
from tests.unit.core import test_verifier_core as vc
from tests.unit.core.pool_shell import has_pid_namespaces, hand_over, reap_launchers, start_phase_launcher  # noqa: F401

needs_pid_namespace = pytest.mark.skipif(not has_pid_namespaces(), reason="needs unshare -p (a PID namespace)")
POD = "graded-x7k2p"


def _wait_for(check, seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, "never happened"
        time.sleep(0.02)


def _hold(tmp_path, timeout: int = 30, handed_over: bool = True):
    """A pool pod's agent launcher, warm, then handed the hold as its episode (as the operator
    hands a session batch's episode; not with ``handed_over`` False: _hand_over_the_hold): the
    launcher, its claim dir, message file, stdout file, and the time it was handed over (the claim)."""
    claim, message, out = tmp_path / "claim", tmp_path / "agent-message", tmp_path / "stdout"
    claim.mkdir(exist_ok=True)
    message.write_text("")
    with out.open("wb") as stdout:
        proc = start_phase_launcher(pool_delivery.launcher(str(claim), 5, verified=True), tmp_path, message, claim,
                                    env={**os.environ, "EPISODE_ID": POD}, stdout=stdout)
    _wait_for((claim / "warm").exists)
    claimed = time.time()
    if handed_over:
        assert _hand_over_the_hold(claim, timeout)
    return proc, claim, message, out, claimed


def _hand_over_the_hold(claim, timeout: int = 30) -> bool:
    script = pool_delivery.episode_script(pool_delivery.Episode("b", 0, 1, tuple(sessions.hold_command(str(claim))),
                                                                timeout_seconds=timeout))
    return hand_over(claim, script)


def _pid_one(launcher: subprocess.Popen) -> int:
    """The host's id of the launcher's shell: PID 1 of the namespace `unshare` made for it."""
    _wait_for(lambda: (pathlib.Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()))
    return int(pathlib.Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()[0])


def _in_its_container(launcher: subprocess.Popen | None, argv: list[str]) -> list[str]:
    """``argv`` run as an exec into the launcher's container runs: in its PID namespace (and the
    mount namespace whose /proc is that namespace's), where the end's `kill -KILL -1` reaches only
    the launcher's processes; with no launcher, in a PID namespace of its own. Never on the host:
    there `kill -1` would reach every process of the test's user."""
    if launcher is None:
        return ["unshare", "-p", "-f", "--mount-proc", *argv]
    return ["nsenter", "-t", str(_pid_one(launcher)), "-p", "-m", "--", *argv]


# The end's own exec, still running when the launcher has reaped the hold it killed, is killed by
# the launcher's `kill -KILL -1` at times, as in a pod (the SDK then confirms the end by the pod);
# nsenter ends with the signal its child died of.
KILLED = -9


def _end(claim, launcher: subprocess.Popen | None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(_in_its_container(launcher, sessions.end_command(str(claim), **kw)), capture_output=True,
                          timeout=30)


def _verdict(out, message, claimed: float):
    """judge_verified of the pod: the agent's real output and termination message, a verifier's reward."""
    now = time.time()
    facts = vc.facts(name=POD, created=claimed, started_at=claimed, finished_at=now + 1,
                     agent=AgentFacts(state="terminated", exit_code=0, message=message.read_text(), finished_at=now))
    reward = json.dumps({"event": "reward", "at": now + 0.5, "episode_id": POD, "reward": 1})
    return judge_verified(facts, parse_log(out.read_bytes()), parse_log(reward.encode()))


# -- the hold, run ----------------------------------------------------------------------------------
@needs_pid_namespace
def test_the_hold_prints_its_ready_event_and_ends_on_a_line(tmp_path) -> None:
    proc, claim, message, out, claimed = _hold(tmp_path)
    _wait_for((claim / sessions.END_FIFO).is_fifo)
    _wait_for(lambda: len(out.read_bytes().splitlines()) == 2 and out.read_bytes().endswith(b"\n"))
    assert proc.poll() is None                       # held: the trainer's turn
    received, line = out.read_bytes().splitlines()   # the launcher's line, before anything the script runs
    assert received.decode() == pool_delivery.RECEIVED
    ready = parse_line(line)
    assert ready is not None and ready.kind == "ready" and ready.episode_id == POD
    assert claimed - 0.01 <= ready.at <= time.time()

    ended = _end(claim, proc)
    assert ended.returncode in (sessions.ENDED, KILLED), ended.stderr
    assert proc.wait(timeout=20) == 0
    # the hold killed with the rest: its 137 is the record's, and no verdict grades it
    assert split_agent_record(message.read_text())[1] == {"exit_code": 137, "timed_out": False}

    result = _verdict(out, message, claimed)
    assert result.outcome == v.OUTCOME_SUCCEEDED and result.reward == 1
    assert v.FLAG_AGENT_TIMED_OUT not in result.flags and v.FLAG_SKEW_TOLERATED not in result.flags


@needs_pid_namespace
def test_a_session_nobody_ends_is_stopped_at_its_deadline_visibly(tmp_path) -> None:
    started = time.monotonic()
    proc, claim, message, out, claimed = _hold(tmp_path, timeout=1)
    assert proc.wait(timeout=20) == 0 and time.monotonic() - started < 10
    assert split_agent_record(message.read_text())[1]["timed_out"] is True
    result = _verdict(out, message, claimed)
    # graded all the same, and flagged
    assert result.outcome == v.OUTCOME_SUCCEEDED and v.FLAG_AGENT_TIMED_OUT in result.flags


@needs_pid_namespace
def test_an_end_sent_before_the_hold_started_waits_for_it(tmp_path) -> None:
    proc, claim, message, _, _ = _hold(tmp_path, handed_over=False)
    early = subprocess.Popen(_in_its_container(proc, sessions.end_command(str(claim))), stderr=subprocess.PIPE)
    time.sleep(0.3)                                  # the delivery comes later
    assert _hand_over_the_hold(claim)
    assert early.wait(timeout=30) in (sessions.ENDED, KILLED)
    assert proc.wait(timeout=20) == 0
    assert split_agent_record(message.read_text())[1]["timed_out"] is False


@needs_pid_namespace
def test_an_end_where_no_session_holds_says_so(tmp_path) -> None:
    started = time.monotonic()
    ended = _end(tmp_path, None, tries=2)
    assert ended.returncode == sessions.NOT_HOLDING and b"no session FIFO" in ended.stderr
    assert time.monotonic() - started < 5


def test_the_hold_is_a_command_a_pooled_batch_accepts() -> None:
    command = sessions.hold_command()
    assert sessions.is_hold_command(command) and not sessions.is_hold_command(["python", "run.py"])
    spec = parse_spec({"episodes": 4, "samplesPerInput": 2, "inputs": [{"q": 1}, {"q": 2}], "command": command,
                       "poolRef": {"name": "warm"}, "verifier": {"files": {"verify.py": "exit 0"}}})
    assert list(spec.command) == command


# -- the trainer's files ----------------------------------------------------------------------------------
def _sh(command: list[str], cwd, data: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(command, input=data, cwd=cwd, capture_output=True, timeout=10)


def test_a_file_is_written_whole_and_read_back(tmp_path) -> None:
    data = b"\x00binary\xff\nand text\n" * 1000
    assert _sh(sessions.write_file_command("src/pkg/mod.py", len(data)), tmp_path, data).returncode == 0
    assert (tmp_path / "src/pkg/mod.py").read_bytes() == data
    read = _sh(sessions.read_file_command("src/pkg/mod.py", 1 << 20), tmp_path)
    assert read.returncode == 0 and read.stdout == data
    # overwritten, and a name that looks like an option is a name
    assert _sh(sessions.write_file_command("-n", 2), tmp_path, b"ok").returncode == 0
    assert _sh(sessions.read_file_command("-n", 1 << 20), tmp_path).stdout == b"ok"
    assert _sh(sessions.write_file_command("src/pkg/mod.py", 0), tmp_path).returncode == 0
    assert (tmp_path / "src/pkg/mod.py").read_bytes() == b""


def test_a_cut_off_write_leaves_the_file_as_it_was(tmp_path) -> None:
    (tmp_path / "a.txt").write_bytes(b"before")
    assert _sh(sessions.write_file_command("a.txt", 100), tmp_path, b"only part").returncode != 0
    assert (tmp_path / "a.txt").read_bytes() == b"before" and sorted(os.listdir(tmp_path)) == ["a.txt"]


def test_reading_what_is_not_a_file_says_what_it_is(tmp_path) -> None:
    missing = _sh(sessions.read_file_command("nope.txt", 1 << 20), tmp_path)
    assert missing.returncode == sessions.NO_SUCH_FILE and b"no such file: nope.txt" in missing.stderr
    (tmp_path / "d").mkdir()
    assert _sh(sessions.read_file_command("d", 1 << 20), tmp_path).returncode == sessions.IS_A_DIRECTORY
    # a FIFO (or a device, a socket) is there but is no file: said so, never read (a FIFO blocks)
    os.mkfifo(tmp_path / "pipe")
    fifo = _sh(sessions.read_file_command("pipe", 1 << 20), tmp_path)
    assert fifo.returncode == sessions.NOT_A_FILE and b"not a regular file: pipe" in fifo.stderr
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert _sh(sessions.read_file_command("dangling", 1 << 20), tmp_path).returncode == sessions.NO_SUCH_FILE


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv (a second user)")
def test_reading_under_a_directory_the_user_cannot_search_is_permission_denied_not_no_such_file() -> None:
    """A new user's review: read_file of /root/.bashrc (or a file under a `chmod 000` directory)
    said "no such file" where `ls` said Permission denied: `test -e` cannot tell them apart."""
    top = pathlib.Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        top.chmod(0o755)
        (top / "shut").mkdir()
        (top / "shut" / "f").write_text("x")
        (top / "shut").chmod(0o700)                 # root's: the reader (uid 1000) cannot search it

        def read(path: str) -> subprocess.CompletedProcess:
            return _sh(["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups",
                        *sessions.read_file_command(path, 1 << 20)], top)
        (top / "unreadable").write_text("x")
        (top / "unreadable").chmod(0o000)
        for path in ("shut/f", f"{top}/shut/f", "shut/deeper/f", "unreadable"):
            denied = read(path)
            assert denied.returncode == sessions.NOT_PERMITTED and b"permission denied" in denied.stderr, (path, denied)
        for path in ("nope.txt", f"{top}/nope/x", "/nonexistent-rb", "./a/b/c"):
            assert read(path).returncode == sessions.NO_SUCH_FILE, path
        # a link whose target the user cannot reach, links that loop, a dangling link
        (top / "into-shut").symlink_to("shut/f")
        (top / "loop-a").symlink_to("loop-b")
        (top / "loop-b").symlink_to("loop-a")
        (top / "dangling").symlink_to(top / "gone")
        (top / "to-shut-dir").symlink_to("shut/deeper/f")
        for path, code in (("into-shut", sessions.NOT_PERMITTED), ("to-shut-dir", sessions.NOT_PERMITTED),
                           ("loop-a", sessions.LINK_LOOP), ("dangling", sessions.NO_SUCH_FILE)):
            assert read(path).returncode == code, (path, read(path))
        assert read("into-shut").stderr == b"permission denied: into-shut is a symbolic link to where the user cannot reach\n"
    finally:
        shutil.rmtree(top)


def test_a_file_of_the_longest_name_a_file_system_takes_is_written(tmp_path) -> None:
    """The part written aside has a short name of its own: a name of 255 bytes (NAME_MAX) plus a
    suffix would be refused as too long."""
    name = "n" * 255
    assert _sh(sessions.write_file_command(f"sub/{name}", 3), tmp_path, b"abc").returncode == 0
    assert (tmp_path / "sub" / name).read_bytes() == b"abc" and os.listdir(tmp_path / "sub") == [name]


# -- from an attack review: the session's own commands are untrusted (each failed before) ---------
@needs_pid_namespace
def test_a_forged_end_marker_keeps_no_session_from_its_end(tmp_path) -> None:
    """The end command cannot tell a forged marker from the hold's; it says ALREADY_ENDED (the SDK
    confirms an end by the pod: tests/unit/test_sdk_sessions.py), and ends the session all the same."""
    proc, claim, _, _, _ = _hold(tmp_path, timeout=30)
    _wait_for((claim / sessions.END_FIFO).is_fifo)
    (claim / sessions.ENDED_FILE).write_text("")
    assert _end(claim, proc).returncode in (sessions.ALREADY_ENDED, KILLED)
    assert proc.wait(timeout=20) == 0


# A process a session's command left behind, as an agent that wants the last word would leave it:
# its environment cleared and a session of its own (the stop marker does not find it), it waits
# for the hold to end, then writes the answer as often as it can. The second takes the end's
# line from the FIFO first (moved aside, a FIFO of its own in its place), rewrites the answer,
# then passes the line on.
_SPINNER = ('exec env -i setsid sh -c \'read -r h < "$0/session-hold"; while [ -e "/proc/$h" ]; do :; done; '
            'while :; do echo 42 1<> "$1"; done\' {claim} {answer} > /dev/null 2>&1 < /dev/null &')
_THIEF = ('exec env -i setsid sh -c \'c=$0; mv "$c/session-end" "$c/.real" && mkfifo "$c/session-end" && '
          'read -r l < "$c/session-end"; echo 42 > "$1"; printf "end\\n" > "$c/.real"\' {claim} {answer} '
          '> /dev/null 2>&1 < /dev/null &')


@needs_pid_namespace
@pytest.mark.parametrize("left", [_SPINNER, _THIEF], ids=["spinner", "fifo-thief"])
def test_nothing_the_session_left_running_writes_after_its_end(tmp_path, left) -> None:
    """A line on the FIFO ended the hold, and the launcher's own kill came only after it had reaped
    the hold and its watchdog: a spinning writer got its answer in between every time, and a
    thief of the line rewrote the workspace before the hold saw it (the verifier graded 42 where
    the trainer left 7). The end now kills every process but the launcher before it returns."""
    proc, claim, message, _, _ = _hold(tmp_path, timeout=30)
    _wait_for((claim / sessions.END_FIFO).is_fifo)
    answer = tmp_path / "answer.txt"
    command = left.format(claim=shlex.quote(str(claim)), answer=shlex.quote(str(answer)))
    assert subprocess.run(_in_its_container(proc, ["/bin/sh", "-c", command]), timeout=10).returncode == 0
    time.sleep(0.3)                                  # the spinner spins; the thief waits for the line
    answer.write_text("7\n")                        # the trainer's last word
    assert _end(claim, proc).returncode in (sessions.ENDED, KILLED)
    assert proc.wait(timeout=20) == 0
    time.sleep(0.3)
    assert answer.read_text() == "7\n"



# The spinner's kind, after it removed the end's FIFO: the end waited for it, said NOT_HOLDING and
# killed nothing, and the spinner wrote on until the episode's deadline.
_REMOVER = ('rm -f {claim}/session-end; exec env -i setsid sh -c \'while :; do echo 42 1<> "$0"; done\' {answer} '
            '> /dev/null 2>&1 < /dev/null &')


@needs_pid_namespace
def test_an_end_whose_fifo_the_session_removed_kills_all_the_same(tmp_path) -> None:
    proc, claim, message, _, _ = _hold(tmp_path, timeout=30)
    _wait_for((claim / sessions.END_FIFO).is_fifo)
    answer = tmp_path / "answer.txt"
    command = _REMOVER.format(claim=shlex.quote(str(claim)), answer=shlex.quote(str(answer)))
    assert subprocess.run(_in_its_container(proc, ["/bin/sh", "-c", command]), timeout=10).returncode == 0
    _wait_for(answer.exists)
    ended = _end(claim, proc, tries=2)
    assert ended.returncode in (sessions.NOT_HOLDING, KILLED)
    assert ended.returncode == KILLED or b"killed all the same" in ended.stderr
    assert proc.wait(timeout=20) == 0                # ended now, not at the deadline 30 s away
    answer.write_text("7\n")                         # nothing of the session's writes after this
    time.sleep(0.3)
    assert answer.read_text() == "7\n"
    assert split_agent_record(message.read_text())[1] == {"exit_code": 137, "timed_out": False}



def test_a_file_is_never_written_into_a_directory_of_its_name(tmp_path) -> None:
    (tmp_path / "out").mkdir()
    done = _sh(sessions.write_file_command("out", 3), tmp_path, b"abc")
    assert done.returncode == sessions.IS_A_DIRECTORY and not any((tmp_path / "out").iterdir())


def test_a_file_named_dash_reads_back(tmp_path) -> None:
    assert _sh(sessions.write_file_command("-", 5), tmp_path, b"hello").returncode == 0
    assert _sh(sessions.read_file_command("-", 1 << 20), tmp_path).stdout == b"hello"


def test_a_read_stops_one_byte_past_its_limit(tmp_path) -> None:
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(64 << 30)                          # 64 GiB, sparse: never read whole
    done = _sh(sessions.read_file_command("sparse", 10), tmp_path)
    assert done.returncode == 0 and done.stdout == b"\0" * 11


# --- a session's stats in its row ---------------------------------------------------------------------
def test_stats_go_through_the_batchs_annotation_into_a_row_and_back() -> None:
    from rolloutbatch.core.model import EpisodeResult
    annotations = sessions.stats_annotation(7, "rp-pod-a", 3, 1.2345678)
    assert list(annotations) == ["rl.agentruntime.io/session-7"]
    stats = sessions.stats_of(annotations, 7, "rp-pod-a")
    assert stats == {"commands": 3, "command_seconds": 1.234568}
    assert sessions.stats_of(annotations, 8, "rp-pod-a") is None         # another episode's are not its
    assert sessions.stats_of(annotations, 7, "rp-pod-b") is None         # nor those of the index's earlier pod
    row = EpisodeResult(index=7, pod="p", node=None, image_id=None, outcome="succeeded", reason=None, message="",
                        reward=1.0, pod_created=None, ready_at=None, reward_at=None, pod_to_ready_seconds=None,
                        session=stats).to_row(None)
    assert json.loads(json.dumps(row, allow_nan=False))["session"] == stats
    assert EpisodeResult.from_row(row).session == stats                  # a restart keeps them


@pytest.mark.parametrize("text", [
    "", "[]", "null", '{"commands": 1}', '{"commands": 1, "command_seconds": 1, "x": 2}',
    '{"commands": -1, "command_seconds": 1}', '{"commands": 1.5, "command_seconds": 1}',
    '{"commands": true, "command_seconds": 1}', '{"commands": 1, "command_seconds": NaN}',
    '{"commands": 1, "command_seconds": Infinity}', '{"commands": 1, "command_seconds": -0.5}',
    '{"commands": 1, "command_seconds": "1"}', '{"commands": 10000000000, "command_seconds": 1}',
    '{"commands": 1, "command_seconds": 1e300}', '{"commands": 1, "command_seconds": 1' + "0" * 380 + "}",
    "[" * 150 + "]" * 150, '{"commands": 1, "command_seconds": 1' + "0" * 300 + "}",
])
def test_stats_that_are_not_exactly_their_shape_are_left_out(text) -> None:
    if text.startswith("{"):
        text = '{"pod": "p", ' + text[1:]
    assert sessions.stats_of({"rl.agentruntime.io/session-0": text}, 0, "p") is None


def test_a_row_whose_session_is_not_its_shape_is_refused_on_read() -> None:
    from rolloutbatch.core.model import EpisodeResult
    row = {"index": 0, "outcome": "succeeded", "reward": 1.0, "session": {"commands": "many", "command_seconds": 1}}
    with pytest.raises(ValueError, match="session"):
        EpisodeResult.from_row(row)


def test_stats_out_of_range_are_never_written() -> None:
    with pytest.raises(ValueError):
        sessions.stats_annotation(0, "p", -1, 0.0)
    with pytest.raises(ValueError):
        sessions.stats_annotation(0, "p", 1, float("nan"))


def test_a_path_whose_directory_ends_in_a_newline_is_written_there(tmp_path) -> None:
    assert _sh(sessions.write_file_command("out\n/result.txt", 2), tmp_path, b"ok").returncode == 0
    assert (tmp_path / "out\n" / "result.txt").read_bytes() == b"ok" and os.listdir(tmp_path) == ["out\n"]


def test_a_rewritten_file_keeps_its_mode(tmp_path) -> None:
    """An edited run_tests.sh stays executable (the new file replaces the old by a rename)."""
    script = tmp_path / "run_tests.sh"
    script.write_bytes(b"#!/bin/sh\nexit 1\n")
    script.chmod(0o750)
    (tmp_path / "link").symlink_to(script)
    new = b"#!/bin/sh\nexit 0\n"
    assert _sh(sessions.write_file_command("run_tests.sh", len(new)), tmp_path, new).returncode == 0
    assert script.read_bytes() == new and script.stat().st_mode & 0o777 == 0o750
    # through a link, the target's mode (a link's own is 777)
    assert _sh(sessions.write_file_command("link", 2), tmp_path, b"hi").returncode == 0
    assert (tmp_path / "link").stat().st_mode & 0o777 == 0o750


def test_a_write_through_a_symbolic_link_writes_the_file_it_names(tmp_path) -> None:
    """A repository's link to its config stays a link, and the file it names takes the bytes (the
    rename over the link left that file as it was: the verifier graded the old bytes)."""
    (tmp_path / "conf").mkdir()
    target = tmp_path / "conf" / "settings.py"
    target.write_bytes(b"DEBUG = False\n")
    target.chmod(0o750)
    (tmp_path / "settings.py").symlink_to("conf/settings.py")
    (tmp_path / "chain").symlink_to("settings.py")            # a link to a link
    assert _sh(sessions.write_file_command("settings.py", 13), tmp_path, b"DEBUG = True\n").returncode == 0
    assert (tmp_path / "settings.py").is_symlink() and target.read_bytes() == b"DEBUG = True\n"
    assert target.stat().st_mode & 0o777 == 0o750
    assert _sh(sessions.write_file_command("chain", 2), tmp_path, b"hi").returncode == 0
    assert (tmp_path / "chain").is_symlink() and (tmp_path / "settings.py").is_symlink()
    assert target.read_bytes() == b"hi" and sorted(os.listdir(tmp_path / "conf")) == ["settings.py"]
    # a dangling link creates the file it names, as `>` would; one it cannot follow is refused
    (tmp_path / "new").symlink_to("conf/new.py")
    assert _sh(sessions.write_file_command("new", 3), tmp_path, b"abc").returncode == 0
    assert (tmp_path / "new").is_symlink() and (tmp_path / "conf" / "new.py").read_bytes() == b"abc"
    (tmp_path / "deep").symlink_to("missing/x.py")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    for link in ("deep", "loop1"):
        done = _sh(sessions.write_file_command(link, 1), tmp_path, b"x")
        assert done.returncode == 1 and f"cannot follow the symbolic link {link}".encode() in done.stderr
        assert (tmp_path / link).is_symlink()
    assert not (tmp_path / "missing").exists()
    # a link to a directory is a directory: refused, nothing written into it
    (tmp_path / "dirlink").symlink_to("conf")
    assert _sh(sessions.write_file_command("dirlink", 1), tmp_path, b"x").returncode == sessions.IS_A_DIRECTORY
    assert (tmp_path / "dirlink").is_symlink() and sorted(os.listdir(tmp_path / "conf")) == ["new.py", "settings.py"]


def test_two_writes_of_one_path_that_overlap_each_land_whole(tmp_path) -> None:
    """Each write has its own part aside: the later one lands whole, and the earlier one, when it
    ends, replaces it whole (never a mix of the two)."""
    n = 64 * 1024
    first, second = b"A" * n, b"B" * n
    earlier = subprocess.Popen(sessions.write_file_command("model.py", n), cwd=tmp_path, stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        earlier.stdin.write(first[: n // 2])
        earlier.stdin.flush()
        deadline = time.monotonic() + 5
        while not any(p.name.startswith(".rb-part-") and p.stat().st_size >= n // 2 for p in tmp_path.iterdir()):
            assert time.monotonic() < deadline, "the earlier write never wrote its first half"
            time.sleep(0.01)
        assert _sh(sessions.write_file_command("model.py", n), tmp_path, second).returncode == 0
        assert (tmp_path / "model.py").read_bytes() == second
        earlier.stdin.write(first[n // 2:])
        earlier.stdin.close()
        assert earlier.wait(timeout=10) == 0
    finally:
        if earlier.poll() is None:
            earlier.kill()
            earlier.wait()
    assert (tmp_path / "model.py").read_bytes() == first and os.listdir(tmp_path) == ["model.py"]



@needs_pid_namespace
def test_the_hold_and_its_end_find_their_tools_whatever_path_the_batch_sets(tmp_path):
    """A session batch's spec.env may set PATH to the agent's own directories (PATH=/opt/venv/bin):
    the hold's mkfifo and date, and the end's sleep, are found in the standard directories first
    (the hold could not make its FIFO: no session opened). Both run in a PID namespace of their
    own, the shell that starts them its PID 1 (the end kills all but PID 1)."""
    lines, stderr = _hold_ended_at_once(tmp_path, {"PATH": "/opt/venv/bin", "EPISODE_ID": "pod-0"})
    ready = parse_line(lines[0].encode())
    assert ready is not None and ready.kind == "ready" and ready.at is not None, (lines, stderr)
    assert lines[-1] == f"end {sessions.ENDED} hold 137", (lines, stderr)


@needs_pid_namespace
def test_an_end_called_as_the_session_opens_never_kills_the_hold_before_its_ready_event(tmp_path):
    """The end waits for the hold's FIFO and then kills it: with the FIFO made before the ready event
    was printed, an end that came at once killed the hold between the two (seen in CI), and the
    episode had no ready event. The end here starts the moment the FIFO appears (the widest window)."""
    for attempt in range(5):
        claim = tmp_path / str(attempt)
        claim.mkdir()
        lines, stderr = _hold_ended_at_once(claim, {"PATH": "/usr/bin:/bin", "EPISODE_ID": "pod-0"}, on_fifo=True)
        ready = parse_line(lines[0].encode()) if lines else None
        assert ready is not None and ready.kind == "ready", (attempt, lines, stderr)
        assert lines[-1] == f"end {sessions.ENDED} hold 137", (attempt, lines, stderr)


def _hold_ended_at_once(claim: pathlib.Path, env: dict[str, str], on_fifo: bool = False) -> tuple[list[str], bytes]:
    """The hold started and the end run at once (or, ``on_fifo``, the moment the hold's FIFO
    exists), in a PID namespace whose PID 1 is the shell that starts both: (the lines printed, the
    hold's first, the last 'end <code> hold <code>'; stderr)."""
    fifo = shlex.quote(str(claim / sessions.END_FIFO))
    script = (f'{shlex.join(sessions.hold_command(str(claim)))} & h=$!; '
              + (f'until [ -p {fifo} ]; do :; done; ' if on_fifo else '')
              + f'{shlex.join(sessions.end_command(str(claim)))}; e=$?; wait $h; echo "end $e hold $?"')
    done = subprocess.run(["/usr/bin/unshare", "-p", "-f", "--mount-proc", "/bin/sh", "-c", script], env=env,
                          capture_output=True, timeout=30)
    return done.stdout.decode().splitlines(), done.stderr


def test_holding_says_whether_the_hold_still_runs(tmp_path):
    """A session's command that exits 137 was killed by the session's end only once the hold had
    ended (the launcher reaps it, then kills what is left): holding_command tells the two apart
    at once, where the SDK read the pod for 10 s on every 137 (an OOM-killed tool, `kill -9 $$`)."""
    def holding() -> int:
        return subprocess.run(sessions.holding_command(str(tmp_path)), capture_output=True, timeout=10).returncode
    assert holding() != 0                            # no hold yet: nothing says it runs
    hold = subprocess.Popen(sessions.hold_command(str(tmp_path)), env={"PATH": "/usr/bin:/bin", "EPISODE_ID": "p"},
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert parse_line(hold.stdout.readline()).kind == "ready"
        assert (tmp_path / sessions.HOLD_PID_FILE).read_text().strip() == str(hold.pid)
        subprocess.run(["/bin/sh", "-c", "kill -KILL $$"], timeout=10)   # a command of its own, killed
        assert holding() == 0
        os.kill(hold.pid, 9)                         # the deadline's watchdog
        _wait_for(lambda: holding() != 0)            # a zombie no longer holds, before it is reaped
        hold.wait(timeout=10)
        assert holding() != 0
        # the file is the session's to write: PID 1 (the launcher, which outlives the session's
        # end) never says the hold runs, however it is spelt
        for forged in ("1", "01", "0"):
            (tmp_path / sessions.HOLD_PID_FILE).write_text(forged + "\n")
            assert holding() != 0, forged
    finally:
        if hold.poll() is None:
            os.killpg(hold.pid, 9)
            hold.wait()


def test_a_command_given_stdin_reads_all_of_it_whatever_the_command_reads(tmp_path):
    """The runtime reports an exec's exit only once it copied all of its stdin into the process: a
    command that stops reading early (`head -c 1`, `grep -q`, a write refused at once) left the
    copy blocked and the exec never answered. Behind drained_command every byte is read, and the
    exit code is the command's own."""
    data = b"y" * 1_000_000
    with pytest.raises(StdinUnread):                 # what hung: the command alone
        run_like_the_runtime(["head", "-c", "1"], data, tmp_path, timeout=2)

    def drained(argv: list[str], stdin: bytes = data) -> subprocess.CompletedProcess:
        return run_like_the_runtime(sessions.drained_command(argv, len(stdin)), stdin, tmp_path)
    first = drained(["head", "-c", "1"])
    assert (first.returncode, first.stdout) == (0, b"y")
    failed = drained(["sh", "-c", "head -c 2; exit 3"])
    assert (failed.returncode, failed.stdout) == (3, b"yy")
    assert drained(["sh", "-c", "kill -KILL $$"]).returncode == 137      # killed: the runtime's 137, kept
    assert drained(["cat"], b"to the end\n").stdout == b"to the end\n"  # read whole, and it ends
    assert drained(["wc", "-c"]).stdout.strip() == b"1000000"
    (tmp_path / "dir").mkdir()
    assert drained(sessions.write_file_command("dir", len(data))).returncode == sessions.IS_A_DIRECTORY
