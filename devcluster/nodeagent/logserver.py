"""HTTPS kubelet endpoints: /containerLogs/{ns}/{pod}/{container} and /healthz.

Query parameters as the apiserver forwards them: follow, previous, timestamps, tailLines,
limitBytes, sinceSeconds, sinceTime. The apiserver does not verify this certificate and
does not authenticate to us; the server listens on 127.0.0.1 only.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import time

from aiohttp import web

from .logstore import LogStore, parse_line, parse_ts, render

log = logging.getLogger("nodeagent.logs")


def _bool(q, name: str) -> bool:
    return q.get(name, "").lower() in ("true", "1", "yes")


def _int(q, name: str) -> int | None:
    v = q.get(name)
    if v in (None, ""):
        return None
    n = int(v)
    if n < 0:
        raise ValueError(f"{name} must be >= 0")
    return n


READ_CHUNK = 1 << 20   # raw log bytes read at a time for a limitBytes request


def _read_entries(path: str, offset: int = 0, max_bytes: int = -1) -> tuple[list, int]:
    """Complete lines from offset (at most ``max_bytes`` read); returns (parsed entries, new offset)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    chunk = data[:end + 1]
    # Split on b"\n" only, as the kubelet does: splitlines() would also cut at b"\r" (a progress
    # bar), turning one CRI line into a broken one plus a fragment.
    return [parse_line(l) for l in chunk.split(b"\n")[:-1]], offset + len(chunk)


async def _first_body(path: str, *, stamps: bool, since: float | None, tail: int | None,
                      limit: int | None) -> tuple[bytes, int]:
    """What a request answers first, and the offset it read to. With limitBytes (and no
    tailLines) the file is read only as far as the limit needs, as a kubelet does: an episode
    that printed gigabytes must not make the node agent read them all into memory."""
    if limit is None or tail is not None:
        entries, offset = await asyncio.to_thread(_read_entries, path)
        body = render(entries, timestamps=stamps, since=since, tail=tail)
        return (body if limit is None else body[:limit]), offset
    parts, size, offset = [], 0, 0
    while size < limit:
        # lines are at most process.MAX_LINE bytes, so a chunk this size always ends one
        entries, new = await asyncio.to_thread(_read_entries, path, offset, max(READ_CHUNK, limit - size + 65536))
        if new == offset:
            break
        chunk = render(entries, timestamps=stamps, since=since)
        parts.append(chunk)
        size, offset = size + len(chunk), new
    return b"".join(parts)[:limit], offset


def make_app(store: LogStore) -> web.Application:
    async def healthz(_request):
        return web.Response(text="ok")

    async def container_logs(request: web.Request):
        ns, pod, name = (request.match_info[k] for k in ("ns", "pod", "container"))
        q = request.query
        try:
            follow, previous, stamps = _bool(q, "follow"), _bool(q, "previous"), _bool(q, "timestamps")
            tail, limit = _int(q, "tailLines"), _int(q, "limitBytes")
            since = None
            if q.get("sinceSeconds"):
                since = time.time() - int(q["sinceSeconds"])
            elif q.get("sinceTime"):
                since = parse_ts(q["sinceTime"])
        except ValueError as e:
            return web.Response(status=400, text=f"bad request: {e}\n")
        cl = store.lookup(ns, pod, name)
        if cl is None:
            known = store.containers(ns, pod)
            what = f"pod {ns}/{pod}" if known is None else f"container {name} in pod {ns}/{pod}"
            return web.Response(status=404, text=f"{what} not found on this node\n")
        path = cl.path(previous)
        if path is None:
            if previous:
                return web.Response(status=400, text=f'previous terminated container "{name}" in pod "{pod}" not found\n')
            return web.Response(status=400, text=f'container "{name}" in pod "{pod}" is waiting to start\n')
        body, offset = await _first_body(path, stamps=stamps, since=since, tail=tail, limit=limit)
        live = follow and not previous and cl.active and cl.path() == path
        if not live:
            return web.Response(body=body, content_type="text/plain")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        sent = 0

        async def send(b: bytes) -> bool:
            nonlocal sent
            if limit is not None:
                b = b[:max(0, limit - sent)]
            if b:
                await resp.write(b)
                sent += len(b)
            return limit is None or sent < limit

        if await send(body):
            while True:
                ev = cl.changed
                active = cl.active and cl.path() == path
                entries, offset = _read_entries(path, offset)
                if entries and not await send(render(entries, timestamps=stamps)):
                    break
                if not active:
                    break
                try:
                    await asyncio.wait_for(ev.wait(), 5)
                except asyncio.TimeoutError:
                    pass
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/containerLogs/{ns}/{pod}/{container}", container_logs)
    return app


async def start(store: LogStore, port: int, cert: str, key: str, host: str = "127.0.0.1",
                netns: str | None = None, client_ca: str | None = None) -> web.AppRunner:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # skip system CA loading
    ctx.load_cert_chain(cert, key)
    if client_ca:  # on the node's address pods can reach us: only the apiserver's cert gets in
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=client_ca)
    runner = web.AppRunner(make_app(store), access_log=None, handle_signals=False)
    await runner.setup()
    for attempt in range(40):  # a previous agent on this port may still be exiting
        try:
            if netns:  # the node's address lives in the node's netns, the agent does not
                from .cni import listen_in_netns
                site = web.SockSite(runner, listen_in_netns(netns, host, port), ssl_context=ctx)
            else:
                site = web.TCPSite(runner, host, port, ssl_context=ctx, reuse_address=True)
            await site.start()
            break
        except OSError as e:
            if attempt == 39:
                raise
            log.warning("port %d: %s; retrying", port, e.strerror)
            await asyncio.sleep(0.25)
    log.info("serving container logs on https://%s:%d", host, port)
    return runner
