"""spec.stop and spec.cleanup.results: Retain against the devcluster.

A running batch stopped by `rolloutbatch stop` keeps every row that finished, ends in phase
Stopped with Finished=True and says how many finished first; its spec stays immutable but for the
stop, which cannot be undone. Results retained by a batch survive `kubectl delete` and the TTL,
are read by `rolloutbatch results --retained` and the SDK, and `rolloutbatch cleanup` removes
them.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

import pytest

from tests.support.batches import (apply, condition, episode_batch, get, results, unique, wait_finished, wait_gone,
                                   wait_status)
from tests.support.kube import kubeconfig_path
from tests.support.operator import kubectl

pytestmark = pytest.mark.cluster

ROOT = pathlib.Path(__file__).resolve().parents[2]

EMIT = '''
import json, os, sys, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
'''
# Episodes 0-2 finish at once; the others are still running (for up to 110 s) when the stop comes.
HALF_LONG = EMIT + '''
emit("ready")
if int(os.environ["EPISODE_INDEX"]) >= 3:
    time.sleep(110)
emit("reward", reward=1)
'''
LONG = EMIT + '''
emit("ready")
time.sleep(110)
emit("reward", reward=1)
'''
QUICK = EMIT + '''
emit("ready")
emit("reward", reward=1)
'''


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rolloutbatch.cli.main", "--kubeconfig", str(kubeconfig_path()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def patch(name: str, namespace: str, spec: dict) -> subprocess.CompletedProcess:
    return kubectl("patch", "rb", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}), check=False)


def test_a_stopped_batch_keeps_what_finished_and_ends_stopped(operator_process, namespace):
    name = unique("stop")
    apply(episode_batch(name, HALF_LONG, episodes=6, parallelism=6), namespace)
    running = wait_status(name, namespace, lambda s: s.get("succeededEpisodes") == 3 and s.get("runningEpisodes") == 3,
                          operator=operator_process)
    generation = running["metadata"]["generation"]

    # No other field may change, running or not, nor be added where it was absent.
    for spec in ({"parallelism": 2}, {"stop": True, "parallelism": 2}, {"runtimeClassName": "other"},
                 {"cleanup": {"results": "Retain"}}):
        refused = patch(name, namespace, spec)
        assert refused.returncode != 0 and "spec is immutable" in refused.stderr, (spec, refused.stderr)

    stopped = cli("stop", name, "-n", namespace)
    assert stopped.returncode == 0 and f"{name} stop requested" in stopped.stdout, stopped.stdout + stopped.stderr
    done = kubectl("wait", "--for=condition=Finished", f"rb/{name}", "-n", namespace, "--timeout=120s",
                   check=False, timeout=140)
    assert done.returncode == 0, done.stderr + operator_process.log_tail()

    obj = get(name, namespace)
    status = obj["status"]
    assert (status["phase"], status["reason"]) == ("Stopped", "Stopped"), status
    assert (status["succeededEpisodes"], status["failedEpisodes"], status["lostEpisodes"],
            status["stoppedEpisodes"], status["progress"]) == (3, 0, 0, 3, "3/6"), status
    assert "3 of 6 episodes finished before the stop" in status["message"], status["message"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "False", "Succeeded": "False", "Reconciling": "False", "Stalled": "True", "Finished": "True"}
    # the stop's generation is acknowledged: kstatus, Flux and Argo CD do not read it as in progress
    assert obj["metadata"]["generation"] == generation + 1
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert all(c["observedGeneration"] == obj["metadata"]["generation"] for c in status["conditions"])

    rows = {row["index"]: row for row in results(name, namespace)["pods"]}
    assert sorted(rows) == list(range(6))
    for i in range(3):
        assert (rows[i]["outcome"], rows[i]["valid"], rows[i]["reward"]) == ("succeeded", True, 1), rows[i]
    for i in range(3, 6):
        assert (rows[i]["outcome"], rows[i]["reason"], rows[i]["valid"], rows[i]["reward"]) == \
            ("stopped", "BatchStopped", False, None), rows[i]

    # No new episode started: the Job is suspended and none of its pods is left running.
    sandbox = status["sandboxNamespace"]      # DeleteOnSuccess keeps a batch that did not succeed
    job = json.loads(kubectl("get", "job", status["jobName"], "-n", sandbox, "-o", "json").stdout)
    assert job["spec"]["suspend"] is True
    pods = json.loads(kubectl("get", "pods", "-n", sandbox, "-o", "json").stdout)["items"]
    assert not [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]
    table = kubectl("get", "rb", name, "-n", namespace).stdout
    assert "Stopped" in table and "3/6" in table

    # One-way: un-stopping is refused, and so is any other change after the end.
    for spec in ({"stop": False}, {"stop": None}):
        refused = patch(name, namespace, spec)
        assert refused.returncode != 0 and "spec.stop cannot be undone" in refused.stderr, (spec, refused.stderr)
    refused = patch(name, namespace, {"episodes": 7})
    assert refused.returncode != 0 and "spec is immutable" in refused.stderr
    again = cli("stop", name, "-n", namespace)
    assert again.returncode == 0 and "already ended (Stopped)" in again.stdout, again.stdout + again.stderr


def test_the_sdk_stops_a_batch_before_anything_finished(operator_process, namespace):
    from rolloutbatch.sdk import Client, is_finished

    name = unique("stop-sdk")
    apply(episode_batch(name, LONG, episodes=2), namespace)
    client = Client(str(kubeconfig_path()), namespace=namespace)
    wait_status(name, namespace, lambda s: s.get("runningEpisodes") == 2, operator=operator_process)
    handle = client.handle(name)
    status = handle.stop(wait=True, timeout=120)
    assert is_finished(status) and status["phase"] == "Stopped", status
    assert (status["stoppedEpisodes"], status["progress"]) == (2, "0/2")
    assert "0 of 2 episodes finished before the stop" in status["message"]
    assert [row["outcome"] for row in handle.results()] == ["stopped", "stopped"]
    # a stop after the end changes nothing, not even the generation
    generation = get(name, namespace)["metadata"]["generation"]
    handle.stop()
    assert get(name, namespace)["metadata"]["generation"] == generation


def test_a_stop_after_the_end_leaves_the_verdict_and_acknowledges_the_generation(operator_process, namespace):
    name = unique("late-stop")
    apply(episode_batch(name, QUICK, episodes=1), namespace)
    assert wait_finished(name, namespace, operator=operator_process)["status"]["phase"] == "Succeeded"
    assert patch(name, namespace, {"stop": True}).returncode == 0   # kubectl, not the CLI: nothing checks first
    obj = wait_status(name, namespace, lambda s: s.get("observedGeneration") == 2, timeout=30,
                      operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded" and condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Ready")["observedGeneration"] == 2


def _assert_retained(name: str, namespace: str, uid: str) -> None:
    cm = get(f"{name}-results", namespace, kind="configmap")
    assert cm is not None, f"{name}-results was deleted with its batch"
    labels = cm["metadata"]["labels"]
    assert not cm["metadata"].get("ownerReferences")
    assert (labels["rl.agentruntime.io/results-retained"], labels["rl.agentruntime.io/batch-name"],
            labels["rl.agentruntime.io/batch-uid"]) == ("true", name, uid)


def test_retained_results_outlive_kubectl_delete_and_cleanup_removes_them(operator_process, namespace, tmp_path):
    from rolloutbatch.sdk import Client

    name = unique("keep")
    apply(episode_batch(name, QUICK, episodes=3, cleanup={"results": "Retain"}), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]
    uid = obj["metadata"]["uid"]
    _assert_retained(name, namespace, uid)

    kubectl("delete", "rb", name, "-n", namespace, "--timeout=60s", timeout=70)
    wait_gone("rolloutbatch", name, namespace)
    time.sleep(5)     # the garbage collector has had its chance
    _assert_retained(name, namespace, uid)

    # Without the batch no status vouches for them: read only when asked for.
    plain = cli("results", name, "-n", namespace, "--output", str(tmp_path / "plain"))
    assert plain.returncode == 1 and "--retained" in plain.stderr, plain.stdout + plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1
    out = tmp_path / "kept"
    read = cli("results", name, "-n", namespace, "--output", str(out), "--retained")
    assert read.returncode == 0, read.stdout + read.stderr
    document = json.loads((out / "results.json").read_text())
    assert document["successful_episodes"] == 3 and [r["index"] for r in document["pods"]] == [0, 1, 2]
    assert document["retained"] == {"uid": uid, "verified_by": "head"}
    receipt = json.loads((out / "receipt.json").read_text())
    assert (receipt["batch_uid"], receipt["retained"], receipt["namespace"]) == (uid, True, namespace)
    assert "not written" in read.stdout and "retained" in read.stdout
    rows = Client(str(kubeconfig_path()), namespace=namespace).retained_results(name)
    assert [r["reward"] for r in rows] == [1, 1, 1]

    # A new batch of the name is told whose results hold it, and leaves them alone.
    apply(episode_batch(name, QUICK, episodes=1), namespace)
    clash = wait_finished(name, namespace, operator=operator_process)["status"]
    assert clash["reason"] == "ResultsConfigMapConflict" and "rolloutbatch cleanup" in clash["message"], clash
    # what the message advises reads the earlier results while the new batch has the name
    assert f"--retained-uid {uid}" in clash["message"], clash
    earlier = cli("results", name, "-n", namespace, "--output", str(tmp_path / "earlier"), "--retained-uid", uid)
    assert earlier.returncode == 0, earlier.stdout + earlier.stderr
    assert json.loads((tmp_path / "earlier" / "results.json").read_text())["retained"]["uid"] == uid
    namesake = cli("results", name, "-n", namespace, "--output", str(tmp_path / "namesake"), "--retained")
    assert namesake.returncode == 1 and f"--retained-uid {uid}" in namesake.stderr, namesake.stdout + namesake.stderr
    kubectl("delete", "rb", name, "-n", namespace, "--timeout=60s", timeout=70)
    wait_gone("rolloutbatch", name, namespace)
    _assert_retained(name, namespace, uid)

    gone = cli("cleanup", name, "-n", namespace)
    assert gone.returncode == 0 and f"retained results of {name} deleted" in gone.stdout, gone.stdout + gone.stderr
    wait_gone("configmap", f"{name}-results", namespace, timeout=30)
    assert cli("cleanup", name, "-n", namespace).returncode == 1    # nothing of that name is left


def test_retained_results_outlive_the_ttl(operator_process, namespace):
    name = unique("keep-ttl")
    apply(episode_batch(name, QUICK, episodes=2,
                        cleanup={"results": "Retain", "sandbox": "Always", "ttlSecondsAfterFinished": 2}), namespace)
    obj = wait_finished(name, namespace, operator=operator_process)
    uid = obj["metadata"]["uid"]
    wait_gone("rolloutbatch", name, namespace, timeout=60)
    time.sleep(5)
    _assert_retained(name, namespace, uid)
    # cleanup with the batch already gone removes the results alone
    gone = cli("cleanup", name, "-n", namespace)
    assert gone.returncode == 0 and f"retained results of {name} deleted" in gone.stdout, gone.stdout + gone.stderr
    wait_gone("configmap", f"{name}-results", namespace, timeout=30)
