"""Faults: the operator is SIGKILLed at many points of a batch's life, then restarted.

Each case runs the same 4-episode batch (one episode fails on purpose, so failure rows are
compared too) with ``ROLLOUTBATCH_CRASH_AT=<point>``: the operator kills itself the first time
it reaches the point, and a second operator (without the switch), waiting beside it as a
standby, takes over once the dead leader's lease expires. After the restart
the batch must end exactly as an undisturbed run: same counts, rewards and per-episode rows,
exactly one sandbox namespace and one Job, and nothing left after deletion.
"""
from __future__ import annotations

import signal
import time

import pytest

from tests.support.batches import (ProgressRecorder, apply, episode_batch, get, results, unique, wait_finished,
                                   wait_gone, wait_status)
from tests.support.operator import QUICK_LEASE, OperatorProcess, kubectl

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PROGRAM = '''
import json, os, sys, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
i = int(os.environ["EPISODE_INDEX"])
emit("ready")
time.sleep(0.5 + 1.0 * i)  # staggered ends, 1 s apart (the results interval): partial results exist before the batch completes
emit("reward", reward=i / 10)
if i == 3:
    sys.exit(2)
'''


def _program(*changes: tuple[str, str]) -> str:
    """PROGRAM with each (old, new) replaced: a change that no longer matches (PROGRAM edited since)
    fails here, not as a test that silently stopped waiting as it says."""
    program = PROGRAM
    for old, new in changes:
        assert old in program, old
        program = program.replace(old, new)
    return program


EXPECTED = {0: ("succeeded", 0.0), 1: ("succeeded", 0.1), 2: ("succeeded", 0.2), 3: ("failed", None)}

POINTS = [
    "provision:Namespace", "provision:ServiceAccount", "provision:NetworkPolicy", "provision:ConfigMap",
    "provision:Job", "status:Running", "track:log-read", "results:partial", "results:final", "status:Succeeded",
]


def wait_crashed(operator, point, timeout=120):
    deadline = time.monotonic() + timeout
    while operator.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if operator.proc.poll() is None:
        tail = operator.log_tail()
        operator.kill()   # never leave it running beside the next test's operator
        raise AssertionError(f"the operator never reached {point}:\n{tail}")
    # SIGKILLed at the point; not an exit of its own (a leader that lost its lease exits 1)
    assert operator.proc.returncode == -signal.SIGKILL, f"exit {operator.proc.returncode}:\n{operator.log_tail()}"


def standby(name: str) -> OperatorProcess:
    """The operator that takes over after a crash, started beside the crashing leader as a standby:
    it reconciles nothing until it holds the Lease (its kopf starts then, as a fresh process's
    would), so a crash costs the dead leader's lease and not a process start after it as well."""
    survivor = OperatorProcess(name, extra_args=QUICK_LEASE)
    survivor.start(leader=False)
    return survivor


def rows_of(doc):
    return {r["index"]: (r["outcome"], r["reward"] if r["outcome"] == "succeeded" else None) for r in doc["pods"]}


def check_outcome(name, namespace, operator):
    obj = wait_finished(name, namespace, timeout=240, operator=operator)
    st = obj["status"]
    assert st["phase"] == "Succeeded", st  # minSuccessfulEpisodes 3 of 4
    assert (st["succeededEpisodes"], st["failedEpisodes"], st["lostEpisodes"]) == (3, 1, 0), st
    assert abs(st["rewardSum"] - 0.3) < 1e-9
    doc = results(name, namespace)
    assert rows_of(doc) == EXPECTED
    sandbox = st["sandboxNamespace"]
    namespaces = kubectl("get", "namespaces", "-l", f"rl.agentruntime.io/batch-uid={obj['metadata']['uid']}",
                         "-o", "name").stdout.split()
    assert namespaces == [f"namespace/{sandbox}"]
    jobs = kubectl("get", "jobs", "-n", sandbox, "-o", "name").stdout.split()
    assert len(jobs) == 1, jobs
    return obj


@pytest.mark.parametrize("point", POINTS)
def test_crash_and_restart_loses_nothing(solo_operator, namespace, point):
    crashing = OperatorProcess(f"operator-crash-{point.replace(':', '-')}", env={"ROLLOUTBATCH_CRASH_AT": point},
                               extra_args=QUICK_LEASE)
    crashing.start()
    survivor = standby(f"operator-after-{point.replace(':', '-')}")
    try:
        name = unique("crash")
        apply(episode_batch(name, PROGRAM, episodes=4, parallelism=4, minSuccessfulEpisodes=3,
                            cleanup={"sandbox": "Never"}), namespace)
        with ProgressRecorder(name, namespace) as progress:
            wait_crashed(crashing, point)
            survivor.wait_role("leader", 60)
            obj = check_outcome(name, namespace, survivor)
        progress.assert_monotonic()  # counts shown never go backwards
        kubectl("delete", "rb", name, "-n", namespace, "--timeout=120s", timeout=130)
        wait_gone("namespace", obj["status"]["sandboxNamespace"])
        wait_gone("configmap", f"{name}-results", namespace)
    finally:
        crashing.kill()
        survivor.stop()


