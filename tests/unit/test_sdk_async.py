"""sdk.aio on a fake async API: the same verbs and followers as the blocking client."""
from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from rolloutbatch import sdk
from rolloutbatch.sdk import aio
from rolloutbatch.sdk.aio import AsyncApi, AsyncBatchHandle, AsyncClient
from tests.unit.fake_watch import event
from tests.unit.test_sdk_follow import BATCHES, CMS, FINAL_UNSETTLED, NAME, NS, UID, batch, cm, listing, recorded, row
from rolloutbatch.kube.errors import Gone, KubeError, classify
from rolloutbatch.sdk import result_ops


class FakeAsyncApi:
    def __init__(self, lists, watches):
        self.lists, self.watches, self.deleted, self.calls = lists, watches, [], []

    async def get(self, path, what, **params):
        self.calls.append((path, params))
        if path not in self.lists:
            raise sdk.NotFound(what, status=404)
        answers = self.lists[path]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def delete(self, path, what, body=None):
        self.deleted.append(path)
        return {}

    async def lines(self, path, what, read_timeout, **params):
        sessions = self.watches.get(path) or []
        session = sessions.pop(0) if sessions else [0.05]
        for line in session:
            if isinstance(line, BaseException):
                raise line
            if isinstance(line, float):
                await asyncio.sleep(line)
                continue
            yield line


def test_async_stream_groups_wait_and_delete():
    def api():
        # The head, then a shard; the status records them only at the end.
        head, shard = cm([row(1), row(0), row(3)], rv="11"), cm([row(2), row(3)], name=f"{NAME}-results-0", rv="12")
        done = recorded({"phase": "Succeeded", "progress": "4/4"}, head, shard)
        return FakeAsyncApi(
            lists={BATCHES: [listing([batch(recorded({"phase": "Running"}, cm([row(1)])))])],
                   CMS: [listing([cm([row(1)])])]},
            watches={CMS: [[event("MODIFIED", head), sdk.Unavailable("dropped")], [event("MODIFIED", shard)]],
                     BATCHES: [[1.0, event("MODIFIED", batch(done))]]})

    async def main():
        client = AsyncClient(api=api(), namespace=NS)
        handle = AsyncBatchHandle(client, batch({"phase": "Running"}))
        rows = [r["index"] async for r in handle.stream(timeout=5)]
        client = AsyncClient(api=api(), namespace=NS)
        handle = AsyncBatchHandle(client, batch({"phase": "Running"}))
        groups = [g async for g in handle.groups(timeout=5)]
        client = AsyncClient(api=api(), namespace=NS)
        handle = AsyncBatchHandle(client, batch({"phase": "Running"}))
        status = await handle.wait(timeout=5)
        await handle.delete(wait=False)
        return rows, groups, status, client.api.deleted

    rows, groups, status, deleted = asyncio.run(main())
    assert rows == [1, 0, 3, 2]
    assert [(g["group"], g["final"], len(g["rows"])) for g in groups] == [(0, True, 2), (1, True, 2)]
    assert status["progress"] == "4/4" and deleted == [f"{BATCHES}/b"]


def test_async_stream_and_results_skip_a_forged_shard():
    ours = cm([row(0), row(1), row(2), row(3)])
    forged = cm([row(0, reward=1e6)], name=f"{NAME}-results-0")
    final = batch(recorded({"phase": "Succeeded"}, ours))
    head_path = f"{CMS}/{NAME}-results"

    async def main():
        api = FakeAsyncApi(lists={BATCHES: [listing([final])], CMS: [listing([forged, ours])], head_path: [ours]},
                           watches={})
        handle = AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch({"phase": "Running"}))
        rows = [(r["index"], r["reward"]) async for r in handle.stream(timeout=5)]
        edited = dict(ours, data=forged["data"])
        api = FakeAsyncApi(lists={head_path: [edited], f"{BATCHES}/{NAME}": [final]}, watches={})
        with pytest.raises(sdk.ResultsNotReady, match="changed since the operator wrote it"):
            await AsyncBatchHandle(AsyncClient(api=api, namespace=NS), final).results()
        api = FakeAsyncApi(lists={head_path: [ours]}, watches={})
        return rows, await AsyncBatchHandle(AsyncClient(api=api, namespace=NS), final).results()

    rows, results = asyncio.run(main())
    assert rows == [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]
    assert [r["reward"] for r in results] == [1.0] * 4


