"""A warm pool's claims on the event loop (kube.async_writes, kube.pool_storage): what goes over
the wire, and every answer mapped as the API threads' calls map it, against a TLS server."""

from __future__ import annotations

import asyncio
import json
import math
import socket

import pytest
from aiohttp import web

from rolloutbatch.kube.async_writes import KEEPALIVE_SECONDS, AsyncWriter
from rolloutbatch.kube.errors import BadRequest, Conflict, Forbidden, Invalid, NotFound, Unavailable
from rolloutbatch.kube.pool_storage import PoolStorage
from tests.unit.kube.test_pod_exec_server import kubeconfig, pki, tls_server  # noqa: F401 (pki: the fixture)

POD = "/api/v1/namespaces/rp-1/pods/warm-0"


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                              "message": message, "code": code}, status=code)


# what the fake API server answers a PATCH of pod <name>
ANSWERS = {
    "warm-0": lambda body: web.json_response({"kind": "Pod", "metadata": {"name": "warm-0", **body["metadata"]}}),
    "taken": lambda body: _status(409, "Conflict", 'Operation cannot be fulfilled on pods "taken": the object '
                                                   'has been modified; please apply your changes to the latest version'),
    "gone": lambda body: _status(404, "NotFound", 'pods "gone" not found'),
    "invalid": lambda body: _status(422, "Invalid", 'Pod "invalid" is invalid: spec: Forbidden: pod updates'),
    "broken": lambda body: _status(500, "InternalError", "etcdserver: request timed out"),
    "notjson": lambda body: web.Response(text="<html>proxy error</html>"),
}


