"""The operator dies (its task cancelled) at each API call of a lifecycle, before or
after the call is served, and a new operator (``restart_operator``) carries the batch to its end.

Whatever the point, the batch must end as an undisturbed one does: every episode accounted for
exactly once, one Job and one sandbox namespace ever created, the status's counters agreeing
with the results rows, the status naming the Job that ran.
"""
import asyncio

import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.storage import Storage
from tests.unit.service.memory_cluster import MemoryCluster, until

EPISODES = 3
SPEC = {"episodes": EPISODES, "parallelism": EPISODES, "task": {"files": {"episode.py": "print('hi')"}},
        "cleanup": {"sandbox": v.CLEANUP_NEVER}}


class Crash:
    """Storage calls watched; at the chosen one the operator dies: its daemon task and its log
    reads are cancelled, the call not served (``before``) or served with its answer lost (``after``)."""

    def __init__(self, monkeypatch, site, occurrence: int = 1, after: bool = False) -> None:
        self.site, self.occurrence, self.after = site, occurrence, after
        self.seen = 0
        self.fired = False
        self.rec = None
        self.task: asyncio.Task | None = None
        original = Storage._run
        crash = self

        async def run(storage, operation, *args, **kwargs):
            hit = not crash.fired and crash.rec is not None and crash.site(operation.__name__, args)
            if hit:
                crash.seen += 1
                hit = crash.seen == crash.occurrence
            if not hit:
                return await original(storage, operation, *args, **kwargs)
            crash.fired = True
            if crash.after:
                await original(storage, operation, *args, **kwargs)
            crash.die()
            raise asyncio.CancelledError()
        monkeypatch.setattr(Storage, "_run", run)

    def start(self, rec) -> asyncio.Task:
        """The operator's run of ``rec``, the one this crash kills."""
        self.rec, self.task = rec, asyncio.create_task(rec.run())
        return self.task

    async def ran(self, timeout: float = 10) -> None:
        """Until the run ended, or died at the crash (its cancellation is the crash's, not the test's)."""
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except asyncio.CancelledError:
            pass

    def die(self) -> None:
        for read in list(self.rec._reads):
            read.cancel()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


async def controllers(cluster, stop: asyncio.Event) -> None:
    """The Job controller and the kubelet: pods once the Job exists, one ends per tick, then the Job completes."""
    started = ended = 0
    completed = False
    while not stop.is_set():
        await asyncio.sleep(0.02)
        if cluster.batch() is None or cluster.job() is None:
            continue
        if not started:
            cluster.start_pods(range(EPISODES))
            started = EPISODES
        elif ended < EPISODES:
            cluster.end_pod(ended)
            ended += 1
        elif not completed:
            cluster.complete_job()
            completed = True


def sites():
    def call(name, kind=None, phase="any"):
        def site(op, args):
            if op != name:
                return False
            if kind is not None and (args[0] if isinstance(args[0], str) else args[0].get("kind")) != kind:
                return False
            if phase != "any" and (args[2] or {}).get("phase") != phase:
                return False
            return True
        return site

    final = lambda op, args: op == "put_configmap" and '"final":true' in "".join(args[0].get("data", {}).values())
    return {
        "restore-read": call("get_or_none", "ConfigMap"),
        "restore-list": call("list_configmaps"),
        "status-Provisioning": call("patch_batch_status", phase=v.PROVISIONING),
        "dry-run": call("dry_run_create"),
        "create-Namespace": call("create_or_adopt", "Namespace"),
        "create-NetworkPolicy": call("create_or_adopt", "NetworkPolicy"),
        "create-ConfigMap": call("create_or_adopt", "ConfigMap"),
        "create-Job": call("create_or_adopt", "Job"),
        "status-Running": call("patch_batch_status", phase=v.RUNNING),
        "results-first": call("put_configmap"),
        "results-final": final,
        "status-Succeeded": call("patch_batch_status", phase=v.SUCCEEDED),
    }


CLEANUP_SITES = {
    "cleanup-Job": lambda op, args: op == "delete_owned" and args[0] == "Job",
    "cleanup-Namespace": lambda op, args: op == "delete_owned" and args[0] == "Namespace",
    "status-after-cleanup": lambda op, args: op == "patch_batch_status" and "sandboxNamespace" in args[2],
}


SITES = sites()


async def resumed(cluster, timeout: float = 10) -> None:
    """A new operator process, run until it carried the batch to its end."""
    cluster.restart_operator()
    await asyncio.wait_for(cluster.reconciler().run(), timeout)