def test_async_results_and_stream_raise_when_a_listed_shard_is_gone():
    head = cm([], shards=[{"name": f"{NAME}-results-{n}", "rows": 2, "full": True} for n in range(2)])
    shards = [cm([row(0), row(1)], name=f"{NAME}-results-0", shard=0),
              cm([row(2), row(3)], name=f"{NAME}-results-1", shard=1)]
    final = batch(recorded({"phase": "Succeeded"}, head, *shards))
    head_path = f"{CMS}/{NAME}-results"

    def api():   # shard 0 deleted by a neighbour
        return FakeAsyncApi(lists={BATCHES: [listing([final])], CMS: [listing([head, shards[1]])],
                                   head_path: [head], f"{head_path}-1": [shards[1]]}, watches={})

    async def main():
        with pytest.raises(sdk.ResultsIncomplete, match=f"{NAME}-results-0 deleted"):
            await AsyncBatchHandle(AsyncClient(api=api(), namespace=NS), final).results()
        document = await AsyncBatchHandle(AsyncClient(api=api(), namespace=NS), final).document()
        with pytest.raises(sdk.ResultsIncomplete, match=f"{NAME}-results-0 are gone"):
            [r async for r in AsyncBatchHandle(AsyncClient(api=api(), namespace=NS), final).stream(timeout=5)]
        return document

    document = asyncio.run(main())
    assert [r["index"] for r in document["pods"]] == [2, 3] and document["missing_shards"] == [f"{NAME}-results-0"]


def test_async_stream_relists_from_scratch_when_a_list_page_expires():
    """sdk.follow's ListWatch under the async watch task: page 2 answers 410 (the continue token
    expired), the list starts again from page 1, and no row comes twice."""
    head, shard = cm([row(0), row(1)]), cm([row(2), row(3)], name=f"{NAME}-results-0")
    status = recorded({"phase": "Running"}, head, shard)

    def page(items, token=None):
        return {"metadata": {"resourceVersion": "10", **({"continue": token} if token else {})}, "items": items}

    async def main():
        api = FakeAsyncApi(lists={BATCHES: [listing([batch(status)])],
                                  CMS: [page([head], "t1"), Gone("continue parameter too old", status=410),
                                        page([head], "t2"), page([shard])],
                                  f"{CMS}/{NAME}-results": [head], f"{CMS}/{NAME}-results-0": [shard]},
                           watches={BATCHES: [[0.5, event("MODIFIED", batch(dict(status, phase="Succeeded")))]]})
        handle = AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch(status))
        return [r["index"] async for r in handle.stream(timeout=5)], api.calls

    rows, calls = asyncio.run(main())
    assert sorted(rows) == [0, 1, 2, 3]
    assert [params.get("continue") for path, params in calls if path == CMS][:4] == [None, "t1", None, "t2"]


def test_an_async_watch_that_fails_unexpectedly_ends_the_wait_with_its_error():
    """As the sync client's: the task died without a word and the wait ran to its timeout."""
    async def main():
        client = AsyncClient(api=FakeAsyncApi(lists={BATCHES: [RuntimeError("a page nobody expected")]}, watches={}),
                             namespace=NS)
        await AsyncBatchHandle(client, batch({"phase": "Running"})).wait(timeout=10)

    with pytest.raises(RuntimeError, match="a page nobody expected"):
        asyncio.run(main())


def test_an_async_wait_ends_at_the_relist_that_lacks_its_batch():
    async def main():
        api = FakeAsyncApi(lists={BATCHES: [listing([batch({"phase": "Running"})]), listing([])]},
                           watches={BATCHES: [[Gone("too old", status=410)]]})
        await AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch({"phase": "Running"})).wait(timeout=10)

    with pytest.raises(sdk.NotFound, match="was deleted"):
        asyncio.run(main())


def test_an_expired_token_ends_the_async_follow_with_its_401_not_at_the_timeout():
    """As the sync client's: a 401 was retried to the timeout, which then never named it."""
    async def main():
        api = FakeAsyncApi(lists={BATCHES: [classify(401, "Unauthorized", "Unauthorized", f"list {BATCHES}")],
                                  CMS: [listing([])]}, watches={})
        running = AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch({"phase": "Running"}))
        return [r async for r in running.stream(timeout=3)]

    with pytest.raises(sdk.Unauthorized) as refused:
        asyncio.run(main())
    assert refused.value.status == 401


