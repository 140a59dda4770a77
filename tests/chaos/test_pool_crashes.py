"""Faults of the warm pools: the operator is SIGKILLed right after a pooled batch claimed its
warm pods (before its Job exists), right after a pod was handed its episode (before the
delivery was recorded on it), or right after a later wave's indexes claimed theirs (before the
claimed pods were enrolled into the Job), then the standby beside it takes over. The batch must end as an
undisturbed one does: every index judged once, on one pod that ran it, none handed two episodes
(a pod whose hand-over the crash cut never runs anything: it says so, and its index runs again).
"""
from __future__ import annotations

import json

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.vocabulary import NOT_DELIVERED_EXIT
from tests.chaos.test_operator_crashes import EXPECTED, PROGRAM, rows_of, standby, wait_crashed
from tests.e2e.test_pools import get_pool, pooled_batch, wait_pool
from tests.support.batches import apply, results, unique, wait_finished, wait_status
from tests.support.operator import QUICK_LEASE, OperatorProcess, kubectl

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def pool(name: str, size: int) -> dict:
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": name},
            "spec": {"size": size, "task": {"files": {"episode.py": PROGRAM}},
                     "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                   "limits": {"cpu": "500m", "memory": "128Mi"}}}}


# pool:later-claimed: parallelism 2 of 4, the crash comes after the claims of the later wave's
# indexes (service.later_claims), before their enrolment
@pytest.mark.parametrize("point,parallelism", [("pool:claimed", 4), ("pool:delivered", 4), ("pool:later-claimed", 2)])
def test_a_crash_mid_claim_loses_no_claim_and_binds_no_pod_twice(solo_operator, namespace, point, parallelism):
    pool_name = unique("pool")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pool(pool_name, 4)))
    crashing = OperatorProcess(f"operator-crash-{point.replace(':', '-')}", env={"ROLLOUTBATCH_CRASH_AT": point},
                               extra_args=QUICK_LEASE)
    crashing.start()
    survivor = standby(f"operator-after-{point.replace(':', '-')}")
    try:
        wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 4, timeout=180)
        name = unique("crash")
        apply(pooled_batch(name, pool_name, 4, parallelism=parallelism, minSuccessfulEpisodes=3,
                           cleanup={"sandbox": "Never"}), namespace)
        wait_crashed(crashing, point)
        survivor.wait_role("leader", 60)
        obj = wait_finished(name, namespace, timeout=240, operator=survivor)
        st = obj["status"]
        assert (st["phase"], st["succeededEpisodes"], st["failedEpisodes"], st["lostEpisodes"]) == \
            ("Succeeded", 3, 1, 0), st
        assert rows_of(results(name, namespace)) == EXPECTED
        sandbox = get_pool(pool_name, namespace)["status"]["sandboxNamespace"]
        pods = json.loads(kubectl("get", "pods", "-n", sandbox, "-l",
                                  f"{naming.LABEL_BATCH_UID}={obj['metadata']['uid']}", "-o", "json").stdout)["items"]
        # Each index ran on one pod, and no pod ran two episodes. A claimed pod the crash left without
        # its episode is not handed it by the survivor (it may have it): its deadline ends it with
        # NOT_DELIVERED_EXIT, it is not counted, and its index runs again, cold.
        never = [p for p in pods if _exit_code(p) == NOT_DELIVERED_EXIT]
        ran = [p for p in pods if _exit_code(p) != NOT_DELIVERED_EXIT]
        assert sorted(_index(p) for p in ran) == ["0", "1", "2", "3"], [(_index(p), _exit_code(p)) for p in pods]
        assert all(naming.ANNOTATION_CLAIMED_AT in p["metadata"]["annotations"] for p in never)
        retried = {_index(p) for p in never}
        assert all(naming.ANNOTATION_CLAIMED_AT in p["metadata"]["annotations"]   # the others: warm hits
                   for p in ran if _index(p) not in retried)
        kubectl("delete", "rb", name, "-n", namespace, "--timeout=120s", timeout=130)
        kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--timeout=180s", timeout=190)
    finally:
        crashing.kill()
        survivor.stop()


# Episode 0 ends at once; the others work a minute: still running when the batch is stopped.
LONG_PROGRAM = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
i = int(os.environ["EPISODE_INDEX"])
emit("ready")
time.sleep(0 if i == 0 else 60)
emit("reward", reward=1.0)
'''


def test_a_stop_after_a_crash_between_the_claims_and_the_job_judges_what_ended_and_stops_the_rest(
        solo_operator, namespace):
    """The operator dies after its claims (and their hand-overs) but before the Job; the owner stops
    the batch meanwhile. The next operator makes the Job suspended: the Job controller adopts the
    claimed pods, the episode that ended is judged, the running ones are deleted (stopped)."""
    pool_name = unique("pool")
    body = pool(pool_name, 3)
    body["spec"]["task"]["files"] = {"episode.py": LONG_PROGRAM}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    point = "pool:enrolled"
    crashing = OperatorProcess("operator-crash-stop", env={"ROLLOUTBATCH_CRASH_AT": point}, extra_args=QUICK_LEASE)
    crashing.start()
    survivor = standby("operator-after-stop")
    try:
        wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 3, timeout=180)
        name = unique("stopped")
        apply(pooled_batch(name, pool_name, 3, cleanup={"sandbox": "Never"}), namespace)
        wait_crashed(crashing, point)
        kubectl("patch", "rb", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"stop":true}}')
        survivor.wait_role("leader", 60)
        obj = wait_status(name, namespace, lambda st: st.get("phase") == "Stopped", timeout=240, operator=survivor)
        st = obj["status"]
        assert (st["succeededEpisodes"], st.get("stoppedEpisodes")) == (1, 2), st
        rows = {r["index"]: r["outcome"] for r in results(name, namespace)["pods"]}
        assert rows == {0: "succeeded", 1: "stopped", 2: "stopped"}, rows
        sandbox = get_pool(pool_name, namespace)["status"]["sandboxNamespace"]
        job = json.loads(kubectl("get", "job", "-n", sandbox, "-l", f"{naming.LABEL_BATCH_UID}={obj['metadata']['uid']}",
                                 "-o", "json").stdout)["items"]
        assert [j["spec"].get("suspend") for j in job] == [True]
        kubectl("delete", "rb", name, "-n", namespace, "--timeout=120s", timeout=130)
        kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--timeout=180s", timeout=190)
    finally:
        crashing.kill()
        survivor.stop()


def _index(pod: dict) -> str:
    return pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]


def _exit_code(pod: dict) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status["name"] == naming.CONTAINER_NAME:
            return ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
    return None