def test_crash_during_cleanup_completes_the_deletion(solo_operator, namespace):
    first = OperatorProcess("operator-crash-cleanup", env={"ROLLOUTBATCH_CRASH_AT": "cleanup:namespace"},
                            extra_args=QUICK_LEASE)
    first.start()
    name = unique("crash")
    apply(episode_batch(name, PROGRAM, episodes=4, minSuccessfulEpisodes=3, cleanup={"sandbox": "Never"}), namespace)
    obj = wait_finished(name, namespace, operator=first)
    kubectl("delete", "rb", name, "-n", namespace, "--wait=false")
    wait_crashed(first, "cleanup:namespace", timeout=60)
    assert get(name, namespace) is not None  # held by our finalizer while the operator is down
    second = OperatorProcess("operator-after-cleanup-crash", extra_args=QUICK_LEASE)
    second.start()
    try:
        wait_gone("rolloutbatch", name, namespace)
        wait_gone("namespace", obj["status"]["sandboxNamespace"])
    finally:
        second.stop()


def test_operator_down_while_batch_finishes(solo_operator, namespace):
    op = OperatorProcess("operator-down-early", extra_args=QUICK_LEASE)
    op.start()
    name = unique("down")
    apply(episode_batch(name, PROGRAM, episodes=4, minSuccessfulEpisodes=3, cleanup={"sandbox": "Never"}), namespace)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (get(name, namespace).get("status") or {}).get("phase") != "Running":
        time.sleep(0.2)
    op.kill()
    time.sleep(10)  # every episode finishes while nobody watches
    op2 = OperatorProcess("operator-back", extra_args=QUICK_LEASE)
    op2.start()
    try:
        check_outcome(name, namespace, op2)
    finally:
        op2.stop()


def test_hand_edited_results_and_a_restart_lose_nothing(solo_operator, namespace):
    """Wrong types and an unknown outcome in the results ConfigMap, then a
    restart: the bad rows are judged again from their pods, nothing crashes or counts twice."""
    import json
    op = OperatorProcess("operator-before-edit", extra_args=QUICK_LEASE)
    op.start()
    name = unique("edited")
    slow = _program(("0.5 + 1.0 * i", "1 + 5 * i"))  # the last episode ends ~16 s in
    apply(episode_batch(name, slow, episodes=4, minSuccessfulEpisodes=3, cleanup={"sandbox": "Never"}), namespace)
    deadline = time.monotonic() + 90
    while True:
        cm = get(f"{name}-results", namespace, kind="configmap")
        if cm and len(json.loads(cm["data"]["results.json"])["pods"]) >= 2:
            break
        assert time.monotonic() < deadline, "no partial results with two rows"
        time.sleep(0.2)
    op.kill()
    assert get(name, namespace)["status"]["phase"] == "Running"
    cm = get(f"{name}-results", namespace, kind="configmap")
    doc = json.loads(cm["data"]["results.json"])
    doc["pods"][0]["reward"] = "lots"
    doc["pods"][1]["outcome"] = "triumphant"
    doc["pods"].append({"index": "x", "outcome": "succeeded", "reward": 1e308})
    doc["pods"].append({"index": True, "outcome": "succeeded"})
    doc["retried_episodes"] = "many"
    cm["data"]["results.json"] = json.dumps(doc)
    kubectl("replace", "-f", "-", input=json.dumps(cm))
    op2 = OperatorProcess("operator-after-edit", extra_args=QUICK_LEASE)
    op2.start()
    try:
        check_outcome(name, namespace, op2)
        assert "Traceback" not in op2.log_path.read_text(errors="replace")
    finally:
        op2.stop()


