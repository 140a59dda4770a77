"""A Job agent launcher's exit after one of its container's processes was killed for its memory
(core.launchers.oom_killed, AGENT_OOM_KILLED_EXIT). The runtime reports such a container
OOMKilled whatever its exit code, and the kubelet fails the pod before its verifier
(core.pod_reading.agent_init_oom_killed); a non-zero exit is what the Job's podFailurePolicy fails the
index on. With the launcher's exit 0 only the never-started verifier's 137 kept the Job from
running the agent again (tests/security/test_pid_exhaustion.py). Run by real shells, the counters being files of the test's;
the whole launcher (it `kill -1`s) in a PID namespace of its own."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from rolloutbatch.core import launchers, manifests, naming, pool_delivery
from rolloutbatch.core.events import split_agent_record
from rolloutbatch.core.vocabulary import AGENT_OOM_KILLED_EXIT
from tests.unit.core.pool_shell import SHELLS, has_pid_namespaces
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL, REF

V1_NONE = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"
V1_KILLED = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
V2_NONE = "low 0\nhigh 0\nmax 4\noom 0\noom_kill 0\noom_group_kill 0\n"
V2_KILLED = "low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n"


def _counters(tmp_path, texts: dict[str, str | None]) -> tuple[str, ...]:
    """Counter files of the test's, by name; a None text: a file that is not there."""
    paths = []
    for name, text in texts.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        paths.append(str(path))
    return tuple(paths)


def _run_check(shell: list[str], counters: tuple[str, ...]) -> subprocess.CompletedProcess:
    snippet = launchers.oom_killed(AGENT_OOM_KILLED_EXIT, counters).replace("$$", "$")
    return subprocess.run([*shell, "-c", snippet + "exit 0"], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("texts, killed", [
    ({"v1": V1_KILLED, "v2": None}, True),
    ({"v1": None, "v2": V2_KILLED}, True),
    ({"v1": V1_NONE, "v2": None}, False),
    ({"v1": None, "v2": V2_NONE}, False),
    ({"v1": None, "v2": None}, False),              # gVisor: neither file
    ({"v1": "", "v2": None}, False),
    ({"v1": "oom_kill\noom_kill x\noom_kill -1\noom_killed 3\n", "v2": None}, False),   # nothing it can count
    ({"v1": "oom_kill 12345678901234567890\n", "v2": None}, True),   # past 64 bits (or the shell's error: not 0)
])
def test_the_check_exits_only_when_a_counter_counts_a_kill(tmp_path, texts, killed):
    for shell in SHELLS:
        done = _run_check(shell, _counters(tmp_path, texts))
        assert done.returncode == (AGENT_OOM_KILLED_EXIT if killed else 0), (shell, done.stderr)
        assert not done.stderr, (shell, done.stderr)     # a missing or odd file says nothing


def _job_agent(tmp_path, counters: tuple[str, ...], agent: str) -> tuple[int, dict | None]:
    term = tmp_path / "termination-log"
    term.write_text("")
    script = launchers.agent_launcher("", 5, oom_exit=AGENT_OOM_KILLED_EXIT)
    for real, ours in zip(launchers.OOM_COUNTERS, counters):
        script = script.replace(real, ours)
    script = script.replace("$$", "$").replace(naming.TERMINATION_MESSAGE_PATH, str(term))
    done = subprocess.run([shutil.which("unshare"), "-p", "-f", "--mount-proc", "/bin/sh", "-c", script, "agent",
                           "/bin/sh", "-c", agent], capture_output=True, timeout=60)
    return done.returncode, split_agent_record(term.read_text())[1]


@pytest.mark.skipif(not has_pid_namespaces(), reason="needs unshare -p (a PID namespace)")
@pytest.mark.parametrize("texts, agent, code, record", [
    ({"v1": V1_KILLED, "v2": None}, "exit 0", AGENT_OOM_KILLED_EXIT, {"exit_code": 0, "timed_out": False}),
    ({"v1": None, "v2": V2_KILLED}, "exit 3", AGENT_OOM_KILLED_EXIT, {"exit_code": 3, "timed_out": False}),
    ({"v1": V1_NONE, "v2": None}, "exit 3", 0, {"exit_code": 3, "timed_out": False}),
    ({"v1": None, "v2": None}, "exit 0", 0, {"exit_code": 0, "timed_out": False}),
])
def test_a_job_agent_launcher_exits_so_after_its_record(tmp_path, texts, agent, code, record):
    # the record first, as always: the verdict reads the agent's own exit there
    assert _job_agent(tmp_path, _counters(tmp_path, texts), agent) == (code, record)


def test_only_a_job_pods_agent_launcher_checks():
    # A pool's agent runs beside its verifier: the kubelet still runs that verifier after an OOM
    # kill, and the verdict is the verifier's (a non-zero launcher exit would make it NonZeroExit).
    checked = launchers.oom_killed(AGENT_OOM_KILLED_EXIT)
    spec = parse_spec({**MINIMAL, "verifier": {"files": {"v.py": "x"}, "command": ["python", "/verifier/v.py"]}})
    job = manifests.job(REF, spec, None)
    agent = next(c for c in job["spec"]["template"]["spec"]["initContainers"] if c["name"] == naming.AGENT_CONTAINER)
    assert checked in agent["command"][2]
    rule = next(r for r in job["spec"]["podFailurePolicy"]["rules"]
                if (r.get("onExitCodes") or {}).get("containerName") == naming.AGENT_CONTAINER)
    assert rule["action"] == "FailIndex" and rule["onExitCodes"] == {
        "containerName": naming.AGENT_CONTAINER, "operator": "NotIn", "values": [0]}
    assert checked not in pool_delivery.launcher("/claim", 60, verified=True)
