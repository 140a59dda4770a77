"""The pooled lifecycle (spec.poolRef) through the reconciler, on the cluster in
memory: stopped, refused, and with the operator dying at an API call and staying down while the
cluster goes on."""
from __future__ import annotations

import asyncio
import copy
import logging
import time

import pytest

from rolloutbatch import GROUP, POOL_KIND, VERSION
from rolloutbatch.core import naming, pool_children, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service.pools import PoolReconciler
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster, _iso, events_text, until
from tests.unit.service.test_reconciler_crash_points import Crash, resumed

LOG = logging.getLogger("test")
POOL_NS = naming.pool_namespace(NAMESPACE, "warm")
EPISODES = 3
SPEC = {"episodes": EPISODES, "parallelism": EPISODES, "poolRef": {"name": "warm"}, "episodeTimeoutSeconds": 60}


async def fill_pool(cluster: MemoryCluster, size: int = EPISODES) -> None:
    await make_pool(cluster, size)
    warm_every_pod(cluster)


async def make_pool(cluster: MemoryCluster, size: int = EPISODES) -> None:
    """The pool and its pods, none started yet; every hand-over to them will be received."""
    api = cluster.api
    api.create(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutpools",
               {"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND, "metadata": {"name": "warm"},
                "spec": {"size": size, "task": {"files": {"episode.py": "x"}}}}, "create pool")
    rec = PoolReconciler(PoolStorage(api), api.get_object(POOL_KIND, "warm", NAMESPACE), lambda *e: None, LOG)
    await rec.round()
    api.set_attach(POOL_NS, None, lambda container, stdin: None)


def warm_every_pod(cluster: MemoryCluster) -> None:
    """The kubelet's part: every pod of the pool placed and started (warm)."""
    api = cluster.api
    for pod in api.list_objects("Pod", POOL_NS):
        name = pod["metadata"]["name"]
        api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", {"spec": {"nodeName": "node-1"}}, "bind")
        api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}/status", {"status": {
            "phase": "Running", "startTime": _iso(time.time()), "containerStatuses": [
                {"name": c["name"], "started": True, "state": {"running": {}}} for c in pod["spec"]["containers"]]}},
            "kubelet")


def batch_pods(cluster: MemoryCluster) -> list[dict]:
    uid = cluster.batch()["metadata"]["uid"]
    return [p for p in cluster.api.list_objects("Pod", POOL_NS)
            if (p["metadata"].get("labels") or {}).get(naming.LABEL_BATCH_UID) == uid or pool_children.claimed_by(p) == uid]


def job_of(cluster: MemoryCluster) -> dict | None:
    return cluster.api.get_object("Job", _job_name(cluster), POOL_NS)


def _job_name(cluster: MemoryCluster) -> str:
    from rolloutbatch.core.model import BatchRef
    meta = cluster.batch()["metadata"]
    return naming.job_name(BatchRef(namespace=NAMESPACE, name=meta["name"], uid=meta["uid"], generation=1))


def adopt(cluster: MemoryCluster) -> None:
    """The Job controller adopts the batch's orphan pods (manualSelector)."""
    job = job_of(cluster)
    uid = cluster.batch()["metadata"]["uid"]
    for pod in batch_pods(cluster):   # those its selector matches: the batch's labels (enrolled)
        if not pod["metadata"].get("ownerReferences") and pod["metadata"]["labels"].get(naming.LABEL_BATCH_UID) == uid:
            cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{pod['metadata']['name']}", {"metadata": {
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                     "uid": job["metadata"]["uid"], "controller": True}]}}, "job controller")


def end_claimed(cluster: MemoryCluster, index: int, reward: float = 1.0) -> None:
    """The kubelet: the claimed pod of ``index`` ran its episode and ended well."""
    pod = next(p for p in batch_pods(cluster)
               if p["metadata"]["annotations"].get(v.COMPLETION_INDEX_KEY) == str(index))
    name = pod["metadata"]["name"]
    started = time.time() - 0.01
    status = {"phase": "Succeeded", "containerStatuses": [{
        "name": naming.CONTAINER_NAME, "imageID": "sha256:feed", "restartCount": 0, "started": False,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": events_text(name, 1.0, start=started),
                                 "startedAt": _iso(started), "finishedAt": _iso(time.time() + 1)}}}]}
    cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}/status", {"status": status}, "kubelet")