def test_async_timeout_and_verbs_share_the_rules():
    async def main():
        client = AsyncClient(api=FakeAsyncApi({BATCHES: [listing([batch({"phase": "Running"})])]}, {}), namespace=NS)
        with pytest.raises(TimeoutError, match="not finished after 0.2s"):
            await AsyncBatchHandle(client, batch()).wait(timeout=0.2)

    asyncio.run(main())


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, True])
@pytest.mark.parametrize("verb", ["wait", "stream", "stop", "delete"])
def test_an_async_timeout_that_is_no_finite_number_is_refused_before_any_call(verb, timeout):
    """The blocking client's rule: a NaN timeout made the asyncio follower spin (``wait_for(...,
    nan)`` times out at once, every turn) and delete poll for ever."""
    async def main():
        api = FakeAsyncApi(lists={BATCHES: [listing([batch({"phase": "Running"})])]}, watches={})
        handle = AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch({"phase": "Running"}))
        call = {"wait": lambda: handle.wait(timeout=timeout), "stop": lambda: handle.stop(wait=True, timeout=timeout),
                "stream": lambda: _drain(handle.stream(timeout=timeout)),
                "delete": lambda: handle.delete(timeout=timeout)}[verb]
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds"):
            await asyncio.wait_for(call(), 3)   # its own bound: a TimeoutError, not the ValueError
        assert api.calls == [] and api.deleted == []

    asyncio.run(main())


def test_an_async_timeout_inside_the_settle_returns_the_final_status():
    async def main():
        api = FakeAsyncApi({BATCHES: [listing([batch(FINAL_UNSETTLED)])]}, {})
        return await AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch()).wait(timeout=0.5, settle=10)
    assert asyncio.run(main())["phase"] == "Succeeded"


def test_an_async_wait_on_a_final_batch_deleted_during_the_settle_returns_its_final_status():
    """As the sync client's: the deletion raised NotFound over the verdict already seen."""
    done = {"phase": "Succeeded", "jobName": "j", "progress": "4/4"}

    async def main():
        api = FakeAsyncApi({BATCHES: [listing([batch(done)])]}, {BATCHES: [[0.3, event("DELETED", batch(done))]]})
        return await asyncio.wait_for(
            AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch()).wait(timeout=30, settle=10), 5)
    assert asyncio.run(main())["phase"] == "Succeeded"


def test_a_transient_error_in_the_async_final_sweep_is_asked_again():
    """As the sync client's: one 503 on the head's GET ended the stream with Unavailable."""
    last = cm([row(0), row(1), row(2), row(3)])
    final = batch(recorded({"phase": "Succeeded", "progress": "4/4"}, last))
    api = FakeAsyncApi(lists={BATCHES: [listing([final])], CMS: [listing([])],
                              f"{CMS}/{NAME}-results": [sdk.Unavailable("503 the server is busy", status=503),
                                                        last]}, watches={})

    async def main():
        h = AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch({"phase": "Running"}))
        return [r["index"] async for r in h.stream(timeout=10)]
    assert sorted(asyncio.run(main())) == [0, 1, 2, 3]


def test_an_async_batch_stalled_on_a_namesakes_retained_head_ends_its_groups_quietly():
    """As the sync client's: the earlier batch's head at the name raised ResultsIncomplete."""
    earlier = cm([row(0), row(1), row(2), row(3)], uid="old-uid")
    stalled = {"phase": "Failed", "reason": "ResultsConfigMapConflict", "progress": "0/4",
               "conditions": [{"type": "Stalled", "status": "True", "reason": "ResultsConfigMapConflict"}]}
    api = FakeAsyncApi(lists={BATCHES: [listing([batch(stalled)])], CMS: [listing([])],
                              f"{CMS}/{NAME}-results": [earlier]}, watches={})

    async def main():
        h = AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch({"phase": "Running"}))
        return [(g["group"], g["final"], g["rows"]) async for g in h.groups(timeout=5)]
    assert asyncio.run(main()) == [(0, False, []), (1, False, [])]


