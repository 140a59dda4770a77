"""A pooled batch's later waves on the devcluster (service.later_claims), beside what a user does
to the batch or its pool while they run: a stop suspends the Job and leaves no gated pod behind;
a pool deleted mid-batch leaves the later indexes no warm pod, and they start cold, the batch
ending as an undisturbed one; with whenEmpty Wait they wait for the pool's refill instead. (The waves' claims themselves: tests/e2e/test_pools.py; a crash
between a later claim and its enrolment: tests/chaos/test_pool_crashes.py.)
"""
from __future__ import annotations

import json

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef
from tests.e2e.test_pools import pool, pooled_batch, wait_pool
from tests.support.batches import apply, results, unique, wait_finished, wait_status
from tests.support.kube import wait_for
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

# index 0 works FIRST seconds, the others SECONDS
WORKING = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
i = int(os.environ["EPISODE_INDEX"])
emit("ready")
time.sleep(FIRST if i == 0 else SECONDS)
emit("reward", reward=1.0)
'''


def _pool(name: str, size: int, seconds: int, first: int = 0, prepare_seconds: int = 0) -> dict:
    """A pool whose episodes work ``seconds`` (index 0 ``first``), its warm pods prepared in
    ``prepare_seconds`` at least."""
    body = pool(name, size)
    body["spec"]["task"]["files"]["episode.py"] = WORKING.replace("FIRST", str(first)).replace("SECONDS", str(seconds))
    if prepare_seconds:
        body["spec"]["prepare"]["command"][-1] += f" && sleep {prepare_seconds}"
    return body


def _batch_pods(sandbox: str, uid: str) -> list[dict]:
    return json.loads(kubectl("get", "pods", "-n", sandbox, "-l", f"{naming.LABEL_BATCH_UID}={uid}",
                              "-o", "json").stdout)["items"]


def _gated(pod: dict) -> bool:
    return any(g.get("name") == naming.CLAIM_GATE for g in pod["spec"].get("schedulingGates") or [])


def test_a_stop_while_later_indexes_wait_leaves_no_gated_pod(operator_process, namespace):
    pool_name = unique("stopw")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(_pool(pool_name, 2, 60)))
    sandbox = wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 2, timeout=180)["status"]["sandboxNamespace"]
    name = unique("stopw")
    apply(pooled_batch(name, pool_name, 4, parallelism=2), namespace)
    uid = wait_status(name, namespace, lambda st: st.get("succeededEpisodes") == 1, timeout=120,
                      operator=operator_process)["metadata"]["uid"]
    # index 0 ended: index 2 has its pod (claimed, or gated and answered cold: the pool refills)
    wait_for(lambda: any(p["metadata"].get("annotations", {}).get(v.COMPLETION_INDEX_KEY) == "2"
                         for p in _batch_pods(sandbox, uid)), timeout=60, what="a pod for index 2")
    kubectl("patch", "rolloutbatch", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"stop":true}}')
    st = wait_status(name, namespace, lambda st: st.get("phase") == "Stopped", timeout=180,
                     operator=operator_process)["status"]
    assert (st["succeededEpisodes"], st.get("stoppedEpisodes")) == (1, 3), st
    rows = {r["index"]: r["outcome"] for r in results(name, namespace)["pods"]}
    assert rows == {0: "succeeded", 1: "stopped", 2: "stopped", 3: "stopped"}, rows
    wait_for(lambda: not [p for p in _batch_pods(sandbox, uid) if _gated(p)], timeout=60,
             what="no gated pod of the stopped batch left")
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=true", "--timeout=120s")
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=180s")


def test_a_pool_deleted_mid_batch_leaves_its_later_indexes_to_start_cold(operator_process, namespace):
    """The first wave works 15 s, so the later indexes' pods come after the deletion: the pool
    keeps no warm pod while it goes, and both start cold."""
    pool_name = unique("gone")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(_pool(pool_name, 2, 15, first=15)))
    wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 2, timeout=180)
    name = unique("gone")
    apply(pooled_batch(name, pool_name, 4, parallelism=2), namespace)
    wait_status(name, namespace, lambda st: st.get("phase") == "Running", timeout=120, operator=operator_process)
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=false")
    st = wait_finished(name, namespace, timeout=240, operator=operator_process)["status"]
    assert st["phase"] == "Succeeded" and st["succeededEpisodes"] == 4, st
    assert (st["pool"]["hits"], st["pool"]["misses"]) == (2, 2), st
    rows = sorted(results(name, namespace)["pods"], key=lambda r: r["index"])
    assert [r["outcome"] for r in rows] == ["succeeded"] * 4, rows
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=true", "--timeout=120s")
    wait_for(lambda: kubectl("get", "rolloutpool", pool_name, "-n", namespace, check=False).returncode != 0,
             timeout=180, what="the pool gone once its batch is")


def test_with_when_empty_wait_later_indexes_wait_for_the_refill_not_cold(operator_process, namespace):
    """A pool of 2 and a batch of 4 at parallelism 2 with whenEmpty Wait: the first wave takes both
    warm pods; index 0 ends at once, and its successor's pod waits, gated, for the pool's refill
    (which holds a few seconds after claims, then starts pods whose prepare takes 10 s), the batch
    saying so: every episode runs warm, and no pod of the Job ever reaches a node."""
    pool_name = unique("waitw")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(_pool(pool_name, 2, 8, prepare_seconds=10)))
    sandbox = wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 2, timeout=180)["status"]["sandboxNamespace"]
    name = unique("waitw")
    apply(pooled_batch(name, pool_name, 4, parallelism=2, poolRef={"name": pool_name, "whenEmpty": "Wait"}), namespace)
    reasons: list[str] = []

    def finished(st: dict) -> bool:
        reasons.append(st.get("reason") or "")
        return st.get("phase") in ("Succeeded", "Failed")
    done = wait_status(name, namespace, finished, timeout=240, operator=operator_process)
    st = done["status"]
    assert v.REASON_WAITING_FOR_POOL in reasons, reasons
    assert st.get("reason") != v.REASON_WAITING_FOR_POOL, st
    assert st["phase"] == "Succeeded" and st["succeededEpisodes"] == 4, st
    assert (st["pool"]["hits"], st["pool"]["misses"]) == (4, 0), st
    events = json.loads(kubectl("get", "events", "-n", sandbox, "--field-selector", "reason=Scheduled",
                                "-o", "json").stdout)["items"]
    job = naming.job_name(BatchRef(namespace=namespace, name=name, uid=done["metadata"]["uid"], generation=1))
    cold = [e["involvedObject"]["name"] for e in events if e["involvedObject"]["name"].startswith(f"{job}-")]
    assert cold == [], f"pods of the Job were scheduled: {cold}"
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=true", "--timeout=120s")
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=180s")
