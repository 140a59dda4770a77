"""A RolloutPool on the API in memory, for the service tests of the warm pools: the pool made,
read back and its daemon; its pods brought to the states a kubelet would (``warm``); a filled pool;
a pooled batch's spec, claims and deliveries."""
from __future__ import annotations

import asyncio
import logging

from rolloutbatch import GROUP, POOL_KIND, VERSION
from rolloutbatch.core import naming, pool_children, pool_spec
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import episode_delivery, pool_claims
from rolloutbatch.service import warm_channels
from rolloutbatch.service.pools import PoolReconciler
from rolloutbatch.service.warm_channels import WarmChannels
from tests.support.memory_api import MemoryApi

NS = "team"
LOG = logging.getLogger("test")
POOL_NS = naming.pool_namespace(NS, "warm")
BATCH = BatchRef(namespace=NS, name="b", uid="b0000000-0000-0000-0000-000000000001", generation=1)


def make_pool(api: MemoryApi, size: int = 3, **spec) -> dict:
    return api.create(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools",
                      {"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND, "metadata": {"name": "warm"},
                       "spec": {"size": size, "task": {"files": {"episode.py": "x"}}, **spec}}, "create pool")


def live(api: MemoryApi) -> dict:
    return api.get_object(POOL_KIND, "warm", NS)


def reconciler(api: MemoryApi, events: list | None = None, clusterwide: bool = True,
               writer: object = None) -> PoolReconciler:
    body = live(api)
    emit = (lambda *e: events.append(e)) if events is not None else (lambda *e: None)
    return PoolReconciler(PoolStorage(api, writer), body, emit, LOG, clusterwide=clusterwide)


def pod_names(api: MemoryApi) -> list[str]:
    return [p["metadata"]["name"] for p in api.list_objects("Pod", POOL_NS)]


def set_status(api: MemoryApi, name: str, status: dict) -> None:
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}/status", {"status": status}, "status")


def warm(api: MemoryApi, name: str) -> None:
    """The pod bound and every container of it started, as the kubelet reports a warm pod."""
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", {"spec": {"nodeName": "node-1"}}, "bind")
    containers = api.get_object("Pod", name, POOL_NS)["spec"]["containers"]
    set_status(api, name, {"phase": "Running", "startTime": "2026-12-03T00:00:00Z", "containerStatuses": [
        {"name": c["name"], "started": True, "state": {"running": {}}} for c in containers]})


def run(coro):
    return asyncio.run(coro)


def daemon_until_its_status(rec: PoolReconciler, timeout: float = 10.0) -> None:
    """The pool's daemon (``rec.run()``: its rounds and their error handling) until a round has
    written its status (or found it unchanged: the write is a round's last step, a failed one's
    too, and a transient failure within the give-up writes none), then cancelled in its wait for
    the next round. Waited for, not given a fixed time: on a loaded machine (make test runs the
    unit tests beside the cluster's) a first round took longer than the 0.3 s it was given."""
    async def go():
        written = asyncio.Event()
        write = rec._write

        async def write_and_say(status: dict) -> None:
            await write(status)
            written.set()
        rec._write = write_and_say
        daemon = asyncio.create_task(rec.run())
        said = asyncio.create_task(written.wait())
        try:
            await asyncio.wait({daemon, said}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            assert written.is_set(), f"the pool's daemon wrote no status within {timeout}s"
        finally:
            del rec._write
            for task in (daemon, said):
                task.cancel()
            await asyncio.gather(daemon, said, return_exceptions=True)
    run(go())


# -- the pool's daemon --------------------------------------------------------------------------


def filled(api: MemoryApi, size: int, **spec) -> PoolReconciler:
    make_pool(api, size, **spec)
    rec = reconciler(api)
    run(rec.round())
    for name in pod_names(api):
        warm(api, name)
    return rec


def replaced_then_shrunk(api: MemoryApi, rec: PoolReconciler) -> None:
    """A pool of 2 (made, no round yet): its dead pod is replaced, then scaled to 1 the starting
    one goes and the warm one stays."""
    run(rec.round())
    first, second = pod_names(api)
    warm(api, first)
    set_status(api, second, {"phase": "Failed", "containerStatuses": [
        {"name": "episode", "state": {"terminated": {"exitCode": 137}}}]})
    run(rec.round())
    names = pod_names(api)
    assert second not in names and first in names and len(names) == 2
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"size": 1}}, "scale")
    rec.body = live(api)
    run(rec.round())
    assert pod_names(api) == [first]