async def _serving(pki, scenario):  # noqa: F811
    seen: list[dict] = []

    async def patch(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        seen.append({"headers": dict(request.headers), "query": dict(request.query), "body": body})
        return ANSWERS[request.match_info["pod"]](body)
    app = web.Application()
    app.router.add_patch("/api/v1/namespaces/{ns}/pods/{pod}", patch)
    async with tls_server(app, pki) as url:
        writer = AsyncWriter(kubeconfig(url, pki))
        try:
            return await scenario(writer), seen
        finally:
            await writer.close()


class NoThreads:
    """An API that fails any call: what must go through the writer never reaches the threads."""

    def __getattr__(self, name):
        raise AssertionError(f"the call went through the API threads ({name})")


def _unused_port() -> int:
    with socket.socket() as probe:   # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


CLAIM = {"metadata": {"labels": {"batch": "b"}, "resourceVersion": "41"}, "spec": {"activeDeadlineSeconds": 90}}


def test_a_claim_is_one_strict_merge_patch_with_the_kubeconfigs_token(pki):  # noqa: F811
    got, seen = asyncio.run(_serving(pki, lambda p: p.merge_patch(POD, CLAIM, "claim pod rp-1/warm-0")))
    assert got == {"kind": "Pod", "metadata": {"name": "warm-0", **CLAIM["metadata"]}}
    (request,) = seen
    assert request["body"] == CLAIM
    assert request["headers"]["Content-Type"] == "application/merge-patch+json"
    assert request["headers"]["Authorization"] == "Bearer tok-123"
    assert request["query"] == {"fieldValidation": "Strict"}


@pytest.mark.parametrize("pod, error, text", [
    ("taken", Conflict, "the object has been modified"),
    ("gone", NotFound, 'pods "gone" not found'),
    ("invalid", Invalid, "pod updates"),
    ("broken", Unavailable, "etcdserver"),
    ("notjson", Unavailable, "not a JSON object"),
])
def test_every_answer_is_mapped_as_the_threads_map_it(pki, pod, error, text):  # noqa: F811
    path = POD.replace("warm-0", pod)
    with pytest.raises(error, match=text) as caught:
        asyncio.run(_serving(pki, lambda p: p.merge_patch(path, CLAIM, f"claim pod rp-1/{pod}")))
    assert str(caught.value).startswith(f"claim pod rp-1/{pod}: ")


def test_a_server_that_is_not_there_is_unavailable(pki):  # noqa: F811
    writer = AsyncWriter(kubeconfig(f"https://127.0.0.1:{_unused_port()}", pki))

    async def main():
        try:
            await writer.merge_patch(POD, CLAIM, "claim pod rp-1/warm-0")
        finally:
            await writer.close()
    with pytest.raises(Unavailable, match="claim pod rp-1/warm-0"):
        asyncio.run(main())


def test_a_body_json_cannot_carry_is_refused_before_anything_is_sent(pki):  # noqa: F811
    with pytest.raises(BadRequest, match="not valid JSON"):
        asyncio.run(_serving(pki, lambda p: p.merge_patch(POD, {"spec": {"x": math.nan}}, "claim pod rp-1/warm-0")))


@pytest.mark.parametrize("pod, claimed", [("warm-0", True), ("taken", False), ("gone", False)])
def test_pool_storage_claims_through_the_writer_and_a_lost_claim_is_none(pki, pod, claimed):  # noqa: F811

    got, seen = asyncio.run(_serving(pki, lambda p: PoolStorage(NoThreads(), p).claim_pod("rp-1", pod, CLAIM)))
    assert (got is not None) == claimed and len(seen) == 1
    if claimed:
        assert got["metadata"]["resourceVersion"] == "41"


def test_other_refusals_of_a_claim_are_raised_not_read_as_lost(pki):  # noqa: F811
    """A 500 is the API server's trouble (the claim is retried by the error policy), not a pod
    another batch took."""
    with pytest.raises(Unavailable):
        asyncio.run(_serving(pki, lambda p: PoolStorage(None, p).claim_pod("rp-1", "broken", CLAIM)))



# -- connections kept open for the next claims (AsyncWriter.warm) -------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _warming(pki, scenario, version_status: int = 200, pool: int = 32) -> list[tuple[str, int]]:  # noqa: F811
    """Runs ``scenario(writer, clock, seen)`` against a server that records in ``seen``, per
    request, its path and the client's port (one port per connection). It answers slowly enough
    that the requests sent together are all in flight together."""
    seen: list[tuple[str, int]] = []

    def recorded(answer):
        async def handler(request: web.Request) -> web.Response:
            seen.append((request.path, request.transport.get_extra_info("peername")[1]))
            body = await request.read()
            await asyncio.sleep(0.05)
            return answer(request, body)
        return handler

    def version(request, _):
        assert request.headers["Authorization"] == "Bearer tok-123"
        return web.json_response({"gitVersion": "v1.37.2"}, status=version_status)
    app = web.Application()
    app.router.add_get("/version", recorded(version))
    app.router.add_patch("/api/v1/namespaces/{ns}/pods/{pod}",
                         recorded(lambda _, body: ANSWERS["warm-0"](json.loads(body))))

    async def main():
        async with tls_server(app, pki) as url:
            writer = AsyncWriter(kubeconfig(url, pki), pool=pool, clock=Clock())
            try:
                await scenario(writer, writer._clock, seen)
            finally:
                await writer.close()
    asyncio.run(main())
    return seen


def _pings(seen) -> list[int]:
    return [port for path, port in seen if path == "/version"]


def test_the_claims_after_a_warm_up_open_no_connection(pki):  # noqa: F811
    async def scenario(writer, clock, seen):
        await writer.warm(3)
        await asyncio.gather(*(writer.merge_patch(POD, CLAIM, "claim pod rp-1/warm-0") for _ in range(3)))
    seen = _warming(pki, scenario)
    pinged = _pings(seen)
    assert len(pinged) == 3 and len(set(pinged)) == 3
    assert {port for path, port in seen if path == POD} == set(pinged)   # the claims went over them


def test_a_warm_up_is_repeated_only_for_more_connections_or_once_half_the_keepalive_is_gone(pki):  # noqa: F811
    counts = []

    async def scenario(writer, clock, seen):
        await writer.warm(2)
        await writer.warm(2)
        await writer.warm(1)
        await writer.warm(0)
        counts.append(len(_pings(seen)))     # within the period, no more wanted: nothing sent
        await writer.warm(4)                # four pings: two on the open connections, two new
        counts.append(len(_pings(seen)))
        clock.now += KEEPALIVE_SECONDS / 2
        await writer.warm(4)                # the period over: the four kept open again
    pings = _pings(_warming(pki, scenario))
    assert counts == [2, 6] and len(pings) == 10
    assert set(pings[:2]) < set(pings[2:6]) == set(pings[6:]) and len(set(pings)) == 4


def test_a_warm_up_is_capped_at_the_sessions_pool(pki):  # noqa: F811
    async def scenario(writer, clock, seen):
        await writer.warm(50)
    pings = _pings(_warming(pki, scenario, pool=4))
    assert len(pings) == 4 and len(set(pings)) == 4


def test_a_refused_ping_still_leaves_its_connection_open_and_raises_nothing(pki):  # noqa: F811
    async def scenario(writer, clock, seen):
        await writer.warm(2)
        await asyncio.gather(*(writer.merge_patch(POD, CLAIM, "claim pod rp-1/warm-0") for _ in range(2)))
    seen = _warming(pki, scenario, version_status=403)
    assert len(set(_pings(seen))) == 2 and {port for path, port in seen if path == POD} == set(_pings(seen))


def test_a_warm_up_against_a_server_that_is_not_there_raises_nothing(pki):  # noqa: F811
    writer = AsyncWriter(kubeconfig(f"https://127.0.0.1:{_unused_port()}", pki))

    async def main():
        try:
            await writer.warm(3)
        finally:
            await writer.close()
    asyncio.run(main())


def test_pool_storage_keeps_claims_open_only_through_a_writer(pki):  # noqa: F811

    asyncio.run(PoolStorage(NoThreads()).keep_claims_open(5))   # no writer: nothing to do

    async def scenario(writer, clock, seen):
        await PoolStorage(NoThreads(), writer).keep_claims_open(2)
    assert len(set(_pings(_warming(pki, scenario)))) == 2


@pytest.mark.parametrize("pod", ["warm-0", "gone"])
def test_pool_storage_annotates_through_the_writer_and_a_pod_gone_is_no_error(pki, pod):  # noqa: F811

    got, seen = asyncio.run(_serving(pki, lambda p: PoolStorage(NoThreads(), p).annotate_pod(
        "rp-1", pod, {"rolloutbatch.io/delivered-at": "12.5"}, active_deadline_seconds=70)))
    assert got is None
    (request,) = seen
    assert request["body"] == {"metadata": {"annotations": {"rolloutbatch.io/delivered-at": "12.5"}},
                               "spec": {"activeDeadlineSeconds": 70}}
    assert request["headers"]["Content-Type"] == "application/merge-patch+json"


def test_pool_storage_annotation_refusals_other_than_gone_are_raised(pki):  # noqa: F811
    with pytest.raises(Invalid, match="annotate pod rp-1/invalid"):
        asyncio.run(_serving(pki, lambda p: PoolStorage(None, p).annotate_pod("rp-1", "invalid", {"a": "b"})))


# -- the refill's pods (AsyncWriter.create) ------------------------------------------------------
def _creating(pki, scenario, status: int = 201):  # noqa: F811
    seen: list[dict] = []

    async def create(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        seen.append({"headers": dict(request.headers), "query": dict(request.query), "body": body})
        if status >= 400:
            return _status(status, "Forbidden", 'pods is forbidden: exceeded quota: q')
        made = {**body, "metadata": {**body["metadata"], "name": body["metadata"]["generateName"] + "x1"}}
        return web.json_response(made, status=status)
    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/pods", create)
    return _through_writer(app, pki, scenario), seen


def _through_writer(app: web.Application, pki, scenario):  # noqa: F811
    """``scenario(writer)`` with an AsyncWriter to ``app`` served over TLS: its result."""
    async def main():
        async with tls_server(app, pki) as url:
            writer = AsyncWriter(kubeconfig(url, pki))
            try:
                return await scenario(writer)
            finally:
                await writer.close()
    return asyncio.run(main())


WARM = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "swe-", "namespace": "rp-1"},
        "spec": {"containers": [{"name": "episode", "image": "python:3.12"}]}}