def test_the_async_followers_other_times_are_checked_too():
    async def main():
        api = FakeAsyncApi(lists={BATCHES: [listing([batch({"phase": "Running"})])]}, watches={})
        handle = AsyncBatchHandle(AsyncClient(api=api, namespace=NS), batch({"phase": "Running"}))
        with pytest.raises(ValueError, match="settle must be a finite number of seconds"):
            await asyncio.wait_for(handle.wait(timeout=5, settle=float("nan")), 3)
        with pytest.raises(ValueError, match="watch_seconds must be a finite number of seconds"):
            await asyncio.wait_for(_drain(handle.stream(timeout=5, watch_seconds=float("nan"))), 3)
        with pytest.raises(ValueError, match="watch_seconds must be a finite number of seconds, above 0"):
            await asyncio.wait_for(_drain(handle.groups(timeout=5, watch_seconds=0)), 3)   # not the default
        assert api.calls == []

    asyncio.run(main())


async def _drain(rows):
    return [row async for row in rows]


async def _watch_lines_from_a_local_server(*chunks: bytes) -> list[bytes]:
    """AsyncApi.lines over a watch a local aiohttp server answers with ``chunks`` (127.0.0.1 only)."""
    from types import SimpleNamespace

    from aiohttp import web

    async def watch(request):
        response = web.StreamResponse()
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get(CMS, watch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    api = AsyncApi(SimpleNamespace(cluster={"server": f"http://127.0.0.1:{port}"}, user={"token": "t"}))
    try:
        return [line async for line in api.lines(CMS, "watch", read_timeout=10, watch="true")]
    finally:
        await api.close()
        await runner.cleanup()


def test_async_watch_reads_a_results_configmap_event_of_several_hundred_kib():
    """A results ConfigMap holds up to 900 KiB (core.results.GZIP_ABOVE), so its watch event is one
    JSON line that long. aiohttp's readline stops at twice read_bufsize (512 KiB on aiohttp 3.14,
    128 KiB on 3.9) with an error that is neither a KubeError nor a ValueError: the watch task
    died and stream()/groups() got no row until the batch was final (the sweep)."""
    big = {"type": "MODIFIED", "object": {"kind": "ConfigMap", "metadata": {"name": "b-results",
                                                                             "resourceVersion": "7"},
                                          "data": {"results.json": "x" * 880_000}}}
    small = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}}
    line, short = json.dumps(big).encode(), json.dumps(small).encode()
    # Lines cut across writes (a newline alone, too), and an end and a start in one write.
    got = asyncio.run(_watch_lines_from_a_local_server(line[:1000], line[1000:], b"\n", short + b"\n" + short[:5],
                                                       short[5:] + b"\n"))
    assert [json.loads(x)["object"]["metadata"]["resourceVersion"] for x in got] == ["7", "8", "8"]
    assert got[0] == line


def test_async_watch_line_past_the_bound_is_a_kube_error(monkeypatch):
    """A line longer than any object the API server can send is refused as a KubeError, which the
    watch task retries with a pause, never an error it does not catch."""
    monkeypatch.setattr(aio, "MAX_LINE_BYTES", 1000)
    with pytest.raises(KubeError, match="longer than 1000 bytes"):
        asyncio.run(_watch_lines_from_a_local_server(b"x" * 600, b"x" * 600 + b"\n"))


class _OneBatch(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps(batch({"phase": "Running"})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_one_async_client_serves_a_training_step_per_event_loop():
    """A trainer keeps one AsyncClient and runs each step with ``asyncio.run``: the second step's
    first call raised "Event loop is closed" (the first loop's session, reused)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OneBatch)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = SimpleNamespace(cluster={"server": f"http://127.0.0.1:{server.server_port}"}, user={})
    client = AsyncClient(api=AsyncApi(config), namespace=NS)

    async def step():
        return (await client.get(NAME))["metadata"]["uid"]

    async def last_step():
        try:
            return await step()
        finally:
            await client.close()
    try:
        assert [asyncio.run(step()), asyncio.run(step()), asyncio.run(last_step())] == [UID] * 3
    finally:
        server.shutdown()
        server.server_close()


def test_async_api_reads_the_kubeconfig(tmp_path):
    import pathlib

    from tests.support.kube import kubeconfig_path

    path = pathlib.Path(kubeconfig_path())
    if not path.exists():
        pytest.skip("no devcluster kubeconfig")
    client = AsyncClient(str(path))
    assert client.api.url.startswith("https://")
    asyncio.run(client.close())


@pytest.fixture(autouse=True)
def _no_status_reread_pauses(monkeypatch):
    """The re-reads of a lagging status keep their count, not their pauses (seconds each)."""
    monkeypatch.setattr(result_ops, "STATUS_REREADS", tuple(0.0 for _ in result_ops.STATUS_REREADS))
