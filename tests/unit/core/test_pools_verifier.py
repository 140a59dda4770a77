"""A pool with a verifier (core.pools, core.pool_delivery, core.verdict): the pod's containers (the
agent's, the verifier's and its files writer's), what each mounts, the Job's failure rules, which batches may claim it, the two phases' launchers
run by a real /bin/sh (each as PID 1 of a PID namespace, as in a container: they `kill -KILL -1`),
and how the verdict reads such a pod.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time

import pytest

from rolloutbatch.core import naming, pool_children, pool_delivery, pool_spec, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log, split_agent_record
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.verdict import is_infrastructure_failure, never_delivered
from rolloutbatch.core.verdict_verified import judge_verified
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.core.vocabulary import AGENT_OVERRAN_EXIT, NOT_DELIVERED_EXIT
from tests.unit.core.pool_shell import has_pid_namespaces, hand_over, kills_its_watchdog, reap_launchers, start_phase_launcher  # noqa: F401

POOL = pool_spec.PoolRef(name="swe", namespace="team", uid="0123456789abcdef")
SPEC = {"size": 2, "task": {"files": {"episode.py": "print(1)"}}}


def _spec(**extra) -> pool_spec.PoolSpec:
    return pool_spec.parse_pool_spec({**SPEC, **extra})


def _mounts(container: dict) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container["volumeMounts"]}


# -- the pod ------------------------------------------------------------------------------------
def test_a_verifier_pool_pod_has_the_agent_and_a_waiting_verifier() -> None:
    spec = _spec(verifier={"image": "grader:1", "resources": {"requests": {"cpu": "50m"}}, "mountPath": "/grade"})
    pod = pool_children.pod_spec(POOL, spec)
    agent, verifier, writer = pod["containers"]
    assert (agent["name"], verifier["name"], writer["name"]) == (naming.AGENT_CONTAINER, naming.VERIFIER_CONTAINER,
                                                                 naming.VERIFIER_FILES_CONTAINER)
    assert verifier["image"] == "grader:1" and verifier["resources"] == {"requests": {"cpu": "50m"}}
    # the agent sees neither the verifier's directory nor its files
    assert _mounts(agent) == {"task": "/task", "workspace": "/workspace", "claim": naming.CLAIM_MOUNT_PATH}
    assert _mounts(verifier) == {"task": "/task", "workspace": "/workspace",
                                 "verifier-claim": naming.VERIFIER_CLAIM_MOUNT_PATH, "verifier": "/grade",
                                 "verifier-files-claim": naming.VERIFIER_FILES_CLAIM_MOUNT_PATH}
    # the verifier's files and input are the writer's alone: read-only where the verifier (and the
    # agent's code it runs, of its UID) sees them, as a Job pod's ConfigMap is; the writer sees
    # nothing else (no workspace: nothing of the agent's reaches it)
    assert {m["name"] for m in verifier["volumeMounts"] if m.get("readOnly")} == \
        {"task", "verifier", "verifier-files-claim"}
    assert _mounts(writer) == {"verifier": "/grade", "verifier-files-claim": naming.VERIFIER_FILES_CLAIM_MOUNT_PATH}
    assert not any(m.get("readOnly") for m in writer["volumeMounts"])
    assert writer["image"] == "grader:1" and writer["resources"] == pool_children.FILES_WRITER_RESOURCES
    probe = verifier["startupProbe"]["exec"]["command"][-1]
    assert probe.startswith(f"test -e {naming.VERIFIER_CLAIM_MOUNT_PATH}/warm && ") and "/proc/1/fd/0" in probe
    assert pool_children.episode_container(spec) == naming.AGENT_CONTAINER
    assert pool_children.episode_container(_spec()) == naming.CONTAINER_NAME
    # a verifier is part of what a warm pod is made of
    assert pool_children.template_digest(POOL, spec) != pool_children.template_digest(POOL, _spec())


def _qos(pod: dict) -> str:
    """The pod's QoS class as upstream's GetPodQOS (pkg/apis/core/v1/helper/qos) reads cpu and memory."""
    guaranteed, any_set = True, False
    for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            any_set = any_set or r in req or r in lim
            if r not in lim or req.get(r, lim.get(r)) != lim[r]:
                guaranteed = False
    return "Guaranteed" if guaranteed else ("Burstable" if any_set else "BestEffort")


@pytest.mark.parametrize("sized, qos", [
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
    ({"limits": {"cpu": "500m", "memory": "256Mi"}}, "Guaranteed"),            # requests default to limits
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}, "Burstable"),
    ({"requests": {"cpu": "1"}}, "Burstable"),
])
def test_the_files_writer_keeps_the_pods_qos_class(sized, qos) -> None:
    """A pool whose agent and verifier are sized requests == limits had Guaranteed pods (evicted
    last under node pressure); the writer's requests below its limits made every one Burstable."""
    spec = _spec(resources=sized, verifier={"resources": sized})
    pod = pool_children.pod_spec(POOL, spec)
    assert _qos({"containers": pod["containers"][:2]}) == qos == _qos(pod)


