"""A cluster in memory for the service tests: the API server (``tests/support/memory_api.py``),
the operator's real context, registry and watches' routing, and a stand-in for the controllers
that act on a batch's children (the Job controller making pods, the kubelet ending them).

A test plays the controllers' part explicitly (``start_pods``, ``end_pod``, ``complete_job``):
what the operator then does is its own code's doing, read back from the API (the batch's status,
its results ConfigMaps, what exists) and from the Events it emitted.
"""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from typing import Any

from prometheus_client import CollectorRegistry

from rolloutbatch import GROUP, KIND, VERSION
from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.naming import LABEL_BATCH_UID
from rolloutbatch.core.result_shards import assemble
from rolloutbatch.core.results import decode_results
from rolloutbatch.core.job_facts import job_facts
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube.watch import LoopInbox
from rolloutbatch.metrics import Metrics
from rolloutbatch.service.context import Context, Settings
from rolloutbatch.service.reconciler import BatchReconciler
from rolloutbatch.service.registry import Registry
from tests.support import crd_schema
from tests.support.memory_api import MemoryApi

NAMESPACE = "rl-team"
BATCH_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/rolloutbatches/batch"   # the batch most tests submit
STATUS_SCHEMA = crd_schema.openapi_schema()["properties"]["status"]
# Every wait of the operator shortened: a lifecycle runs in well under a second. The pods' creation
# grace is the one kept longer: a test starts its pods when it sees the batch Running, and on a busy
# machine that status write can come more than half a second after the Job (a batch stalled
# PodsNotCreated in CI). The tests of that stall pass their own, short grace.
FAST = dict(status_interval=0.01, status_max_interval=0.05, results_interval=0.01, results_max_interval=0.05,
            job_poll_interval=0.2, collect_grace=0.2, image_pull_grace=0.3, pod_create_grace=5.0,
            unschedulable_grace=0.3, stall_read_grace=0.2, stop_grace=0.5, namespace_delete_timeout=1.0,
            transient_give_up=1.0)


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def events_text(pod_name: str, reward: float | None = 1.0, *, ready: bool = True, start: float | None = None) -> str:
    """What an episode writes: its ready event, then its reward (JSON lines)."""
    at = time.time() if start is None else start
    lines = []
    if ready:
        lines.append(json.dumps({"event": "ready", "at": at, "episode_id": pod_name}))
    if reward is not None:
        lines.append(json.dumps({"event": "reward", "at": at + 0.001, "episode_id": pod_name, "reward": reward}))
    return "\n".join(lines) + "\n"


