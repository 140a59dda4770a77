"""A session command past its timeout stopped in the sandbox (core.sessions.marked_command,
stop_command): run by the shells an image may have as /bin/sh. Marked, a command keeps its exit
code, output and stdin; stopped, it and everything it started are killed, and nothing else is.
The stop runs in a PID namespace of its own (it kills by what it finds in /proc)."""
from __future__ import annotations

import os
import secrets
import shlex
import subprocess

import pytest

from rolloutbatch.core import sessions
from tests.unit.core.pool_shell import SHELLS, has_pid_namespaces

needs_pid_namespace = pytest.mark.skipif(not has_pid_namespaces(), reason="needs unshare -p (a PID namespace)")


def _under(shell: list[str], argv: list[str]) -> list[str]:
    assert argv[0] == "/bin/sh"
    return [*shell, *argv[1:]]


@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_marked_command_keeps_its_exit_code_output_and_stdin(shell, tmp_path):
    marker = secrets.token_hex(16)
    script = f'read -r x; echo "$x ${sessions.COMMAND_MARKER}"; echo err >&2; exit 3'
    done = subprocess.run(_under(shell, sessions.marked_command(["env", "A=1", "sh", "-c", script], marker)),
                          input=b"in\n", capture_output=True, cwd=tmp_path, timeout=10)
    assert (done.returncode, done.stdout, done.stderr) == (3, f"in {marker}\n".encode(), b"err\n")
    killed = subprocess.run(_under(shell, sessions.marked_command(["sh", "-c", "kill -9 $$"], marker)),
                            capture_output=True, timeout=10)
    assert killed.returncode == -9 and killed.stderr == b""   # the signal's own end, as unmarked
    words = subprocess.run(_under(shell, sessions.marked_command(["printf", "<%s>", "a b", "", "-n"], marker)),
                           capture_output=True, timeout=10)
    assert words.stdout == b"<a b><><-n>"


@needs_pid_namespace
@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_stop_kills_the_marked_command_and_all_it_started_and_nothing_else(shell, tmp_path):
    """An honest `sleep 1; echo late > answer.txt`, a child it left in the background and one in a
    subshell, are all killed: nothing is written later. An unmarked process and another command's
    survive."""
    marker, other = secrets.token_hex(16), secrets.token_hex(16)
    command = ("(sleep 1; echo deep > deep.txt) & nohup sh -c 'sleep 1; echo bg > bg.txt' > /dev/null 2>&1 & "
               "sleep 1; echo late > answer.txt")
    marked = shlex.join(_under(shell, sessions.marked_command(["env", "A=1", "/bin/sh", "-c", command], marker)))
    others = shlex.join(_under(shell, sessions.marked_command(["sh", "-c", "sleep 2; echo other > other.txt"],
                                                              other)))
    stop = shlex.join(_under(shell, sessions.stop_command(marker)))
    driver = (f"{marked} & sleep 5 & bystander=$!; {others} & sleep 0.3; "
              f"{stop} > stopped.txt; echo $? >> stopped.txt; "
              "sleep 2.2; kill -0 $bystander 2>/dev/null && echo alive > bystander.txt; kill $bystander; wait")
    subprocess.run(["unshare", "-p", "-f", "--mount-proc", *shell, "-c", driver], cwd=tmp_path, timeout=30,
                   check=True)
    killed, code = (tmp_path / "stopped.txt").read_text().split()
    assert code == "0" and int(killed) >= 4   # the command's sh and sleep, its children (a shell may exec the last)
    assert not [name for name in ("answer.txt", "deep.txt", "bg.txt") if (tmp_path / name).exists()]
    assert (tmp_path / "other.txt").read_text() == "other\n"
    assert (tmp_path / "bystander.txt").read_text() == "alive\n"


@needs_pid_namespace
@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_stop_finds_what_a_loop_keeps_starting(shell, tmp_path):
    """A shell loop starting one process after another: a process started during a pass is killed
    by the next, until a pass finds none."""
    marker = secrets.token_hex(16)
    marked = shlex.join(_under(shell, sessions.marked_command(
        ["sh", "-c", "while :; do (true); sleep 0.01; done & while :; do echo x >> spun.txt; done"], marker)))
    stop = shlex.join(_under(shell, sessions.stop_command(marker)))
    driver = (f"{marked} & sleep 0.3; {stop} > /dev/null; echo $? > stopped.txt; "
              "wc -c < spun.txt > before.txt; sleep 0.5; wc -c < spun.txt > after.txt; wait")
    subprocess.run(["unshare", "-p", "-f", "--mount-proc", *shell, "-c", driver], cwd=tmp_path, timeout=30,
                   check=True)
    assert (tmp_path / "stopped.txt").read_text() == "0\n"
    assert (tmp_path / "before.txt").read_text() == (tmp_path / "after.txt").read_text()