def test_without_a_verifier_the_pod_is_as_before() -> None:
    pod = pool_children.pod_spec(POOL, _spec())
    assert [c["name"] for c in pod["containers"]] == [naming.CONTAINER_NAME]
    assert [vol["name"] for vol in pod["volumes"]] == ["task", "workspace", "claim"]


@pytest.mark.parametrize("mount", ["/", "/workspace", "/workspace/v", "/task/v", naming.CLAIM_MOUNT_PATH,
                                   "/rollout", "relative", "/proc/x"])
def test_the_verifiers_files_need_a_path_of_their_own(mount: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(verifier={"mountPath": mount})
    assert err.value.field == "spec.verifier.mountPath"


@pytest.mark.parametrize("pool", [
    {"task": {**SPEC["task"], "mountPath": "//task"}, "verifier": {"mountPath": "/task/grader"}},
    {"task": {**SPEC["task"], "mountPath": "/task/."}, "verifier": {"mountPath": "/task/grader"}},
    {"task": {**SPEC["task"], "mountPath": "/x/../task"}, "verifier": {"mountPath": "/task/grader"}},
    {"workspace": {"mountPath": "/w/./ws"}, "verifier": {"mountPath": "/w/ws"}},
    {"workspace": {"mountPath": "/w//ws/"}, "verifier": {"mountPath": "/w/ws/grader"}},
])
def test_the_verifiers_files_are_kept_apart_from_the_task_and_workspace_however_spelled(pool: dict) -> None:
    """The runtime cleans every mount path: '//task' is /task, and a verifier mount at
    /task/grader a mount point inside the read-only task files, which it cannot make."""
    with pytest.raises(SpecError) as err:
        pool_spec.parse_pool_spec({**SPEC, **pool})
    assert err.value.field == "spec.verifier.mountPath"


def test_the_job_judges_the_agent_first_then_the_verifier() -> None:
    rules = pools.failure_rules(_spec(verifier={}))
    said = [(r["action"], r.get("onExitCodes", {}).get("containerName"), r.get("onExitCodes", {}).get("operator"))
            for r in rules]
    assert said == [("Count", None, None), ("Count", "agent", "In"), ("FailIndex", "agent", "NotIn"),
                    ("Count", "verifier", "In"), ("FailIndex", "verifier", "NotIn")]
    job = pools.pooled_job(parse_ref(), 4, 2, 1, 600, pools.episode_seconds(60, 30), POOL, _spec(verifier={}))
    assert job["spec"]["podFailurePolicy"]["rules"] == rules
    # a cold pod's deadline: its prepare, the agent, the verifier and the slack between them
    prepare = _spec().prepare_timeout_seconds
    assert job["spec"]["template"]["spec"]["activeDeadlineSeconds"] == prepare + 60 + 30 + 5 + pools.DELIVERY_SLACK_SECONDS


def parse_ref():
    from rolloutbatch.core.model import BatchRef
    return BatchRef(namespace="team", name="b", uid="b-1", generation=1)


def test_a_pod_is_warm_only_when_both_containers_wait() -> None:
    pod = pool_children.warm_pod(POOL, _spec(verifier={}))
    pod["metadata"]["name"] = "p"
    running = {"started": True, "state": {"running": {}}}
    pod["status"] = {"phase": "Running", "containerStatuses": [{"name": "agent", **running},
                                                               {"name": "verifier-files", **running},
                                                               {"name": "verifier", "started": False,
                                                                "state": {"running": {}}}]}
    assert not pools.is_warm(pod)
    pod["status"]["containerStatuses"][2]["started"] = True
    assert pools.is_warm(pod)
    pod["status"]["containerStatuses"][1]["state"] = {"terminated": {"exitCode": 0}}
    assert not pools.is_warm(pod)        # its files writer ended: it can be handed no files
    pod["status"]["containerStatuses"].pop(1)
    pod["status"]["containerStatuses"].pop()
    assert not pools.is_warm(pod)        # one not reported yet


@pytest.mark.parametrize("pool_verifier, batch_mount, said", [
    (None, None, None),
    ({}, "/verifier", None),
    ({"mountPath": "/g"}, "/g", None),
    ({}, None, "give the batch one"),
    (None, "/verifier", "needs a pool with spec.verifier"),
    ({"mountPath": "/g"}, "/verifier", "is not the pool's"),
])
def test_which_batches_may_claim_a_pools_pods(pool_verifier, batch_mount, said) -> None:
    spec = _spec(verifier=pool_verifier) if pool_verifier is not None else _spec()
    problem = pool_spec.verifier_conflict(spec, batch_mount)
    assert (problem is None) if said is None else (said in problem)


# -- the batch's side -----------------------------------------------------------------------------
def test_a_pooled_batch_may_have_a_verifier_but_not_its_container() -> None:
    spec = parse_spec({"episodes": 2, "poolRef": {"name": "swe"}, "verifier": {"files": {"verify.py": "x"}}})
    assert spec.verifier is not None and spec.verifier.mount_path == "/verifier"
    for field in ("image", "resources"):
        with pytest.raises(SpecError) as err:
            parse_spec({"episodes": 2, "poolRef": {"name": "swe"},
                        "verifier": {field: "x" if field == "image" else {"limits": {"cpu": "1"}}}})
        assert err.value.field == f"spec.verifier.{field}"


def test_a_pooled_batch_may_use_the_verifier_path_its_pool_has() -> None:
    """A pooled batch cannot set its task (the pool's task is mounted where the pool says): its
    verifier's path is checked against the pool's mounts (core.pool_spec), not the default /task."""
    pool = _spec(task={**SPEC["task"], "mountPath": "/t"}, verifier={"mountPath": "/task/grader"})
    batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"},
                        "verifier": {"files": {"verify.py": "x"}, "mountPath": "/task/grader"}})
    assert batch.verifier is not None and pool_spec.verifier_conflict(pool, batch.verifier.mount_path) is None