def complete(cluster: MemoryCluster) -> None:
    job = job_of(cluster)
    cluster.api.merge_patch(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs/{job['metadata']['name']}/status",
                            {"status": {"conditions": [{"type": "Complete", "status": "True",
                                                        "lastTransitionTime": _iso(time.time())}],
                                        "startTime": _iso(time.time()), "completionTime": _iso(time.time())}},
                            "job controller")


async def controllers(cluster: MemoryCluster, stop: asyncio.Event, *, need_job: bool = True) -> None:
    """Claimed pods run their episodes whether or not a Job exists (the hand-over came with the
    claim); the Job controller adopts them once the Job exists, and completes it once all ended."""
    ended: set[int] = set()
    completed = False
    while not stop.is_set():
        await asyncio.sleep(0.02)
        if cluster.batch() is None:
            continue
        if job_of(cluster) is not None:
            adopt(cluster)
        for pod in batch_pods(cluster):
            index = int(pod["metadata"]["annotations"][v.COMPLETION_INDEX_KEY])
            delivered = naming.ANNOTATION_DELIVERED_AT in pod["metadata"]["annotations"] or any(
                a[1] == pod["metadata"]["name"] for a in cluster.api.attaches)
            if index not in ended and delivered and (not need_job or job_of(cluster) is not None):
                end_claimed(cluster, index)
                ended.add(index)
                break
        if len(ended) == EPISODES and job_of(cluster) is not None and not completed:
            adopt(cluster)
            complete(cluster)
            completed = True


async def run_pooled(cluster: MemoryCluster, crash: Crash | None, spec=SPEC, down: float = 0.0, need_job: bool = True,
                     before_restart=None, restart_when=None):
    await fill_pool(cluster)
    cluster.submit(spec)
    rec = cluster.reconciler()
    stop = asyncio.Event()
    driver = asyncio.create_task(controllers(cluster, stop, need_job=need_job))
    task = asyncio.create_task(rec.run())
    if crash is not None:
        crash.rec, crash.task = rec, task
    try:
        await asyncio.wait_for(asyncio.shield(task), 10)
    except asyncio.CancelledError:
        pass
    if crash is not None and crash.fired:
        await asyncio.sleep(down)
        if restart_when is not None:
            await until(restart_when)
        if before_restart is not None:
            before_restart()
        await resumed(cluster)
    stop.set()
    await driver


async def crashed_then_resumed(cluster: MemoryCluster, crash: Crash, spec: dict, drive, down: float = 0.0) -> None:
    """``spec`` submitted and run until ``crash`` kills its operator; ``down`` s later a new one
    carries it to its end, while ``drive(cluster, stop)`` plays the Job controller and the kubelet."""
    cluster.submit(spec)
    stop = asyncio.Event()
    driver = asyncio.create_task(drive(cluster, stop))
    crash.start(cluster.reconciler())
    await crash.ran()
    assert crash.fired, "the lifecycle never reached the crash's site"
    await asyncio.sleep(down)
    await resumed(cluster)
    stop.set()
    await driver


def assert_every_episode_succeeded(cluster: MemoryCluster, episodes: int) -> None:
    status, rows = cluster.status(), cluster.rows()
    assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), (status, rows)
    assert [row["outcome"] for row in rows] == [v.OUTCOME_SUCCEEDED] * episodes


def test_baseline_a_pooled_batch_runs_to_its_end():
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await run_pooled(cluster, None)
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), status
            assert [r["outcome"] for r in cluster.rows()] == [v.OUTCOME_SUCCEEDED] * EPISODES
    asyncio.run(asyncio.wait_for(main(), 30))