@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_stop_without_proc_says_so(shell, tmp_path):
    text = sessions.stop_command("0" * 32)[2].replace("/proc/", f"{tmp_path}/none/")
    done = subprocess.run([*shell, "-c", text, "rolloutbatch-stop", "0" * 32], capture_output=True, timeout=10)
    assert done.returncode == 2 and b"no /proc" in done.stderr


@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_command_whose_stop_came_first_never_runs(shell, tmp_path):
    """On a loaded node a command's exec can start its process after the trainer's timeout and the
    stop: it found nothing to kill, and the command ran later and changed the workspace. The stop
    leaves a file named by the marker; a marked command that finds it exits at once. Another
    command's marker still runs."""
    marker, other = secrets.token_hex(16), secrets.token_hex(16)
    claim = tmp_path / "claim"
    claim.mkdir()
    text = sessions.stop_command(marker, str(claim))[2].replace("/proc/", f"{tmp_path}/no-pids/")
    pids = tmp_path / "no-pids"
    (pids / "self").mkdir(parents=True)
    (pids / "self" / "environ").write_text("")   # a /proc with no process in it: nothing to kill
    stopped = subprocess.run([*shell, "-c", text, "rolloutbatch-stop", marker], capture_output=True, timeout=10)
    assert (stopped.returncode, stopped.stdout) == (0, b"0\n"), stopped.stderr

    def run(mark: str) -> int:
        argv = _under(shell, sessions.marked_command(["sh", "-c", f"echo late > {mark}.txt"], mark, str(claim)))
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=10).returncode
    assert run(marker) == sessions.STOPPED_BEFORE_START and not (tmp_path / f"{marker}.txt").exists()
    assert run(other) == 0 and (tmp_path / f"{other}.txt").read_text() == "late\n"


@needs_pid_namespace
@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_stop_kills_a_marked_shell_that_has_not_execd_its_command_yet(shell, tmp_path):
    """Between its look for the stop's file and its exec, the marked shell's environment does not
    hold the marker yet (its `export` is not in /proc/<pid>/environ): its arguments do. Here a shell
    with the marked one's arguments and no marker in its environment stands for it."""
    marker = secrets.token_hex(16)
    early = shlex.join([*shell, "-c", "sleep 1; echo late > answer.txt", "rolloutbatch-marked", marker])
    stop = shlex.join(_under(shell, sessions.stop_command(marker, str(tmp_path))))
    driver = f"{early} & sleep 0.3; {stop} > stopped.txt; echo $? >> stopped.txt; sleep 1.5; wait"
    subprocess.run(["unshare", "-p", "-f", "--mount-proc", *shell, "-c", driver], cwd=tmp_path, timeout=30,
                   check=True)
    killed, code = (tmp_path / "stopped.txt").read_text().split()
    assert code == "0" and int(killed) >= 1 and not (tmp_path / "answer.txt").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_fifo_the_command_put_at_its_stops_mark_neither_blocks_the_stop_nor_lets_it_run(shell, tmp_path):
    """The session's commands run as the stop's user in the claim directory's reach: a command that
    knows its own marker can put a FIFO where the stop leaves its mark; a write there would block
    the stop for ever."""
    marker = secrets.token_hex(16)
    claim = tmp_path / "claim"
    claim.mkdir()
    os.mkfifo(claim / f"{sessions.STOPPED_PREFIX}{marker}")
    text = sessions.stop_command(marker, str(claim))[2].replace("/proc/", f"{tmp_path}/no-pids/")
    (tmp_path / "no-pids" / "self").mkdir(parents=True)
    (tmp_path / "no-pids" / "self" / "environ").write_text("")
    stopped = subprocess.run([*shell, "-c", text, "rolloutbatch-stop", marker], capture_output=True, timeout=10)
    assert stopped.returncode == 0, stopped.stderr
    run = subprocess.run(_under(shell, sessions.marked_command(["sh", "-c", "echo late > late.txt"], marker,
                                                                str(claim))), cwd=tmp_path, timeout=10)
    assert run.returncode == sessions.STOPPED_BEFORE_START and not (tmp_path / "late.txt").exists()