@pytest.mark.parametrize("verifier, field", [
    ({"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, "spec.verifier.env"),
    ({"files": {"v.py": "a\0b"}}, "spec.verifier.env"),
    ({"command": ["A=1", "x"]}, "spec.verifier.command"),
])
def test_what_cannot_reach_a_pools_verifier_is_refused(verifier: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"episodes": 1, "poolRef": {"name": "swe"}, "verifier": verifier})
    assert err.value.field == field


# -- the two phases, run --------------------------------------------------------------------------
needs_pid_namespace = pytest.mark.skipif(not has_pid_namespaces(), reason="needs unshare -p (a PID namespace)")


def _wait_for(path, seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def _agent(tmp_path):
    claim, message = tmp_path / "claim", tmp_path / "agent-message"
    claim.mkdir()
    message.write_text("")
    proc = start_phase_launcher(pool_delivery.launcher(str(claim), 5, verified=True), tmp_path, message, claim)
    _wait_for(claim / "warm")
    return proc, claim, message


def _episode(command: tuple[str, ...], timeout: int = 10, **extra) -> bytes:
    return pool_delivery.episode_script(pool_delivery.Episode("b", 0, 1, command, timeout_seconds=timeout, **extra))


@needs_pid_namespace
def test_the_agent_phase_records_its_exit_and_ends_well(tmp_path) -> None:
    proc, claim, message = _agent(tmp_path)
    assert proc.poll() is None       # warm: waiting for its episode
    command = ("/bin/sh", "-c", 'printf \'{"event":"ready"}\\n\' > "$0"; sleep 300 & exit 3', str(message))
    assert hand_over(claim, _episode(command))
    assert proc.wait(timeout=20) == 0
    own, record = split_agent_record(message.read_text())
    assert record is not None and (record["exit_code"], record["timed_out"]) == (3, False)
    assert "ready" in own


@needs_pid_namespace
def test_the_agent_phase_is_stopped_at_the_time_it_was_handed(tmp_path) -> None:
    proc, claim, message = _agent(tmp_path)
    started = time.monotonic()
    assert hand_over(claim, _episode(("sleep", "300"), timeout=1))
    assert proc.wait(timeout=20) == 0 and time.monotonic() - started < 10
    assert split_agent_record(message.read_text())[1]["timed_out"] is True


def _verifier(tmp_path):
    claim, files, message = tmp_path / "vclaim", tmp_path / "files", tmp_path / "verifier-message"
    claim.mkdir()
    files.mkdir()
    proc = start_phase_launcher(pool_delivery.verifier_launcher(str(claim)), tmp_path, message, claim)
    _wait_for(claim / "warm")
    return proc, claim, files, message


def _verification(files, command: tuple[str, ...], timeout: int = 10, verify: str = "") -> bytes:
    return pool_delivery.episode_script(
        pool_delivery.Episode("b", 2, 1, command, env=(("GRADE", "strict"),), timeout_seconds=timeout,
                              files=(("verify.sh", verify),), files_dir=str(files), input_json='{"q":1}'),
        str(files.parent / "vclaim"))


@needs_pid_namespace
def test_the_verifier_phase_runs_with_its_files_env_and_input(tmp_path) -> None:
    proc, claim, files, message = _verifier(tmp_path)
    assert not any(files.iterdir())            # nothing of the verifier is in the pod before its phase
    verify = ('printf \'{"event":"reward","reward":1,"index":%s,"grade":"%s","input":%s}\\n\' '
              f'"$EPISODE_INDEX" "$GRADE" "$(cat "$EPISODE_INPUT")" > {message}')
    assert hand_over(claim, _verification(files, ("/bin/sh", str(files / "verify.sh")), verify=verify))
    assert proc.wait(timeout=20) == 0
    assert json.loads(message.read_text()) == {"event": "reward", "reward": 1, "index": 2, "grade": "strict",
                                               "input": {"q": 1}}
    assert (files / "verify.sh").read_text() == verify


@needs_pid_namespace
@pytest.mark.parametrize("exit_code, reported", [(0, 0), (3, 3), (NOT_DELIVERED_EXIT, 1)])
def test_the_verifiers_exit_code_is_its_own_but_never_not_delivered(tmp_path, exit_code, reported) -> None:
    proc, claim, files, _ = _verifier(tmp_path)
    hand_over(claim, _verification(files, ("/bin/sh", "-c", f"exit {exit_code}")))
    assert proc.wait(timeout=20) == reported


@needs_pid_namespace
def test_a_hanging_verifier_is_stopped_at_its_timeout(tmp_path) -> None:
    proc, claim, files, _ = _verifier(tmp_path)
    started = time.monotonic()
    hand_over(claim, _verification(files, ("/bin/sh", "-c", "setsid sleep 300 & sleep 300"), timeout=1))
    assert proc.wait(timeout=20) == v.VERIFIER_TIMEOUT_EXIT and time.monotonic() - started < 10


@needs_pid_namespace
def test_a_verifier_told_its_agent_never_ran_grades_nothing(tmp_path) -> None:
    proc, claim, _, message = _verifier(tmp_path)
    hand_over(claim, pool_delivery.ABORT_SCRIPT)
    assert proc.wait(timeout=20) == NOT_DELIVERED_EXIT
    assert not message.exists()


@needs_pid_namespace
def test_a_verifier_ended_while_it_waits_says_not_delivered(tmp_path) -> None:
    import signal
    proc, _, _, _ = _verifier(tmp_path)
    subprocess.run(["pkill", "-TERM", "-P", str(proc.pid)], check=False)   # the namespace's PID 1
    assert proc.wait(timeout=20) == NOT_DELIVERED_EXIT or proc.returncode == -signal.SIGTERM


# -- the verdict's reading ---------------------------------------------------------------------
def _pod(agent: dict, verifier: dict, phase: str = "Running") -> dict:
    return {"metadata": {"name": "p", "uid": "u", "annotations": {naming.POOLED_ANNOTATION: "true",
                                                                  v.COMPLETION_INDEX_KEY: "0"}},
            "status": {"phase": phase, "containerStatuses": [{"name": "agent", **agent},
                                                             {"name": "verifier", **verifier}]}}


def _ended(code: int, message: str = "") -> dict:
    return {"started": False, "state": {"terminated": {"exitCode": code, "message": message,
                                                       "startedAt": "2026-12-03T00:00:00Z",
                                                       "finishedAt": "2026-12-03T00:00:05Z"}}}


WAITING = {"started": True, "state": {"running": {"startedAt": "2026-12-03T00:00:00Z"}}}


def test_the_agent_of_a_pools_pod_is_read_from_its_container() -> None:
    facts = pod_facts(_pod(_ended(0, '{"event":"agent_exit","exit_code":0,"timed_out":false}'), WAITING))
    assert facts.agent is not None and facts.agent.state == "terminated" and facts.agent.exit_code == 0
    assert facts.verifier_started and not facts.container_started
    assert pod_facts(_pod(WAITING, WAITING)).container_started


@pytest.mark.parametrize("agent, verifier, lost", [
    (NOT_DELIVERED_EXIT, NOT_DELIVERED_EXIT, True),    # the agent never got its episode
    (0, NOT_DELIVERED_EXIT, True),                     # the verifier never got its phase
    (120, NOT_DELIVERED_EXIT, False),                  # the agent's launcher failed: the episode's own
    (0, 1, False),
    (0, 0, False),
])
def test_a_pod_that_never_ran_its_episode_is_told_from_one_that_did(agent, verifier, lost) -> None:
    facts = pod_facts(_pod(_ended(agent), _ended(verifier), phase="Failed"))
    assert never_delivered(facts) is lost
    assert is_infrastructure_failure(facts) is lost


@pytest.mark.parametrize("agent, verifier, handed", [
    (NOT_DELIVERED_EXIT, NOT_DELIVERED_EXIT, "delivered_at"),          # the agent's launcher, after its hand-over
    (0, NOT_DELIVERED_EXIT, "verifier_delivered_at"),                  # the verifier's, after its phase's
])
def test_an_exit_not_delivered_after_the_phase_was_handed_over_is_no_pod_that_never_ran(agent, verifier,
                                                                                      handed) -> None:
    """A launcher exits so only while it waits: once the operator has its word that the phase
    was handed over, such an exit is what ran in the container (the agent's code may ptrace its
    PID 1), never an infrastructure retry that re-rolls a failed attempt."""
    facts = dataclasses.replace(pod_facts(_pod(_ended(agent), _ended(verifier), phase="Failed")), **{handed: 102.0})
    assert not never_delivered(facts) and not is_infrastructure_failure(facts)
    if handed == "verifier_delivered_at":
        result = judge_verified(facts, None, parse_log(b""), verifier_error=None, batch_deadline_at=None, now=200.0)
        assert result.outcome == v.OUTCOME_FAILED and result.reason != v.EP_INFRASTRUCTURE   # graded: not re-rolled


# -- from an attack review: each failed before its fix ---------------------------------------------
HOSTILE = ["", "-n", "%s%d\\n\\c", "'; touch /tmp/pwned_rb; '", "$(touch /tmp/pwned_rb)`id`", "a\nb\r\n\n",
           "\\0\\x41 é ☃ \t", "'" * 5000, "-e\n", "ROLLOUTBATCH_EPISODE=ready\nexit 0"]


@needs_pid_namespace
def test_hostile_files_and_env_reach_the_verifier_verbatim(tmp_path) -> None:
    import os
    proc, claim, files, message = _verifier(tmp_path)
    names = ["-n", "--", ".x", "a..b", "_", "A-B.c"]
    file_items = tuple((n, HOSTILE[i % len(HOSTILE)] + n) for i, n in enumerate(names))
    env = tuple((f"V{i}", s) for i, s in enumerate(HOSTILE)) + (("A-B.c", "x=y"),)
    dump = ("/usr/bin/env", "python3", "-c",
            "import json,os,sys;json.dump(dict(os.environ), open(sys.argv[1],'w'))", str(message))
    script = pool_delivery.episode_script(pool_delivery.Episode(
        "b", 0, 1, dump, env=env, timeout_seconds=10, files=file_items, files_dir=str(files),
        input_json=json.dumps({"q": HOSTILE})), str(claim))
    assert hand_over(claim, script)
    assert proc.wait(timeout=20) == 0
    got = json.loads(message.read_text())
    assert all(got[name] == value for name, value in env)
    assert all((files / name).read_bytes().decode() == content for name, content in file_items)
    assert json.loads((claim / "input.json").read_text()) == {"q": HOSTILE}
    assert not os.path.exists("/tmp/pwned_rb")


@needs_pid_namespace
def test_an_agent_that_kills_its_watchdog_is_still_recorded_as_timed_out(tmp_path) -> None:
    proc, claim, message = _agent(tmp_path)
    # the watchdog's subshell (the sleep's parent) and its sleep, once it runs (it starts after the agent)
    kill_watchdog = kills_its_watchdog(2, 'sleep 5; exit 0')
    assert hand_over(claim, _episode(("/bin/sh", "-c", kill_watchdog), timeout=2))
    assert proc.wait(timeout=30) == 0       # 3 s past its time: within the slack, graded
    record = split_agent_record(message.read_text())[1]
    assert record is not None and record["timed_out"] is True, record


@needs_pid_namespace
def test_an_agent_that_outlives_its_watchdog_past_the_slack_fails_its_container(tmp_path) -> None:
    """More than VERIFIER_SLACK_SECONDS past its time: the launcher records it, then exits
    AGENT_OVERRAN_EXIT, which the Job fails the index on (the agent's container is judged first),
    so a verifier kept waiting into the pod's deadline never turns the attempt into a retry."""
    proc, claim, message = _agent(tmp_path)
    kill_watchdog = kills_its_watchdog(2, 'sleep 8; exit 0')   # 2 s of time, 6.5 s past it (the slack is 5)
    assert hand_over(claim, _episode(("/bin/sh", "-c", kill_watchdog), timeout=2))
    assert proc.wait(timeout=30) == AGENT_OVERRAN_EXIT
    record = split_agent_record(message.read_text())[1]
    assert record is not None and record["timed_out"] is True, record


@needs_pid_namespace
def test_a_verifier_phase_whose_files_cannot_be_written_is_the_verifiers_failure(tmp_path) -> None:
    """The agent's code can fill the disk before its phase ends: the verifier's files then fail to
    arrive, and that must read as a failed verifier (exit 1), never as a pod that never got its
    episode (121: a re-rolled attempt). Its directories are in memory too (test above)."""
    proc, claim, files, _ = _verifier(tmp_path)
    script = pool_delivery.episode_script(pool_delivery.Episode(
        "b", 0, 1, ("true",), timeout_seconds=5, files=(("verify.py", "x"),), files_dir=str(files / "gone"),
        write_failed_exit=1), str(claim))
    assert hand_over(claim, script)
    assert proc.wait(timeout=20) == 1


# -- the verifier's files writer: the files and input are written by a container of their own ----
def _writer(tmp_path):
    claim, files = tmp_path / "wclaim", tmp_path / "files"
    claim.mkdir()
    proc = start_phase_launcher(pool_delivery.files_writer_launcher(str(claim)), tmp_path,
                                tmp_path / "writer-message", claim, stdout=subprocess.PIPE)
    _wait_for(claim / "warm")
    return proc, claim, files


def _verification_episode(files, command: tuple[str, ...], verify: str = "") -> pool_delivery.Episode:
    return pool_delivery.Episode("b", 2, 1, command, env=(("GRADE", "strict"),), timeout_seconds=10,
                                 files=(("verify.sh", verify), ("truth.txt", "0.125")), files_dir=str(files),
                                 input_json='{"q":1}', write_failed_exit=1)


@needs_pid_namespace
def test_the_files_writer_says_received_only_once_every_file_is_written(tmp_path) -> None:
    (tmp_path / "files").mkdir()
    proc, wclaim, files = _writer(tmp_path)
    episode = _verification_episode(files, ("true",), verify="cat truth.txt")
    assert hand_over(wclaim, pool_delivery.files_script(episode, str(wclaim)))
    assert proc.wait(timeout=20) == 0
    # the line the operator waits for comes after the writes, and last
    assert proc.stdout.read().decode().splitlines()[-1] == pool_delivery.RECEIVED
    assert (files / "verify.sh").read_text() == "cat truth.txt" and (files / "truth.txt").read_text() == "0.125"
    assert json.loads((wclaim / "input.json").read_text()) == {"q": 1}
    assert (wclaim / pool_delivery.WRITTEN).exists()


@needs_pid_namespace
def test_the_verifier_reads_what_the_writer_wrote_and_writes_nothing_itself(tmp_path) -> None:
    proc, claim, files, message = _verifier(tmp_path)
    writer, wclaim, _ = _writer(tmp_path)
    verify = (f'printf \'{{"event":"reward","reward":%s,"grade":"%s","input":%s}}\\n\' '
              f'"$(cat {files}/truth.txt)" "$GRADE" "$(cat "$EPISODE_INPUT")" > {message}')
    episode = _verification_episode(files, ("/bin/sh", "-c", verify))
    script = pool_delivery.episode_script(episode, str(claim), written_by=str(wclaim))
    assert b"0.125" not in script and b'{"q":1}' not in script    # the files and input are the writer's to write
    assert hand_over(wclaim, pool_delivery.files_script(episode, str(wclaim)))
    assert writer.wait(timeout=20) == 0
    assert hand_over(claim, script)
    assert proc.wait(timeout=20) == 0
    assert json.loads(message.read_text()) == {"event": "reward", "reward": 0.125, "grade": "strict", "input": {"q": 1}}
    assert not (claim / "input.json").exists()


@needs_pid_namespace
def test_files_the_writer_could_not_write_fail_the_verifier_not_the_pod(tmp_path) -> None:
    """A write that fails leaves out the writer's mark: the writer still answers (the verifier is
    handed its phase, never a re-rolled attempt), and the verifier exits 1 (VerifierFailed), as it
    did when it wrote its files itself."""
    proc, claim, files, message = _verifier(tmp_path)
    writer, wclaim, _ = _writer(tmp_path)
    episode = dataclasses.replace(_verification_episode(files, ("true",)), files_dir=str(files / "gone"))
    assert hand_over(wclaim, pool_delivery.files_script(episode, str(wclaim)))
    assert writer.wait(timeout=20) == 0
    assert pool_delivery.RECEIVED in writer.stdout.read().decode()
    assert not (wclaim / pool_delivery.WRITTEN).exists()
    assert hand_over(claim, pool_delivery.episode_script(episode, str(claim), written_by=str(wclaim)))
    assert proc.wait(timeout=20) == 1


@needs_pid_namespace
def test_a_files_writer_handed_a_cut_delivery_writes_nothing_and_says_nothing(tmp_path) -> None:
    from tests.unit.core.pool_shell import delivery_head, send
    (tmp_path / "files").mkdir()
    writer, wclaim, files = _writer(tmp_path)
    script = pool_delivery.files_script(_verification_episode(files, ("true",), verify="x" * 100), str(wclaim))
    data = pool_delivery.delivery(script)
    other = pool_delivery.delivery(b"exit 0\n")
    # cut inside the first file's value and completed by another send's bytes: refused whole
    send(wclaim, data[:delivery_head(script) + 60] + other[delivery_head(b"exit 0\n"):] + b"\n" * 200)
    assert writer.wait(timeout=20) == NOT_DELIVERED_EXIT
    assert pool_delivery.RECEIVED not in writer.stdout.read().decode()
    assert not (wclaim / pool_delivery.WRITTEN).exists()


def test_the_verifiers_directories_are_in_memory() -> None:
    volumes = {vol["name"]: vol for vol in pool_children.pod_spec(POOL, _spec(verifier={}))["volumes"]}
    assert volumes["verifier"]["emptyDir"]["medium"] == "Memory"
    assert volumes["verifier-claim"]["emptyDir"]["medium"] == "Memory"
    assert volumes["verifier-files-claim"]["emptyDir"]["medium"] == "Memory"


def _census_pod(agent: dict, verifier: dict) -> dict:
    spec = _spec(verifier={})
    pod = pool_children.warm_pod(POOL, spec)
    pod["metadata"]["name"] = "p"
    pod["status"] = {"phase": "Running", "containerStatuses": [{"name": "agent", **agent},
                                                               {"name": "verifier", **verifier}]}
    return pod


@pytest.mark.parametrize("agent_exit, verifier_exit, stuck", [(NOT_DELIVERED_EXIT, None, True), (None, 1, False)])
def test_a_warm_pod_with_one_container_ended_is_dead_not_starting(agent_exit, verifier_exit, stuck) -> None:
    from rolloutbatch.core import pool_census
    ended = {"started": False, "state": {"terminated": {"exitCode": agent_exit or verifier_exit}}}
    pod = _census_pod(ended if agent_exit else WAITING, ended if verifier_exit else WAITING)
    spec = _spec(verifier={})
    found = pool_census.census([pod], pool_children.template_digest(POOL, spec))
    assert found.starting == () and found.dead == ("p",)
    assert [s[1] for s in found.stuck] == ([v.PoolReason.PREPARE_FAILED] if stuck else [])


def test_only_pods_of_the_pools_template_are_claimed() -> None:
    spec = _spec(verifier={})
    old, new = pool_children.warm_pod(POOL, _spec()), pool_children.warm_pod(POOL, spec)
    for name, pod in (("old", old), ("new", new)):
        pod["metadata"].update(name=name, creationTimestamp="2026-12-03T00:00:0" + str(int(name == "new")) + "Z")
        pod["status"] = {"phase": "Running", "containerStatuses": [
            {"name": c["name"], "started": True, "state": {"running": {}}} for c in pod["spec"]["containers"]]}
    assert [p["metadata"]["name"] for p in pools.claim_order([old, new])] == ["old", "new"]
    assert [p["metadata"]["name"] for p in pools.claim_order([old, new], pool_children.template_digest(POOL, spec))] == ["new"]


def test_a_pools_verifier_is_judged_by_its_exit_code_as_the_jobs_policy_judges_it() -> None:
    """Exit NOT_DELIVERED_EXIT: its launcher ended it while it waited, it never graded (lost,
    and the Job retries the index). Any other failure is the verifier's, counted, whether or not
    the hand-over's annotation (written after the exec) got there first: the Job's
    podFailurePolicy already failed the index, so calling it lost would drop a counted failure."""
    from rolloutbatch.core.verdict_verified import judge_verified
    record = '{"event":"agent_exit","exit_code":0,"timed_out":false}'
    waited = _pod(_ended(0, record), _ended(NOT_DELIVERED_EXIT), phase="Failed")
    result = judge_verified(pod_facts(waited), None, None)
    assert (result.reason, result.outcome) == (v.EP_INFRASTRUCTURE, v.OUTCOME_LOST), result.message
    assert is_infrastructure_failure(pod_facts(waited))
    for annotated in (False, True):
        failed_fast = _pod(_ended(0, record), _ended(1), phase="Failed")
        if annotated:
            failed_fast["metadata"]["annotations"][naming.ANNOTATION_VERIFIER_DELIVERED_AT] = "1796256000.0"
        result = judge_verified(pod_facts(failed_fast), None, None)
        assert (result.reason, result.outcome) == (v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED), (annotated, result)
        assert not is_infrastructure_failure(pod_facts(failed_fast))
    rule_actions = [(r["action"], r.get("onExitCodes", {}).get("containerName"))
                    for r in pools.failure_rules(pool_spec.parse_pool_spec({**SPEC, "verifier": {}}))]
    assert ("FailIndex", naming.VERIFIER_CONTAINER) in rule_actions   # the Job counts that failure too


def test_an_agent_that_overran_is_its_timeout_whatever_its_waiting_verifier_did() -> None:
    """Its launcher exited AGENT_OVERRAN_EXIT; the verifier, TERMed by the pod's deadline while it
    waited, exited NOT_DELIVERED_EXIT. The agent's failure (Timeout, counted), never a lost
    episode, as the Job judges it (the agent's container first: FailIndex)."""
    from rolloutbatch.core.verdict_verified import judge_verified
    record = '{"event":"agent_exit","exit_code":0,"timed_out":true}'
    pod = _pod(_ended(AGENT_OVERRAN_EXIT, record), _ended(NOT_DELIVERED_EXIT), phase="Failed")
    pod["status"]["reason"] = "DeadlineExceeded"
    assert not never_delivered(pod_facts(pod)) and not is_infrastructure_failure(pod_facts(pod))
    for deadline in (True, False):
        if not deadline:
            pod["status"].pop("reason")
        result = judge_verified(pod_facts(pod), None, None)
        assert (result.reason, result.outcome) == (v.EP_TIMEOUT, v.OUTCOME_FAILED), result.message
    rules = pools.failure_rules(pool_spec.parse_pool_spec({**SPEC, "verifier": {}}))
    agent_rule = next(i for i, r in enumerate(rules) if r.get("onExitCodes", {}).get("containerName")
                      == naming.AGENT_CONTAINER and r["onExitCodes"]["operator"] == "NotIn")
    verifier_rules = [i for i, r in enumerate(rules)
                      if r.get("onExitCodes", {}).get("containerName") == naming.VERIFIER_CONTAINER]
    assert rules[agent_rule]["action"] == "FailIndex" and agent_rule < min(verifier_rules)