class MemoryCluster:
    """One API server in memory and one operator's shared parts over it."""

    def __init__(self, **settings: Any) -> None:
        self.api = MemoryApi()
        self.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        self.settings = Settings(**{**FAST, **settings})
        self.prometheus = CollectorRegistry()
        self.metrics = Metrics(self.prometheus)
        self.ctx: Context | None = None
        self.registry: Registry | None = None
        self.events: list[tuple[str, str, str]] = []   # (type, reason, message) the operator emitted
        self.log = logging.getLogger("memory-cluster")

    async def __aenter__(self) -> MemoryCluster:
        self.ctx = Context(api=self.api, metrics=self.metrics, settings=self.settings,
                           read_slots=asyncio.Semaphore(4))
        self.restart_operator()
        for kind, extract in (("Pod", pod_facts), ("Job", job_facts)):
            self.api.subscribe(kind, self._watch(kind, extract))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0)

    def restart_operator(self) -> None:
        """A new operator process: a new registry (no reconciler, no early event), its watches
        routed to it; what it knows of a batch is what the API holds."""
        loop = asyncio.get_running_loop()
        self.registry = Registry(self.ctx)
        self._inboxes = {"Pod": LoopInbox(loop, self.registry.pod_event),
                         "Job": LoopInbox(loop, self.registry.job_event)}

    def _watch(self, kind: str, extract):
        def on_event(event: str, obj: dict) -> None:
            batch_uid = (obj["metadata"].get("labels") or {}).get(LABEL_BATCH_UID)
            if batch_uid:
                self._inboxes[kind].put(batch_uid, extract(obj), event == "DELETED")
        return on_event

    # -- the batch ---------------------------------------------------------------------------
    def submit(self, spec: dict, name: str = "batch") -> dict:
        """Create the RolloutBatch as kubectl would (the operator's finalizer is kopf's business)."""
        return self.api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                             "metadata": {"name": name, "namespace": NAMESPACE}, "spec": copy.deepcopy(spec)})

    def batch(self, name: str = "batch") -> dict:
        return self.api.get_object(KIND, name, NAMESPACE)

    def status(self, name: str = "batch") -> dict:
        return (self.batch(name) or {}).get("status") or {}

    def reconciler(self, name: str = "batch") -> BatchReconciler:
        """The batch's reconciler, as kopf's daemon gets it from the registry (the newest body)."""
        return self.registry.reconciler(self.batch(name), self.emit, self.log)

    def emit(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def counted(self, metric: str) -> float:
        """The sum of a metric's samples over every label set (what a scrape would add up)."""
        return sum(sample.value for family in self.prometheus.collect() for sample in family.samples
                   if sample.name == metric)

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]

    def rows(self, name: str = "batch") -> list[dict]:
        """The rows of the batch's results document: its head and shards, assembled."""
        uid = self.batch(name)["metadata"]["uid"]
        shards = [decode_results(cm) for cm in self.api.list_objects("ConfigMap", NAMESPACE)
                  if (cm["metadata"].get("labels") or {}).get(LABEL_BATCH_UID) == uid]
        head = next((doc for doc in shards if "shards" in doc or "shard" not in doc), None)
        assert head is not None, "no results ConfigMap"
        return assemble(head, [doc for doc in shards if doc is not head])["pods"]

    # -- the controllers' part ---------------------------------------------------------------
    def job(self, name: str = "batch") -> dict | None:
        uid = self.batch(name)["metadata"]["uid"]
        return next((job for job in self.api.list_objects("Job")
                     if (job["metadata"].get("labels") or {}).get(LABEL_BATCH_UID) == uid), None)

    def start_pods(self, indexes, name: str = "batch") -> list[dict]:
        """The Job controller: a pod per completion index, from the Job's template."""
        job = self.job(name)
        assert job is not None, "no Job"
        pods = []
        for index in indexes:
            template = copy.deepcopy(job["spec"]["template"])
            meta = template["metadata"]
            meta.update(name=f"{job['metadata']['name']}-{index}-abcde", namespace=job["metadata"]["namespace"],
                        ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                          "uid": job["metadata"]["uid"], "controller": True}])
            meta.setdefault("annotations", {})[v.COMPLETION_INDEX_KEY] = str(index)
            meta.setdefault("labels", {})[v.COMPLETION_INDEX_KEY] = str(index)
            pod = {"apiVersion": "v1", "kind": "Pod", **template,
                   "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}
            pods.append(self.api.put(pod))
        return pods

    def end_pod(self, index: int, reward: float | None = 1.0, *, exit_code: int = 0, name: str = "batch",
                message: str | None = None) -> dict:
        """The kubelet: the episode container ran and ended; its termination message holds its events."""
        job_uid = self.job(name)["metadata"]["uid"]
        pod = next(p for p in self.api.list_objects("Pod")
                   if (p["metadata"].get("annotations") or {}).get(v.COMPLETION_INDEX_KEY) == str(index)
                   and p["metadata"]["ownerReferences"][0]["uid"] == job_uid)
        started = time.time() - 0.01
        text = events_text(pod["metadata"]["name"], reward, start=started) if message is None else message
        status = {"phase": "Succeeded" if exit_code == 0 else "Failed", "startTime": _iso(started),
                  "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
                  "containerStatuses": [{
                      "name": naming.CONTAINER_NAME, "imageID": "sha256:feed", "restartCount": 0,
                      "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0
                                               else "Error", "message": text, "startedAt": _iso(started),
                                               "finishedAt": _iso(time.time() + 1)}}}]}
        path = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/status"
        return self.api.merge_patch(path, {"status": status}, "kubelet")

    def complete_job(self, name: str = "batch", *, failed: bool = False, reason: str = "") -> dict:
        """The Job controller: every index ended (Complete) or the Job failed."""
        job = self.job(name)
        condition = {"type": "Failed" if failed else "Complete", "status": "True", "reason": reason,
                     "lastTransitionTime": _iso(time.time())}
        path = f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/{job['metadata']['name']}/status"
        return self.api.merge_patch(path, {"status": {"conditions": [condition], "startTime": _iso(time.time()),
                                                      "completionTime": _iso(time.time())}}, "job controller")


def run(scenario, *, timeout: float = 30, **settings) -> MemoryCluster:
    """Run ``scenario(cluster)`` on a fresh cluster in memory whose every status write is checked
    against the CRD's schema; returns the cluster."""
    async def main():
        async with MemoryCluster(**settings) as cluster:
            invalid: list[str] = []
            cluster.api.subscribe("RolloutBatch", lambda _, obj: invalid.extend(
                crd_schema.errors(obj.get("status") or {}, STATUS_SCHEMA)))
            await scenario(cluster)
            assert invalid == [], invalid
            return cluster
    return asyncio.run(asyncio.wait_for(main(), timeout=timeout))


def sandboxes(cluster: MemoryCluster) -> list[str]:
    """The sandbox namespaces that exist."""
    return [ns["metadata"]["name"] for ns in cluster.api.list_objects("Namespace")
            if ns["metadata"]["name"].startswith("rb-")]


async def until(condition, timeout: float = 5.0, step: float = 0.01) -> None:
    """Wait (on the loop) until ``condition()`` holds; fail the test past ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {getattr(condition, '__name__', condition)}")
        await asyncio.sleep(step)