class PoolCrash(Crash):
    """Crash (test_reconciler_crash_points) over the pools' calls too: ``site(name, args)`` sees
    Storage's operation names and PoolStorage's functions' names (``_claim``, ``annotate``, ...)."""

    def __init__(self, monkeypatch, site, occurrence: int = 1, after: bool = False) -> None:
        super().__init__(monkeypatch, site, occurrence, after)
        original = PoolStorage._run
        crash = self

        async def run(storage, fn, *args):
            hit = not crash.fired and crash.rec is not None and crash.site(getattr(fn, "__name__", ""), args)
            if hit:
                crash.seen += 1
                hit = crash.seen == crash.occurrence
            if not hit:
                return await original(storage, fn, *args)
            crash.fired = True
            if crash.after:
                await original(storage, fn, *args)
            crash.die()
            raise asyncio.CancelledError()
        monkeypatch.setattr(PoolStorage, "_run", run)

    def die(self) -> None:
        """The whole process dies: the batch's hand-overs in flight too."""
        delivery = getattr(self.rec, "delivery", None)
        for task in list(getattr(delivery, "_tasks", ())):
            if task is not asyncio.current_task():
                task.cancel()
        super().die()


def _op(name, kind=None):
    def site(op, args):
        if op != name:
            return False
        return kind is None or (args[0] if isinstance(args[0], str) else args[0].get("kind")) == kind
    return site


POOLED_SITES = {
    "claim-1": _op("_claim"),
    # the batch's labels after the hand-overs, with their records (core.pools.enrol_patch): every
    # index here gets a warm pod, so no hand-over records itself alone
    "enrol-1": _op("_enrol"),
    "create-Job": _op("create_or_adopt", "Job"),
    "status-Running": lambda op, args: op == "patch_batch_status" and (args[2] or {}).get("phase") == v.RUNNING,
    "status-Provisioning": lambda op, args: op == "patch_batch_status" and (args[2] or {}).get("phase") == v.PROVISIONING,
}


@pytest.mark.parametrize("need_job", [True, False], ids=["end-once-adopted", "end-before-the-job"])
@pytest.mark.parametrize("down", [0.0, 0.4], ids=["restarted", "down-while-the-claims-ran"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("site", sorted(POOLED_SITES))
def test_a_pooled_crash_at_any_call_is_resumed_with_every_episode_once(monkeypatch, site, after, down, need_job):
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            added = []
            cluster.api.subscribe("Job", lambda event, obj: added.append(obj) if event == "ADDED" else None)
            claimed: dict[str, str] = {}   # pod uid -> the index it was claimed for
            cluster.api.subscribe("Pod", lambda event, obj: claimed.setdefault(
                obj["metadata"]["uid"], (obj["metadata"].get("annotations") or {}).get(v.COMPLETION_INDEX_KEY))
                if (obj["metadata"].get("labels") or {}).get(naming.LABEL_BATCH_UID) else None)
            crash = PoolCrash(monkeypatch, POOLED_SITES[site], after=after)
            await run_pooled(cluster, crash, down=down, need_job=need_job)
            assert crash.fired, f"the lifecycle never reached {site}"
            status = cluster.status()
            rows = cluster.rows()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), (status, rows)
            assert sorted(row["index"] for row in rows) == list(range(EPISODES))
            assert [row["outcome"] for row in rows] == [v.OUTCOME_SUCCEEDED] * EPISODES
            assert len(added) == 1
            # one pod per index: never a second pod claimed for an index
            indexes = list(claimed.values())
            assert sorted(indexes) == [str(i) for i in range(EPISODES)], indexes
    asyncio.run(asyncio.wait_for(main(), 30))


async def stopped_while_down(monkeypatch, cluster: MemoryCluster, *, down: float, need_job: bool,
                             restart_when=None) -> None:
    """The operator dies before the pooled Job's creation (its claims made and handed over); the
    owner stops the batch before the next operator takes it over."""
    crash = PoolCrash(monkeypatch, POOLED_SITES["create-Job"], after=False)

    def stop():
        cluster.api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutbatches/batch",
                                {"spec": {"stop": True}}, "kubectl")
    await run_pooled(cluster, crash, down=down, need_job=need_job, before_restart=stop, restart_when=restart_when)
    assert crash.fired