def test_sharded_results_survive_a_restart(solo_operator, namespace):
    """A batch bigger than one shard keeps every row exactly once across a crash."""
    import json
    args = ("--results-shard-rows", "3")
    op = OperatorProcess("operator-shards", extra_args=(*args, *QUICK_LEASE))
    op.start()
    name = unique("shards")
    program = _program(("0.5 + 1.0 * i", "1 + 0.8 * i"), ("if i == 3:", "if i == 99:"))
    apply(episode_batch(name, program, episodes=10, parallelism=10, cleanup={"sandbox": "Never"}), namespace)
    deadline = time.monotonic() + 90
    selector = "rl.agentruntime.io/role=results-shard"
    while True:
        shards = json.loads(kubectl("get", "configmaps", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
        if len(shards) >= 2:
            break
        assert time.monotonic() < deadline, "no second shard was written"
        time.sleep(0.2)
    op.kill()
    # The pods of persisted rows gone (as pod GC would take them): those rows can only come
    # from the shards.
    sandbox = "rb-" + get(name, namespace)["metadata"]["uid"].replace("-", "")[:10]
    persisted = {r["index"] for r in results(name, namespace)["pods"]}
    assert persisted
    for pod in json.loads(kubectl("get", "pods", "-n", sandbox, "-o", "json").stdout)["items"]:
        if int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) in persisted:
            kubectl("delete", "pod", pod["metadata"]["name"], "-n", sandbox, "--wait=true")
    # A different --results-shard-rows after the restart: what was written decides the layout.
    op2 = OperatorProcess("operator-shards-after", extra_args=QUICK_LEASE)
    op2.start()
    try:
        obj = wait_finished(name, namespace, timeout=120, operator=op2)
        assert obj["status"]["phase"] == "Succeeded" and obj["status"]["succeededEpisodes"] == 10, obj["status"]
        doc = results(name, namespace)
        assert [r["index"] for r in doc["pods"]] == list(range(10))
        assert sorted(r["reward"] for r in doc["pods"]) == sorted(i / 10 for i in range(10))
        shards = json.loads(kubectl("get", "configmaps", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
        docs = sorted((json.loads(cm["data"]["results.json"]) for cm in shards), key=lambda d: d["shard"])
        indexes = [r["index"] for d in docs for r in d["pods"]]
        assert sorted(indexes) == list(range(10)), indexes      # each row once across the shards
        assert len(docs[0]["pods"]) == 3 and docs[0]["full"]     # the full shard was kept as written
        head = json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])
        assert "pods" not in head and len(head["shards"]) == len(docs)
    finally:
        op2.stop()


def test_a_restart_after_the_final_status_keeps_its_counts(solo_operator, namespace):
    """The cleanup's status patch after a restart must not erase the counts."""
    crashing = OperatorProcess("operator-crash-final", env={"ROLLOUTBATCH_CRASH_AT": "status:Succeeded"},
                               extra_args=QUICK_LEASE)
    crashing.start()
    survivor = standby("operator-after-final")
    try:
        name = unique("final")
        apply(episode_batch(name, PROGRAM, episodes=4, minSuccessfulEpisodes=3), namespace)   # DeleteOnSuccess
        wait_crashed(crashing, "status:Succeeded")
        survivor.wait_role("leader", 60)
        deadline = time.monotonic() + 90
        while "sandboxNamespace" in (get(name, namespace).get("status") or {}):
            assert time.monotonic() < deadline, "the sandbox was never cleaned up"
            time.sleep(0.5)
        st = get(name, namespace)["status"]
        assert (st["progress"], st["succeededEpisodes"], st["failedEpisodes"]) == ("4/4", 3, 1), st
        assert abs(st["rewardSum"] - 0.3) < 1e-9
    finally:
        crashing.kill()
        survivor.stop()


def test_a_stop_after_a_crash_in_provisioning_keeps_what_finished(solo_operator, namespace):
    """The operator dies right after creating the Job; episodes 0 and 1 finish, 2 and 3 run; the
    owner stops the batch before an operator is back. The next operator adopts the Job and its
    pods before stopping: the two successes stand and the stop waits for the running pods."""
    program = ('import json, os, time\n'
               'def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)\n'
               'i = int(os.environ["EPISODE_INDEX"])\nemit("ready")\ntime.sleep(0.2 if i < 2 else 120)\nemit("reward", reward=1)\n')
    crashing = OperatorProcess("operator-crash-stop", env={"ROLLOUTBATCH_CRASH_AT": "provision:Job"},
                               extra_args=QUICK_LEASE)
    crashing.start()
    name = unique("crashstop")
    apply(episode_batch(name, program, episodes=4, parallelism=4, cleanup={"sandbox": "Never"}), namespace)
    wait_crashed(crashing, "provision:Job")
    sandbox = kubectl("get", "namespaces", "-l", f"rl.agentruntime.io/batch-uid={get(name, namespace)['metadata']['uid']}",
                      "-o", "jsonpath={.items[0].metadata.name}").stdout
    deadline = time.monotonic() + 120
    while True:
        phases = kubectl("get", "pods", "-n", sandbox, "-o", "jsonpath={.items[*].status.phase}").stdout.split()
        if sorted(phases) == ["Running", "Running", "Succeeded", "Succeeded"]:
            break
        assert time.monotonic() < deadline, phases
        time.sleep(0.5)
    kubectl("patch", "rolloutbatch", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"stop":true}}')
    survivor = OperatorProcess("operator-after-crash-stop", extra_args=QUICK_LEASE)
    survivor.start()
    try:
        obj = wait_status(name, namespace, lambda st: st.get("phase") == "Stopped", 180, survivor)
        st = obj["status"]
        assert (st["phase"], st["succeededEpisodes"], st["stoppedEpisodes"]) == ("Stopped", 2, 2), st
        rows = {r["index"]: r["outcome"] for r in results(name, namespace)["pods"]}
        assert rows == {0: "succeeded", 1: "succeeded", 2: "stopped", 3: "stopped"}, rows
        left = kubectl("get", "pods", "-n", sandbox, "--field-selector=status.phase=Running", "-o", "name").stdout.split()
        assert not left, left   # the stop waited for the running pods to end
    finally:
        survivor.stop()
        kubectl("delete", "rb", name, "-n", namespace, "--wait=false", check=False)
