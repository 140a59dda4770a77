"""devcluster.nodeagent.logstore and logserver: CRI-format files, kubectl logs parameters."""
from __future__ import annotations

import asyncio

from devcluster.nodeagent.logserver import make_app
from devcluster.nodeagent.logstore import LogStore, format_line, parse_line, parse_ts, render, ts_nano

T = 1_800_000_000.5


def _entries(*specs):
    return [parse_line(format_line(T + i, "stdout", c, p)) for i, (c, p) in enumerate(specs)]


def test_line_roundtrip():
    line = format_line(T, "stderr", b"a b c", False)
    assert line.endswith(b" stderr F a b c\n")
    ts, stream, partial, content = parse_line(line)
    assert stream == "stderr" and not partial and content == b"a b c"
    assert abs(parse_ts(ts) - T) < 1e-6
    assert parse_line(format_line(T, "stdout", b"", False))[3] == b""


def test_parse_ts_forms():
    assert parse_ts("2027-01-15T08:00:00Z") == 1_800_000_000
    assert abs(parse_ts(ts_nano(T)) - T) < 1e-6
    assert parse_ts("2027-01-15T09:00:00+01:00") == 1_800_000_000


def test_render_tail_partial_timestamps_since():
    e = _entries((b"one", False), (b"tw", True), (b"o", False), (b"three", False), (b"tail", True))
    assert render(e) == b"one\ntwo\nthree\ntail"
    assert render(e, tail=2) == b"three\ntail"
    assert render(e, tail=3) == b"two\nthree\ntail"
    assert render(e, tail=0) == b""
    assert render(e, since=T + 3) == b"three\ntail"
    assert render(e[:1], timestamps=True) == ts_nano(T).encode() + b" one\n"


async def _serve_and_get(store, paths):
    from aiohttp import ClientSession, web
    runner = web.AppRunner(make_app(store))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    out = []
    async with ClientSession() as s:
        for p in paths:
            async with s.get(f"http://127.0.0.1:{port}{p}") as r:
                out.append((r.status, await r.read()))
    await runner.cleanup()
    return out


def test_server_endpoints(tmp_path):
    async def go():
        store = LogStore()
        logs = store.register("ns", "pod", "uid", str(tmp_path), ["main"])
        cl = logs["main"]
        cl.start(0)
        cl.write("stdout", b"first run")
        cl.close()
        cl.start(1)
        for i in range(5):
            cl.write("stdout", f"line {i}".encode())
        cl.write("stderr", b"oops")

        async def finish():
            await asyncio.sleep(0.3)
            cl.write("stdout", b"late")
            cl.close()
        fin = asyncio.create_task(finish())
        res = await _serve_and_get(store, [
            "/healthz",
            "/containerLogs/ns/pod/main?tailLines=2",
            "/containerLogs/ns/pod/main?previous=true",
            "/containerLogs/ns/pod/main?limitBytes=6",
            "/containerLogs/ns/pod/main?follow=true&tailLines=1",
            "/containerLogs/ns/pod/nope",
            "/containerLogs/ns/other/main",
            "/containerLogs/ns/pod/main?tailLines=x",
        ])
        await fin
        store.unregister("ns", "pod", "uid")
        assert store.lookup("ns", "pod", "main") is None
        return res
    res = asyncio.run(go())
    assert res[0] == (200, b"ok")
    assert res[1] == (200, b"line 4\noops\n")
    assert res[2] == (200, b"first run\n")
    assert res[3] == (200, b"line 0")
    assert res[4] == (200, b"oops\nlate\n")  # follow streams until the container exits
    assert res[5][0] == 404 and res[6][0] == 404 and res[7][0] == 400


def test_carriage_returns_stay_inside_their_line(tmp_path):
    """A progress bar (b"\\r") is content: the reader splits CRI lines on b"\\n" only, like the kubelet."""
    async def go():
        store = LogStore()
        cl = store.register("ns", "pod", "uid", str(tmp_path), ["main"])["main"]
        cl.start(0)
        cl.write("stdout", b"10%\r50%\r100%")
        cl.write("stdout", b'{"event": "ready"}\r')
        cl.write("stdout", b"\x0bvt\x0cff\x1cfs")
        cl.close()
        return await _serve_and_get(store, ["/containerLogs/ns/pod/main",
                                            "/containerLogs/ns/pod/main?tailLines=1",
                                            "/containerLogs/ns/pod/main?timestamps=true"])
    full, tail, stamped = asyncio.run(go())
    assert full == (200, b'10%\r50%\r100%\n{"event": "ready"}\r\n\x0bvt\x0cff\x1cfs\n')
    assert tail == (200, b"\x0bvt\x0cff\x1cfs\n")
    lines = stamped[1].split(b"\n")[:-1]
    assert len(lines) == 3 and lines[0].endswith(b" 10%\r50%\r100%")


def test_limit_bytes_reads_only_as_far_as_the_limit_needs(tmp_path, monkeypatch):
    """A flood of stdout stays on disk: limitBytes answers from the file's start, read in chunks."""
    from devcluster.nodeagent import logserver
    monkeypatch.setattr(logserver, "READ_CHUNK", 64 * 1024)
    reads = []
    real = logserver._read_entries

    def counting(path, offset=0, max_bytes=-1):
        reads.append(max_bytes)
        return real(path, offset, max_bytes)
    monkeypatch.setattr(logserver, "_read_entries", counting)

    async def go():
        store = LogStore()
        cl = store.register("ns", "pod", "uid", str(tmp_path), ["main"])["main"]
        cl.start(0)
        for i in range(40_000):                       # ~2.4 MB of CRI lines
            cl.write("stdout", f"line {i:06d} ".encode() + b"x" * 10, i % 7 == 0)
        cl.close()
        return await _serve_and_get(store, ["/containerLogs/ns/pod/main?limitBytes=100000",
                                            "/containerLogs/ns/pod/main"])
    (status, limited), (_, whole) = asyncio.run(go())
    assert status == 200 and limited == whole[:100_000] and len(whole) > 500_000
    bounded = [n for n in reads if n != -1]
    assert bounded and sum(bounded) < 400_000         # not the whole file for the limited read