def test_a_stop_after_a_crash_between_the_claims_and_the_job_judges_the_episodes_that_ran(monkeypatch):
    """The pooled analogue of test_a_stop_after_a_crash_mid_provisioning_suspends_the_job_the_first_operator_made:
    the claimed pods were handed their episodes with their claims, the operator died before the
    Job, the episodes ended while it was down, and the owner stopped the batch meanwhile."""
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            def every_episode_ended():   # on a busy machine 0.4 s down is not always long enough
                pods = batch_pods(cluster)
                return len(pods) == EPISODES and all(p["status"].get("phase") == "Succeeded" for p in pods)
            await stopped_while_down(monkeypatch, cluster, down=0.4, need_job=False, restart_when=every_episode_ended)
            status = cluster.status()
            rows = cluster.rows()
            assert status["phase"] in v.TERMINAL_PHASES, status
            # each episode ran to its end with a reward before the stop: its row says so
            assert [(r["outcome"], r["reason"]) for r in rows] == [(v.OUTCOME_SUCCEEDED, None)] * EPISODES, rows
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_stop_after_a_crash_between_the_claims_and_the_job_leaves_no_claimed_pod_running(monkeypatch):
    """As above, but the claimed episodes still run when the restarted operator stops the batch:
    the Job it makes (suspended) adopts them, so they are judged or ended, never left running
    unseen. (This driver's pods end with their rewards whether or not the Job is suspended: a stop
    that cut nothing off leaves the batch's own verdict.)"""
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            jobs: list[dict] = []
            cluster.api.subscribe("Job", lambda event, obj: jobs.append(obj) if event == "ADDED" else None)
            await stopped_while_down(monkeypatch, cluster, down=0.0, need_job=True)
            status = cluster.status()
            assert status["phase"] in (v.STOPPED, v.SUCCEEDED), status
            assert len(cluster.rows()) == EPISODES
            assert [j["spec"].get("suspend") for j in jobs] == [True]   # the one Job, made by the restarted operator
            running = [p["metadata"]["name"] for p in batch_pods(cluster)
                       if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
            assert running == [], f"claimed pods left running after the batch stopped: {running}"
    asyncio.run(asyncio.wait_for(main(), 30))


COLD_EPISODES = 5
COLD_SPEC = {**SPEC, "episodes": COLD_EPISODES}


def make_cold(cluster: MemoryCluster, index: int) -> None:
    """The Job controller: a cold pod for ``index`` from the Job's template, started at once."""
    job = job_of(cluster)
    template = copy.deepcopy(job["spec"]["template"])
    meta = template["metadata"]
    meta.update(name=f"{job['metadata']['name']}-{index}-cold", namespace=POOL_NS,
                ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                  "uid": job["metadata"]["uid"], "controller": True}])
    meta.setdefault("annotations", {})[v.COMPLETION_INDEX_KEY] = str(index)
    meta.setdefault("labels", {})[v.COMPLETION_INDEX_KEY] = str(index)
    pod = cluster.api.put({"apiVersion": "v1", "kind": "Pod", **template,
                           "status": {"phase": "Pending"}})
    name = pod["metadata"]["name"]
    cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", {"spec": {"nodeName": "node-1"}}, "bind")
    cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}/status", {"status": {
        "phase": "Running", "startTime": _iso(time.time()), "containerStatuses": [
            {"name": c["name"], "started": True, "state": {"running": {}}} for c in pod["spec"]["containers"]]}},
        "kubelet")


async def cold_controllers(cluster: MemoryCluster, stop: asyncio.Event, episodes: int) -> None:
    """As controllers, and the Job controller makes cold pods for the indexes past the claims."""
    ended: set[int] = set()
    completed = False
    while not stop.is_set():
        await asyncio.sleep(0.02)
        if cluster.batch() is None:
            continue
        job = job_of(cluster)
        if job is None:
            continue
        adopt(cluster)
        pods = batch_pods(cluster)
        held = {int(p["metadata"]["annotations"][v.COMPLETION_INDEX_KEY]) for p in pods}
        active = [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]
        for index in range(episodes):
            if len(active) >= job["spec"]["parallelism"]:
                break
            if index not in held and index not in ended:
                make_cold(cluster, index)
                active.append(index)
        for pod in batch_pods(cluster):
            index = int(pod["metadata"]["annotations"][v.COMPLETION_INDEX_KEY])
            delivered = naming.ANNOTATION_DELIVERED_AT in pod["metadata"]["annotations"]
            if index not in ended and delivered and pod["status"].get("phase") == "Running":
                end_claimed(cluster, index)
                ended.add(index)
                break
        if len(ended) == episodes and not completed:
            complete(cluster)
            completed = True


