"""A session command's timeout and the processes it leaves (core.sessions.marked_command,
stop_command): one past its timeout, or interrupted by Ctrl-C, is stopped in the sandbox with all
it started before the trainer hears of it, and one that leaves a process behind returns when its
output closes."""
from __future__ import annotations

import time

import pytest

from rolloutbatch.kube.errors import TimedOut
from tests.support.interrupts import ctrl_c_in
from tests.e2e.test_sessions import one_session

pytestmark = [pytest.mark.cluster]


def test_a_command_that_leaves_a_background_process_with_its_output_redirected_returns_at_once(
        operator_process, namespace):
    """A coding agent's everyday `server &` (a dev server, a watcher) leaves a process behind. An
    exec returns when its output closes, so one holding the exec's stdout/stderr keeps run() until
    its timeout; the README and run() say to redirect its output, and then run() returns at once
    with the command's own exit code, the process still running for the next command."""
    with one_session(namespace, "bpool") as session:
        started = time.monotonic()
        outcome = session.run("echo started; nohup sleep 60 > /dev/null 2>&1 &", timeout=15)
        took = time.monotonic() - started
        after = session.run("echo next", timeout=15)
    assert after.stdout == b"next\n"
    # well under its 15 s timeout (an exec of a trivial command takes ~0.1 s; a loaded CI machine more)
    assert took < 12 and outcome.exit_code == 0 and outcome.stdout == b"started\n", (took, outcome)


def test_a_command_past_its_timeout_is_stopped_not_left_to_change_the_workspace(operator_process, namespace):
    """run(timeout=...) raises TimedOut, as a tool executor's timeout does; the command itself must
    not run on in the sandbox and change the workspace the verifier grades after the trainer moved on
    (here: overwriting the answer the trainer wrote after the timeout)."""
    with one_session(namespace, "tpool") as session:
        with pytest.raises(TimedOut, match="it was stopped: its processes in the sandbox were killed"):
            session.run("(sleep 5; echo deeper > deeper.txt) & sleep 6; echo late > answer.txt", timeout=2)
        session.write_file("answer.txt", b"42\n")
        time.sleep(8)
        answer = session.read_file("answer.txt")
        left = session.run("ps -o pid,args 2>/dev/null || ls /proc").stdout
        deeper = session.run("ls deeper.txt").exit_code
    assert answer == b"42\n" and deeper != 0, (answer, deeper, left)


def test_a_command_interrupted_by_ctrl_c_is_stopped_not_left_to_change_the_workspace(operator_process, namespace):
    """A trainer's Ctrl-C in run() leaves the exec as a timeout does: the command is stopped in the
    sandbox before KeyboardInterrupt goes on, and the answer written after it stands."""
    with one_session(namespace, "cpool") as session:
        with ctrl_c_in(2), pytest.raises(KeyboardInterrupt):
            session.run("(sleep 5; echo deeper > deeper.txt) & sleep 6; echo late > answer.txt", timeout=60)
        session.write_file("answer.txt", b"42\n")
        time.sleep(8)
        answer = session.read_file("answer.txt")
        deeper = session.run("ls deeper.txt").exit_code
    assert answer == b"42\n" and deeper != 0, (answer, deeper)