async def crash_and_resume(cluster, crash: Crash, spec=SPEC, down: float = 0.0):
    """The lifecycle up to the crash; then, ``down`` seconds later (the Job controller and the
    kubelet going on meanwhile), a new operator that carries the batch to its end."""
    cluster.submit(spec)
    crash.rec = cluster.reconciler()
    stop = asyncio.Event()
    driver = asyncio.create_task(controllers(cluster, stop))
    crash.task = asyncio.create_task(crash.rec.run())
    await crash.ran()
    first_events = list(cluster.events)
    if crash.fired:
        await asyncio.sleep(down)
        await resumed(cluster)
    stop.set()
    await driver
    return first_events


@pytest.mark.parametrize("down", [0.0, 0.3], ids=["restarted", "down-while-the-job-ran"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("site", sorted(SITES))
def test_a_crash_at_any_call_is_resumed_with_every_episode_once(monkeypatch, site, after, down):
    async def main():
        async with MemoryCluster() as cluster:
            added = []
            for kind in ("Job", "Namespace"):
                cluster.api.subscribe(kind, lambda event, obj, kind=kind: added.append(kind) if event == "ADDED" else None)
            crash = Crash(monkeypatch, SITES[site], after=after)
            first_events = await crash_and_resume(cluster, crash, down=down)
            assert crash.fired, f"the lifecycle never reached {site}"
            status = cluster.status()
            rows = cluster.rows()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED)
            assert sorted(row["index"] for row in rows) == list(range(EPISODES))
            assert [row["outcome"] for row in rows] == [v.OUTCOME_SUCCEEDED] * EPISODES
            assert status["progress"] == f"{EPISODES}/{EPISODES}" and status["succeededEpisodes"] == EPISODES
            assert added.count("Job") == 1 and added.count("Namespace") == 1
            assert status["jobUID"] == cluster.job()["metadata"]["uid"]
            # Each operator process says Provisioned at most once (the second one only if the first did not get to it)
            later = cluster.events[len(first_events):]
            assert [r for _, r, _ in first_events].count(v.EVENT_PROVISIONED) <= 1
            assert [r for _, r, _ in later].count(v.EVENT_PROVISIONED) <= 1
            assert cluster.reasons().count(v.REASON_SUCCEEDED) <= 1
    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("site", sorted(CLEANUP_SITES))
def test_a_crash_while_cleaning_up_is_finished_by_the_next_operator(monkeypatch, site, after):
    async def main():
        async with MemoryCluster(namespace_delete_timeout=0.3) as cluster:
            crash = Crash(monkeypatch, CLEANUP_SITES[site], after=after)
            spec = {**SPEC, "cleanup": {"sandbox": v.CLEANUP_ALWAYS}}
            await crash_and_resume(cluster, crash, spec)
            assert crash.fired, f"the lifecycle never reached {site}"
            status = cluster.status()
            assert (status["phase"], status["progress"]) == (v.SUCCEEDED, f"{EPISODES}/{EPISODES}")
            assert len(cluster.rows()) == EPISODES
            cluster.api.collect_garbage()
            assert not [ns for ns in cluster.api.list_objects("Namespace") if ns["metadata"]["name"].startswith("rb-")]
            assert "sandboxNamespace" not in status
            assert cluster.reasons().count(v.REASON_SUCCEEDED) == 1
    asyncio.run(asyncio.wait_for(main(), 30))


STOP_SITES = {
    "suspend": lambda op, args: op == "suspend_job",
    "status-Stopping": lambda op, args: op == "patch_batch_status" and args[2].get("reason") == v.REASON_STOPPING,
    "results-final": SITES["results-final"],
    "status-Stopped": lambda op, args: op == "patch_batch_status" and args[2].get("phase") == v.STOPPED,
}


async def stopping_controllers(cluster, stop: asyncio.Event) -> None:
    """Pods made, episode 0 ends, the owner sets spec.stop; once the Job is suspended its
    controller deletes the active pods."""
    state = "wait-job"
    while not stop.is_set():
        await asyncio.sleep(0.02)
        job = cluster.job()
        if job is None:
            continue
        if state == "wait-job":
            cluster.start_pods(range(EPISODES))
            cluster.end_pod(0)
            state = "ended-0"
        elif state == "ended-0" and cluster.status().get("progress") == f"1/{EPISODES}":
            cluster.api.merge_patch(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{cluster.batch()['metadata']['namespace']}"
                                    f"/rolloutbatches/batch", {"spec": {"stop": True}}, "kubectl")
            cluster.reconciler()   # kopf hands the daemon the new body
            state = "stopped"
        elif state == "stopped" and (job["spec"] or {}).get("suspend"):
            for pod in cluster.api.list_objects("Pod"):
                if pod["status"]["phase"] in ("Pending", "Running"):
                    cluster.api.delete(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/"
                                       f"{pod['metadata']['name']}", "job controller")
            state = "done"


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("site", sorted(STOP_SITES))
def test_a_crash_mid_stop_is_resumed_with_every_episode_once(monkeypatch, site, after):
    async def main():
        async with MemoryCluster() as cluster:
            crash = Crash(monkeypatch, STOP_SITES[site], after=after)
            cluster.submit(SPEC)
            crash.rec = cluster.reconciler()
            stop = asyncio.Event()
            driver = asyncio.create_task(stopping_controllers(cluster, stop))
            crash.task = asyncio.create_task(crash.rec.run())
            await crash.ran()
            assert crash.fired, f"the lifecycle never reached {site}"
            await resumed(cluster)
            stop.set()
            await driver
            status = cluster.status()
            rows = cluster.rows()
            assert (status["phase"], status["reason"]) == (v.STOPPED, v.REASON_STOPPED)
            assert [row["outcome"] for row in rows] == [v.OUTCOME_SUCCEEDED] + [v.OUTCOME_STOPPED] * (EPISODES - 1)
            assert sorted(row["index"] for row in rows) == list(range(EPISODES))
            assert status["succeededEpisodes"] == 1 and status["progress"] == f"1/{EPISODES}"   # stopped ones are not finished
            assert status["observedGeneration"] == cluster.batch()["metadata"]["generation"]
            assert len(cluster.api.list_objects("Job")) == 1
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_stop_after_a_crash_mid_provisioning_suspends_the_job_the_first_operator_made(monkeypatch):
    async def main():
        async with MemoryCluster() as cluster:
            crash = Crash(monkeypatch, SITES["create-Job"], after=True)
            cluster.submit(SPEC)
            crash.start(cluster.reconciler())
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(crash.task, 10)
            assert cluster.status()["phase"] == v.PROVISIONING and cluster.job() is not None
            cluster.start_pods([0])
            cluster.end_pod(0)
            ns = cluster.batch()["metadata"]["namespace"]
            cluster.api.merge_patch(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{ns}/rolloutbatches/batch",
                                    {"spec": {"stop": True}}, "kubectl")
            await resumed(cluster)
            status = cluster.status()
            assert status["phase"] == v.STOPPED
            assert cluster.job()["spec"]["suspend"] is True and len(cluster.api.list_objects("Job")) == 1
            # the episode that ended before the stop was judged from its pod, not given up
            assert [row["outcome"] for row in cluster.rows()] == [v.OUTCOME_SUCCEEDED] + [v.OUTCOME_STOPPED] * 2
    asyncio.run(asyncio.wait_for(main(), 30))


def test_every_episode_final_at_the_crash_then_the_job_deleted_still_succeeds(monkeypatch):
    """The operator dies right after the final results write (every episode final, the status
    not yet Succeeded); the Job is then deleted. The restarted operator restored every row
    final, yet its adoption (sandbox_lifecycle.adopt) stalled the batch SandboxDeleted ("deleted
    before every episode ended"): a batch whose every episode succeeded ended Failed. A Job gone
    stalls a batch only while an episode is open (core.lifecycle.next_step)."""
    async def main():
        async with MemoryCluster() as cluster:
            crash = Crash(monkeypatch, SITES["results-final"], after=True)
            cluster.submit(SPEC)
            crash.start(cluster.reconciler())
            await until(lambda: cluster.job() is not None)
            cluster.start_pods(range(EPISODES))
            for index in range(EPISODES):
                cluster.end_pod(index)
            await crash.ran()
            assert crash.fired
            assert cluster.status()["phase"] not in v.TERMINAL_PHASES
            assert [r["outcome"] for r in cluster.rows()] == [v.OUTCOME_SUCCEEDED] * EPISODES
            job = cluster.job()["metadata"]
            cluster.api.delete(f"/apis/batch/v1/namespaces/{job['namespace']}/jobs/{job['name']}", "someone")
            cluster.api.collect_garbage()
            await resumed(cluster)
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), status["message"]
            assert status["succeededEpisodes"] == EPISODES
    asyncio.run(asyncio.wait_for(main(), 30))