@pytest.mark.parametrize("down", [0.0, 0.4], ids=["restarted", "down-while-the-job-ran"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("site", sorted(POOLED_SITES) + ["annotate-cold"])
def test_a_pooled_crash_with_cold_pods_is_resumed_with_every_episode_once(monkeypatch, site, after, down):
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            if site == "annotate-cold":
                # the first hand-over recorded alone: a cold pod's (the warm ones' go with their labels)
                crash = PoolCrash(monkeypatch, _op("annotate"), after=after)
            else:
                crash = PoolCrash(monkeypatch, POOLED_SITES[site], after=after)
            await fill_pool(cluster)
            await crashed_then_resumed(cluster, crash, COLD_SPEC,
                                       lambda c, stop: cold_controllers(c, stop, COLD_EPISODES), down)
            assert_every_episode_succeeded(cluster, COLD_EPISODES)
    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_crash_between_a_hand_over_and_its_annotation_keeps_the_episode(monkeypatch, after):
    """The first operator handed the pods their episodes and died at the write that records them
    (their delivered-at annotations go with the batch's labels); a launcher reads its stdin once,
    so the restarted operator's second hand-over is never confirmed. The episodes run and end:
    each is judged from its pod, once."""
    from rolloutbatch.kube.errors import Unavailable

    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await fill_pool(cluster)

            def once(name):
                seen = []

                def handler(container, stdin):
                    seen.append(stdin)
                    if len(seen) > 1:
                        raise Unavailable("the stream ended before the container confirmed its input (stdin closed)")
                cluster.api.set_attach(POOL_NS, name, handler)
            for pod in cluster.api.list_objects("Pod", POOL_NS):
                once(pod["metadata"]["name"])
            crash = PoolCrash(monkeypatch, _op("_enrol"), after=after)
            await crashed_then_resumed(cluster, crash, SPEC, controllers)
            assert_every_episode_succeeded(cluster, EPISODES)
    asyncio.run(asyncio.wait_for(main(), 30))


WAIT_SPEC = {**SPEC, "poolRef": {"name": "warm", "whenEmpty": "Wait"}}


@pytest.mark.parametrize("need_job", [True, False], ids=["end-once-adopted", "end-before-the-job"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("site", sorted(POOLED_SITES))
def test_a_crash_of_a_batch_that_waits_for_its_pool_is_resumed(monkeypatch, site, after, need_job):
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            crash = PoolCrash(monkeypatch, POOLED_SITES[site], after=after)
            await run_pooled(cluster, crash, spec=WAIT_SPEC, down=0.4, need_job=need_job)
            assert crash.fired, f"the lifecycle never reached {site}"
            status = cluster.status()
            rows = cluster.rows()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), (status, rows)
            assert [row["outcome"] for row in rows] == [v.OUTCOME_SUCCEEDED] * EPISODES
    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("remade", [False, True], ids=["deleted", "deleted-and-made-again"])
def test_a_pool_deleted_while_a_batch_waits_for_it_stalls_the_batch(monkeypatch, remade):
    """whenEmpty Wait: the pool is deleted while the batch waits (its finalizer ends at once: no
    batch holds its pods), so the batch's next look finds none, or a namesake. The batch stalls
    PoolNotFound; it waited for ever, saying it waited for the pool to be created."""
    from rolloutbatch.service import reconciler as reconciler_module
    monkeypatch.setattr(reconciler_module, "POOL_WAIT_PERIOD", 0.05)

    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await make_pool(cluster)   # its pods made, none warm yet
            cluster.submit(WAIT_SPEC)
            task = asyncio.create_task(cluster.reconciler().run())
            await until(lambda: cluster.status().get("reason") == v.REASON_WAITING_FOR_POOL)
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutpools/warm"
            cluster.api.delete(path, "kubectl")
            if remade:
                cluster.api.create(path.rsplit("/", 1)[0], {"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND,
                                                            "metadata": {"name": "warm"}, "spec": {"size": 1}}, "kubectl")
            await asyncio.wait_for(task, 5)
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_POOL_NOT_FOUND), status
            assert "was deleted" in status["message"]
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_wait_batch_read_before_its_pools_namespace_exists_waits_saying_so(monkeypatch):
    """`kubectl apply -f dir/`: the batch is read before the pool's first round made its namespace.
    It waits, saying why (it ended InternalError: the wait's answer had a value too few)."""
    from rolloutbatch.service import reconciler as reconciler_module
    monkeypatch.setattr(reconciler_module, "POOL_WAIT_PERIOD", 0.05)

    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            cluster.api.create(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutpools",
                               {"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND, "metadata": {"name": "warm"},
                                "spec": {"size": EPISODES, "task": {"files": {"episode.py": "x"}}}}, "kubectl")
            cluster.submit(WAIT_SPEC)
            task = asyncio.create_task(cluster.reconciler().run())
            await until(lambda: cluster.status().get("reason") in (v.REASON_WAITING_FOR_POOL, v.STALL_INTERNAL))
            await asyncio.sleep(0.2)   # a few more looks
            status = cluster.status()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert status["reason"] == v.REASON_WAITING_FOR_POOL and "does not exist yet" in status["message"], status
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_stop_while_the_batch_waits_for_its_pool_claims_nothing_even_once_the_pool_fills():
    """whenEmpty Wait: a stop while it waits claims nothing (docs/design.md §5.17), also when the
    pool fills before the wait looks again: each claim would hand its pod an episode at once."""
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await make_pool(cluster)
            cluster.submit(WAIT_SPEC)
            claims: set[str] = set()
            cluster.api.subscribe("Pod", lambda event, obj: claims.add(obj["metadata"]["name"])
                                  if pool_children.claimed_by(obj) is not None else None)
            task = asyncio.create_task(cluster.reconciler().run())
            await until(lambda: cluster.status().get("reason") == v.REASON_WAITING_FOR_POOL)
            # the trainer stops the batch; the pool then fills, before the batch looks again
            cluster.api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutbatches/batch",
                                    {"spec": {"stop": True}}, "kubectl")
            cluster.reconciler()   # kopf hands the daemon the newest body
            warm_every_pod(cluster)
            await until(lambda: cluster.status().get("phase") == v.STOPPED, timeout=10)
            handed = [a[1] for a in cluster.api.attaches]
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert (sorted(claims), handed) == ([], []), \
                f"a batch stopped while it waited claimed {sorted(claims)} and handed episodes to {handed}"
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_pooled_batch_whose_job_is_refused_leaves_no_claimed_pod_running():
    """The Job's creation refused (a 422: an admission webhook, a quota's policy) after the claims:
    the batch fails (ProvisioningRefused), but the warm pods it claimed were handed their episodes
    with their claims and no Job will ever adopt, judge or end them. sandbox.evict_unowned_claims
    exists for exactly this ("its Job was refused"), but only a sandbox removal calls it, and the
    default cleanup policy (DeleteOnSuccess) removes nothing after a failure."""
    from rolloutbatch.kube.errors import Invalid

    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await fill_pool(cluster)
            cluster.api.fail("POST", "Job", Invalid("admission webhook denied the request", status=422), times=100)
            ended: list[str] = []
            cluster.api.subscribe("Pod", lambda event, obj: ended.append(obj["metadata"]["name"])
                                  if event == "DELETED" and pool_children.claimed_by(obj) is not None else None)
            cluster.submit(SPEC)
            await asyncio.wait_for(cluster.reconciler().run(), 10)
            status = cluster.status()
            assert status["phase"] == v.FAILED, status
            assert len(ended) == EPISODES   # they were claimed, and evicted with the stall
            running = [p["metadata"]["name"] for p in batch_pods(cluster)
                       if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
            assert running == [], f"claimed pods left running after the batch failed: {running}"
    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("crash_site", [None, "suspend", "status-Stopped"])
def test_a_pooled_batch_stopped_after_its_first_episode(monkeypatch, crash_site):
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await fill_pool(cluster)
            sites = {"suspend": lambda op, args: op == "suspend_job",
                     "status-Stopped": lambda op, args: op == "patch_batch_status"
                     and (args[2] or {}).get("phase") == v.STOPPED}
            crash = PoolCrash(monkeypatch, sites[crash_site]) if crash_site else None
            cluster.submit(SPEC)
            rec = cluster.reconciler()
            stop = asyncio.Event()

            async def driver():
                state = "wait"
                while not stop.is_set():
                    await asyncio.sleep(0.02)
                    job = job_of(cluster)
                    if job is None:
                        continue
                    adopt(cluster)
                    pods = batch_pods(cluster)
                    if state == "wait" and len(pods) == EPISODES and all(
                            naming.ANNOTATION_DELIVERED_AT in p["metadata"]["annotations"] for p in pods):
                        end_claimed(cluster, 0)
                        state = "ended"
                    elif state == "ended" and cluster.status().get("progress") == f"1/{EPISODES}":
                        cluster.api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutbatches/batch",
                                                {"spec": {"stop": True}}, "kubectl")
                        cluster.reconciler()
                        state = "stopped"
                    elif state == "stopped" and (job["spec"] or {}).get("suspend"):
                        for p in pods:
                            if p["status"]["phase"] in ("Pending", "Running"):
                                cluster.api.delete(f"/api/v1/namespaces/{POOL_NS}/pods/{p['metadata']['name']}",
                                                   "job controller")
                        state = "done"
            d = asyncio.create_task(driver())
            task = asyncio.create_task(rec.run())
            if crash:
                crash.rec, crash.task = rec, task
            try:
                await asyncio.wait_for(asyncio.shield(task), 10)
            except asyncio.CancelledError:
                pass
            if crash:
                assert crash.fired
                await resumed(cluster)
            stop.set()
            await d
            status = cluster.status()
            rows = cluster.rows()
            assert (status["phase"], status["reason"]) == (v.STOPPED, v.REASON_STOPPED), status
            assert [r["outcome"] for r in rows] == [v.OUTCOME_SUCCEEDED] + [v.OUTCOME_STOPPED] * (EPISODES - 1), rows
    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("site,after", [("create-Job", True), ("status-Running", False), ("status-Running", True)])
def test_a_stop_after_a_crash_once_the_job_exists_judges_the_episodes_that_ran(monkeypatch, site, after):
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            crash = PoolCrash(monkeypatch, POOLED_SITES[site], after=after)

            def stop():
                cluster.api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutbatches/batch",
                                        {"spec": {"stop": True}}, "kubectl")
            await run_pooled(cluster, crash, down=0.4, need_job=False, before_restart=stop)
            assert crash.fired
            rows = cluster.rows()
            assert [(r["outcome"], r["reason"]) for r in rows] == [(v.OUTCOME_SUCCEEDED, None)] * EPISODES, rows
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_claim_no_job_adopted_is_evicted_when_the_batch_ends():
    """An earlier leader's claim that landed after this one's list (or one whose index annotation
    was edited) is never enrolled nor adopted: the batch's end evicts it, so it neither runs on nor
    stays in the pool's namespace uncounted."""
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await fill_pool(cluster, size=EPISODES + 1)
            cluster.submit({**SPEC, "cleanup": {"sandbox": v.CLEANUP_NEVER}})   # kept: no removal evicts it
            rec = cluster.reconciler()
            stop = asyncio.Event()
            driver = asyncio.create_task(controllers(cluster, stop))
            orphan: list[str] = []

            def late_claim(event, obj):
                if event != "ADDED" or orphan:
                    return
                spare = next(p for p in cluster.api.list_objects("Pod", POOL_NS) if pool_children.claimed_by(p) is None)
                orphan.append(spare["metadata"]["name"])
                uid = cluster.batch()["metadata"]["uid"]
                from rolloutbatch.core.model import BatchRef
                cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{orphan[0]}", pools.claim_patch(
                    spare, BatchRef(NAMESPACE, "batch", uid), 0, time.time(), 60), "an earlier leader's late claim")
            cluster.api.subscribe("Job", late_claim)
            await asyncio.wait_for(rec.run(), 10)
            stop.set()
            await driver
            assert cluster.status()["phase"] == v.SUCCEEDED and orphan
            assert cluster.api.get_object("Pod", orphan[0], POOL_NS) is None   # evicted (and gone here)
    asyncio.run(asyncio.wait_for(main(), 30))