def batch_spec(**extra):
    """A pooled batch's spec; its episode's time is the 60 s the tests claim with."""
    return parse_spec({"episodes": 4, "parallelism": 3, "poolRef": {"name": "warm"}, "episodeTimeoutSeconds": 60,
                       **extra})


def claimed_indexes(api: MemoryApi) -> dict[str, str]:
    """The batch's claimed pods (enrolled or not: core.pools.enrol_patch) and their indexes."""
    return {p["metadata"]["name"]: p["metadata"]["annotations"][v.COMPLETION_INDEX_KEY]
            for p in api.list_objects("Pod", POOL_NS)
            if pool_children.claimed_by(p) == BATCH.uid or p["metadata"]["labels"].get(naming.LABEL_BATCH_UID) == BATCH.uid}


def delivery(api: MemoryApi, spec, events: list, observed: list, since: float | None = 0.0) -> episode_delivery.EpisodeDelivery:
    """The batch's delivery; ``since`` 0: as if made before every claim here (the reconciler makes it
    before it claims), None: made now, after them (an operator that restarted)."""
    return episode_delivery.EpisodeDelivery(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: events.append(e), LOG,
                                       lambda *args: observed.append(args), since=since)


async def delivery_round(api: MemoryApi, d: episode_delivery.EpisodeDelivery, episodes: int) -> None:
    """One round of ``d`` over the pool namespace's pods as the watch would have shown them, drained."""
    tracker = BatchTracker(episodes, 0, pooled=True)
    for pod in api.list_objects("Pod", POOL_NS):
        tracker._live[pod["metadata"]["uid"]] = pod_facts(pod)
    d.round(tracker)
    await drain(d)


def refuse(why: str) -> None:
    """An attach handler's failure: the container ended (or its stdin was closed) before it said
    it had read its phase, as kube.pod_attach reports it."""
    raise Unavailable(f"the stream ended before the container confirmed its input ({why})")


async def drain(d: episode_delivery.EpisodeDelivery) -> None:
    while d._tasks:
        await asyncio.gather(*list(d._tasks), return_exceptions=True)


def hand_over(api: MemoryApi, spec, fresh: list[dict]) -> list:
    """The pods ``fresh`` (just claimed) handed their episodes by a new delivery, drained; the
    Events it emitted."""
    events: list = []
    d = delivery(api, spec, events, [])

    async def go() -> None:
        d.claimed(fresh)
        await drain(d)
    run(go())
    return events


def triple(claims: pool_claims.Claims) -> tuple[int, int, list[dict]]:
    """(hits, wanted, claimed) of a claim."""
    return claims.hits, claims.wanted, claims.claimed


# -- channels opened ahead of the claims (service.warm_channels) ------------------------------------


async def warm_pool_with_channels(api: MemoryApi, size: int, *, open_channels: bool = True) -> WarmChannels:
    """A pool of ``size`` made and warmed by its daemon's rounds, which open a channel to each warm
    pod (none with ``open_channels`` False: a daemon without the registry); the registry a batch's
    hand-overs take them from."""
    channels = WarmChannels(warm_channels.opener(PoolStorage(api)), LOG)
    make_pool(api, size)
    rec = PoolReconciler(PoolStorage(api), live(api), lambda *e: None, LOG,
                         channels=channels if open_channels else None)
    await rec.round()
    for name in pod_names(api):
        warm(api, name)
    await rec.round()
    for _ in range(20):   # the openings run as tasks
        await asyncio.sleep(0)
    return channels


async def claim_and_hand_over(api: MemoryApi, spec, channels: WarmChannels) -> pool_claims.Claims:
    """The batch's claims, each pod handed its episode as its claim is made (through ``channels``
    when one is open to it), drained."""
    d = episode_delivery.EpisodeDelivery(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, LOG,
                                         since=0.0, channels=channels)
    claims = await pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60,
                                     on_claimed=d.claimed)
    await drain(d)
    return claims