def test_pool_storage_creates_the_refills_pods_through_the_writer(pki):  # noqa: F811

    made, seen = _creating(pki, lambda w: PoolStorage(NoThreads(), w).create_pod(WARM))
    assert made["metadata"]["name"] == "swe-x1"
    (request,) = seen
    assert request["body"] == WARM and request["query"] == {"fieldValidation": "Strict"}
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Authorization"] == "Bearer tok-123"


def test_a_refused_creation_is_raised_as_the_threads_raise_it(pki):  # noqa: F811
    with pytest.raises(Forbidden, match="create pod in rp-1: .*exceeded quota"):
        _creating(pki, lambda w: PoolStorage(None, w).create_pod(WARM), status=403)


def test_a_loop_session_opens_one_session_per_event_loop():
    """A session is bound to its loop: the one of a loop that has since closed is let go (closed
    without running anything on the dead loop), never reused on the next loop."""
    from types import SimpleNamespace

    from rolloutbatch.kube.async_session import LoopSession

    shared = LoopSession(SimpleNamespace(cluster={"server": "https://api.invalid", "insecure-skip-tls-verify": True},
                                         user={}), pool=1, timeout=5, user_agent="test")

    async def twice():
        return await shared._open(), await shared._open()
    first, again = asyncio.run(twice())
    second, _ = asyncio.run(twice())
    assert first is again and second is not first and first.closed and not second.closed
    asyncio.run(shared.close())
    assert second.closed


def test_status_patches_go_through_the_writer_never_the_threads(pki):  # noqa: F811
    """A batch's and a pool's status patches on the loop (a thread's cost twice the CPU), strict
    merge patches of /status; a batch's storage closed by its finalizer sends none."""
    from rolloutbatch.kube.errors import OwnerGone
    from rolloutbatch.kube.storage import Storage
    seen: list[tuple[str, dict, str]] = []

    async def patch(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        seen.append((request.path, body, request.query.get("fieldValidation")))
        return web.json_response({"kind": "RolloutBatch", "metadata": {"name": "b"}, **body})
    app = web.Application()
    app.router.add_patch("/apis/rl.agentruntime.io/v1alpha1/namespaces/team/{plural}/{name}/status", patch)

    async def scenario(writer):
        storage = Storage(NoThreads(), writer)
        answer = await storage.patch_batch_status("team", "b", {"phase": "Running"})
        await PoolStorage(NoThreads(), writer).patch_pool_status("team", "warm", {"readyPods": 3})
        storage.close()
        with pytest.raises(OwnerGone):
            await storage.patch_batch_status("team", "b", {"phase": "Failed"})
        return answer
    answer = _through_writer(app, pki, scenario)
    assert answer["status"] == {"phase": "Running"}
    assert seen == [("/apis/rl.agentruntime.io/v1alpha1/namespaces/team/rolloutbatches/b/status",
                     {"status": {"phase": "Running"}}, "Strict"),
                    ("/apis/rl.agentruntime.io/v1alpha1/namespaces/team/rolloutpools/warm/status",
                     {"status": {"readyPods": 3}}, "Strict")]
