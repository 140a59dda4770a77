"""The operator end to end on the devcluster: the guide's task, failures, columns, cleanup."""
from __future__ import annotations

import time

import pytest

from tests.support.batches import (apply, condition, episode_batch, get, load_example, results, unique,
                                   wait_finished, wait_gone)
from tests.support.operator import kubectl

pytestmark = pytest.mark.cluster

STATUS_FIELDS = [
    "observedGeneration", "conditions", "phase", "progress", "sandboxNamespace", "jobName", "resultsConfigMap",
    "episodes", "readyEpisodes", "runningEpisodes", "succeededEpisodes", "failedEpisodes", "lostEpisodes",
    "retriedEpisodes", "rewardSum", "rewardMean", "batchToAllReadySeconds", "batchToAllRewardsSeconds",
    "podToReadySeconds", "jobCompleteSeconds", "nodes", "imageIDs", "startTime", "completionTime", "message",
]


def wait_job_complete_seconds(name, namespace, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = get(name, namespace)
        if obj["status"].get("jobCompleteSeconds") is not None:
            return obj
        time.sleep(0.5)
    return get(name, namespace)


def assert_succeeded_10(obj):
    st = obj["status"]
    assert st["phase"] == "Succeeded", st
    assert st["succeededEpisodes"] == 10 and st["failedEpisodes"] == 0 and st["rewardSum"] == 10
    assert st["progress"] == "10/10"
    p = st["podToReadySeconds"]
    assert 0 <= p["p50"] <= p["p95"] <= p["max"]
    assert st["batchToAllReadySeconds"] <= st["batchToAllRewardsSeconds"] <= st["jobCompleteSeconds"]
    assert condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Succeeded")["status"] == "True"
    assert condition(obj, "Stalled")["status"] == "False"


def test_parallel_and_serial_shipping_fix(operator_process, namespace):
    parallel = apply(load_example("shipping-fix-parallel.yaml"), namespace)
    # kubectl wait returns on success (docs/design.md §6).
    kubectl("wait", "--for=condition=Ready", f"rb/{parallel['metadata']['name']}", "-n", namespace,
            "--timeout=240s", timeout=260)
    apply(load_example("shipping-fix-serial.yaml"), namespace)
    p = wait_job_complete_seconds("shipping-fix-parallel", namespace)
    assert_succeeded_10(p)
    missing = [field for field in STATUS_FIELDS if field not in p["status"]]
    if missing == ["sandboxNamespace"]:
        # DeleteOnSuccess (the default) may have removed the sandbox by now (a poll under load
        # can miss the status between jobCompleteSeconds and the cleanup): the status stops
        # naming a sandbox only once its namespace is gone or going.
        phase = kubectl("get", "ns", p["status"]["jobName"], "-o", "jsonpath={.status.phase}", check=False)
        assert phase.returncode != 0 or phase.stdout == "Terminating", phase
    else:
        assert not missing, missing
    s = wait_finished("shipping-fix-serial", namespace, timeout=400, operator=operator_process)
    s = wait_job_complete_seconds("shipping-fix-serial", namespace)
    assert_succeeded_10(s)
    assert s["status"]["batchToAllRewardsSeconds"] > p["status"]["batchToAllRewardsSeconds"]

    doc = results("shipping-fix-parallel", namespace)
    assert doc["successful_episodes"] == 10 and doc["reward_sum"] == 10
    assert sorted(row["index"] for row in doc["pods"]) == list(range(10))
    assert all(row["outcome"] == "succeeded" and row["reward"] == 1 for row in doc["pods"])

    table = kubectl("get", "rolloutbatch", "-n", namespace).stdout
    header = table.splitlines()[0].split()
    assert header == ["NAME", "STATUS", "PROGRESS", "RUNNING", "SUCCEEDED", "FAILED", "LOST", "REWARD", "AGE"], table
    wide = kubectl("get", "rb", "-n", namespace, "-o", "wide").stdout.splitlines()[0]
    for column in ("P50-READY", "P95-READY", "SANDBOX", "MESSAGE"):
        assert column in wide


FAILING_TESTS = '''
import json, os, sys, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
if os.environ["EPISODE_INDEX"] == "1":
    emit("reward", reward=0)
    sys.exit("tests failed")
emit("reward", reward=1)
'''

FORGED = '''
import json, os, sys, time
idx = os.environ["EPISODE_INDEX"]
me = os.environ["EPISODE_ID"]
def emit(e, who=None, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=who or me, **f)), flush=True)
print("not json at all")
print("\\xff\\xfe garbage")
if idx == "0":
    emit("ready"); emit("reward", who="someone-else", reward=1)
elif idx == "1":
    emit("ready"); emit("reward", reward=1); emit("reward", reward=1)
elif idx == "2":
    print('{"event": "reward", "at": 1, "episode_id": "%s", "reward": NaN}' % me)
else:
    emit("ready"); emit("reward", reward=1)
'''


def test_failing_episode_fails_the_batch_with_its_reason(operator_process, namespace):
    name = unique("failing")
    apply(episode_batch(name, FAILING_TESTS, episodes=3), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    assert obj["status"]["phase"] == "Failed"
    assert obj["status"]["succeededEpisodes"] == 2 and obj["status"]["failedEpisodes"] == 1
    assert condition(obj, "Stalled")["status"] == "True"
    assert condition(obj, "Ready")["status"] == "False"
    rows = {row["index"]: row for row in results(name, namespace)["pods"]}
    assert rows[1]["outcome"] == "failed" and rows[1]["reason"] == "NonZeroExit"
    assert "tests failed" in rows[1]["log_tail"]


def test_forged_and_malformed_events_fail_only_their_episode(operator_process, namespace):
    name = unique("forged")
    apply(episode_batch(name, FORGED, episodes=5, minSuccessfulEpisodes=2), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    rows = {row["index"]: row for row in results(name, namespace)["pods"]}
    assert rows[0]["reason"] == "IdentityMismatch"
    assert rows[1]["reason"] == "DuplicateReward"
    assert rows[2]["reason"] == "NoReadyEvent"
    assert rows[3]["outcome"] == rows[4]["outcome"] == "succeeded"
    assert obj["status"]["phase"] == "Succeeded"  # 2 of 5 required
    assert obj["status"]["succeededEpisodes"] == 2 and obj["status"]["failedEpisodes"] == 3


def test_per_episode_inputs(operator_process, namespace):
    apply(load_example("per-episode-inputs.yaml"), namespace)
    obj = wait_finished("per-episode-inputs", namespace, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]
    rows = results("per-episode-inputs", namespace)["pods"]
    assert sorted(r["extra"]["input_index"] for r in rows) == list(range(5))


def test_delete_removes_sandbox_and_results(operator_process, namespace):
    name = unique("deleted")
    created = apply(episode_batch(name, FAILING_TESTS.replace('"1"', '"none"'), episodes=2,
                                  cleanup={"sandbox": "Never"}), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    sandbox = obj["status"]["sandboxNamespace"]
    assert sandbox == "rb-" + created["metadata"]["uid"].replace("-", "")[:10]
    assert get(sandbox, None, kind="namespace") is not None  # cleanup: Never keeps it
    kubectl("delete", "rb", name, "-n", namespace, "--timeout=120s", timeout=130)
    wait_gone("namespace", sandbox)
    wait_gone("configmap", f"{name}-results", namespace)


def test_delete_on_success_removes_the_sandbox(operator_process, namespace):
    name = unique("cleanup")
    apply(episode_batch(name, FAILING_TESTS.replace('"1"', '"none"'), episodes=2), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded"
    wait_gone("namespace", obj["status"]["sandboxNamespace"])
    assert get(f"{name}-results", namespace, kind="configmap")  # results stay with the batch
    # `kubectl get rb -o wide` must not show a sandbox that is gone.
    deadline = time.monotonic() + 30
    while "sandboxNamespace" in get(name, namespace)["status"]:
        assert time.monotonic() < deadline, "status still names the deleted sandbox"
        time.sleep(0.5)


def test_shared_isolation_children_are_owned_by_the_batch(operator_process, namespace):
    name = unique("shared")
    apply(episode_batch(name, FAILING_TESTS.replace('"1"', '"none"'), episodes=2,
                        isolation={"namespace": "Shared"}, cleanup={"sandbox": "Never"}), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded"
    assert obj["status"]["sandboxNamespace"] == namespace
    job = get(obj["status"]["jobName"], namespace, kind="job")
    assert job["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    kubectl("delete", "rb", name, "-n", namespace, "--timeout=120s", timeout=130)
    wait_gone("job", obj["status"]["jobName"], namespace)


def test_missing_runtime_class_stalls(operator_process, namespace):
    name = unique("norc")
    apply(episode_batch(name, FAILING_TESTS, episodes=1, runtimeClassName="does-not-exist"), namespace)
    obj = wait_finished(name, namespace, operator=operator_process, timeout=60)
    assert condition(obj, "Stalled")["reason"] == "RuntimeClassNotFound"
    assert "does-not-exist" in condition(obj, "Stalled")["message"]


def test_ttl_after_finished_deletes_the_batch(operator_process, namespace):
    name = unique("ttl")
    apply(episode_batch(name, FAILING_TESTS.replace('"1"', '"none"'), episodes=1,
                        cleanup={"ttlSecondsAfterFinished": 3}), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded"
    wait_gone("rolloutbatch", name, namespace, timeout=60)
    wait_gone("configmap", f"{name}-results", namespace, timeout=60)


def test_cleanup_always_removes_a_failed_sandbox(operator_process, namespace):
    name = unique("always")
    apply(episode_batch(name, FAILING_TESTS.replace('"1"', '"0"'), episodes=1, cleanup={"sandbox": "Always"}),
          namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    assert obj["status"]["phase"] == "Failed"
    wait_gone("namespace", obj["status"]["sandboxNamespace"])
    assert results(name, namespace)["pods"][0]["reason"] == "NonZeroExit"


def test_kubectl_wait_for_finished_returns_on_a_failed_batch(operator_process, namespace):
    """`kubectl wait --for=condition=Ready` only ever returns on success; Finished is True once
    the batch ended either way, so a pipeline can wait for "done" and then read Succeeded."""
    name = unique("fails")
    apply(episode_batch(name, "import sys; sys.exit(3)", episodes=1), namespace)
    done = kubectl("wait", "--for=condition=Finished", f"rb/{name}", "-n", namespace, "--timeout=240s",
                   check=False, timeout=260)
    assert done.returncode == 0, done.stderr
    obj = get(name, namespace)
    assert condition(obj, "Succeeded")["status"] == "False" and condition(obj, "Finished")["status"] == "True"
    ready = kubectl("wait", "--for=condition=Ready", f"rb/{name}", "-n", namespace, "--timeout=3s",
                    check=False, timeout=30)
    assert ready.returncode != 0
