"""The launchers' own clock (core.launchers.uptime, ran_past): /proc/uptime read by the shell in
hundredths of a second, so an agent that killed its watchdog (it runs as the agent's user) and
ended a fraction of a second past its time is still recorded as past it. In whole seconds an end
10.75 s into a 10 s limit read 14 - 4 = 10: not past, and the pod's deadline then left its
verifier no time (a bad attempt made lost on purpose, proved on the real node by
tests/security/test_verifier_tampering.py). Launchers run by real shells; those that `kill -1`
run in a PID namespace of their own."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import launchers, naming
from rolloutbatch.core.events import split_agent_record
from rolloutbatch.core.vocabulary import AGENT_OVERRAN_EXIT
from tests.unit.core.pool_shell import (SHELLS, episode, hand_over, has_pid_namespaces,  # noqa: F401
                                        kills_its_watchdog, reap_launchers, start_launcher, wait_for_file)
from rolloutbatch.core import pool_delivery



def _read_clock(shell: list[str], path, texts: list[str]) -> list[str]:
    """What the launcher's shell makes of each text as /proc/uptime's content."""
    snippet = launchers.uptime("x").replace("$$", "$").replace("/proc/uptime", '"$f"')
    script = "".join(f'f={path}/{i}; {snippet}echo "<$x>"; ' for i in range(len(texts)))
    for i, text in enumerate(texts):
        (path / str(i)).write_text(text)
    done = subprocess.run([*shell, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and not done.stderr, (shell, done.stderr)
    return [line[1:-1] for line in done.stdout.splitlines()]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10 ** 11), min_size=1, max_size=40))
def test_the_clock_is_the_uptime_in_hundredths(tmp_path_factory, hundredths):
    # as Linux and gVisor print it ("%lu.%02lu"; a gVisor sandbox's starts at 0.00): leading zeros
    # are no octal to sh's arithmetic
    path = tmp_path_factory.mktemp("uptime")
    texts = [f"{h // 100}.{h % 100:02d} 123.45\n" for h in hundredths]
    for shell in SHELLS:
        assert _read_clock(shell, path, texts) == [str(h) for h in hundredths], shell


@pytest.mark.parametrize("text", ["", "\n", "12.3 1.00\n", "1e3 1\n", ".55 1\n", "1.2.3 1\n", "5. 1\n", "-1.00 1\n",
                                  "12,34 1\n", "0x1.00 1\n", "1.234 1\n"])
def test_an_unreadable_clock_is_unknown_never_a_number(tmp_path, text):
    # unknown: the launcher then relies on its watchdog alone, as it did before it read a clock
    for shell in SHELLS:
        assert _read_clock(shell, tmp_path, [text]) == [""], (shell, text)


def _early_in_a_second() -> None:
    """Until the kernel's uptime is early in a second: an end 1.5 s later then falls in the next
    whole second, where whole seconds read it as 1 s, not past a 1 s limit."""
    while True:
        with open("/proc/uptime") as uptime:
            seconds = float(uptime.read().split()[0])
        if seconds % 1 < 0.15:
            return
        time.sleep(0.01)


# Kills its watchdog (the parent of the launcher's `sleep 1`, and that sleep) at once, then ends
# 1.5 s into its 1 s: past its time, well inside the slack.
_KILL_WATCHDOG_AND_END_LATE = kills_its_watchdog(1, 'sleep 1.5; exit 0')


@pytest.mark.skipif(not has_pid_namespaces(), reason="needs unshare -p (a PID namespace)")
def test_a_job_agent_that_ends_a_fraction_past_its_time_is_recorded_timed_out(tmp_path):
    term = tmp_path / "termination-log"
    term.write_text("")
    script = launchers.agent_launcher("", 1).replace("$$", "$").replace(naming.TERMINATION_MESSAGE_PATH, str(term))
    _early_in_a_second()
    done = subprocess.run([shutil.which("unshare"), "-p", "-f", "--mount-proc", "/bin/sh", "-c", script, "agent",
                           "/bin/sh", "-c", _KILL_WATCHDOG_AND_END_LATE], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr          # inside the slack: the verifier still starts
    assert split_agent_record(term.read_text())[1] == {"exit_code": 0, "timed_out": True}


def test_a_pooled_agent_that_ends_a_fraction_past_its_time_is_its_timeout(tmp_path):
    proc = start_launcher(tmp_path)
    wait_for_file(tmp_path / "warm")
    _early_in_a_second()
    hand_over(tmp_path, pool_delivery.episode_script(
        episode("b", 0, 1, ("/bin/sh", "-c", _KILL_WATCHDOG_AND_END_LATE), timeout_seconds=1)))
    assert proc.wait(timeout=20) == AGENT_OVERRAN_EXIT


@pytest.mark.skipif(not has_pid_namespaces(), reason="needs unshare -p (a PID namespace)")
def test_a_job_agent_within_its_time_is_not_timed_out(tmp_path):
    term = tmp_path / "termination-log"
    term.write_text("")
    script = launchers.agent_launcher("", 2).replace("$$", "$").replace(naming.TERMINATION_MESSAGE_PATH, str(term))
    done = subprocess.run([shutil.which("unshare"), "-p", "-f", "--mount-proc", "/bin/sh", "-c", script, "agent",
                           "/bin/sh", "-c", "sleep 1.2; exit 4"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert split_agent_record(term.read_text())[1] == {"exit_code": 4, "timed_out": False}
