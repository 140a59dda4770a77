"""A counting reverse proxy in front of kube-apiserver, for the operator only.

kube-apiserver's ``apiserver_request_total`` has no user-agent label, so it cannot tell the
operator's requests from the controller manager's, the scheduler's or the kubelets'. The bench
therefore points the operator at this proxy (plain HTTP on 127.0.0.1, a kubeconfig of its own)
and the proxy forwards every request to the apiserver over TLS with the devcluster's admin client
certificate, counting it by (User-Agent, verb, resource). Watches and log reads are streamed.

Run: python bench/apiproxy.py KUBECONFIG PORT ; ``GET /__bench/counts`` returns the counters as
JSON, ``POST /__bench/reset`` zeroes them.
"""
from __future__ import annotations

import base64
import collections
import json
import re
import ssl
import sys
import tempfile

import aiohttp
import yaml
from aiohttp import web

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "host", "content-length", "authorization"}
_RESOURCE = re.compile(r"^/(?:api/v1|apis/[^/]+/[^/]+)(?:/namespaces/[^/]+)?/([^/?]+)(?:/[^/?]+(?:/([^/?]+))?)?")


def _ssl_context(kubeconfig: str) -> tuple[str, ssl.SSLContext]:
    cfg = yaml.safe_load(open(kubeconfig))
    cluster = cfg["clusters"][0]["cluster"]
    user = cfg["users"][0]["user"]
    tmp = tempfile.mkdtemp(prefix="apiproxy-")
    paths = {}
    for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        path = f"{tmp}/{key}"
        src = cluster if key.startswith("certificate-authority") else user
        open(path, "wb").write(base64.b64decode(src[key]))
        paths[key] = path
    ctx = ssl.create_default_context(cafile=paths["certificate-authority-data"])
    ctx.load_cert_chain(paths["client-certificate-data"], paths["client-key-data"])
    return cluster["server"], ctx


def classify(method: str, path: str, query: dict) -> tuple[str, str]:
    verb = method.upper()
    if verb == "GET":
        verb = "WATCH" if query.get("watch") in ("1", "true") else "GET"
    m = _RESOURCE.match(path)
    if not m:
        return verb, path.split("?")[0]
    resource, sub = m.group(1), m.group(2)
    if resource == "namespaces" and "/namespaces/" in path and sub is None:
        resource = "namespaces"
    return verb, resource + (f"/{sub}" if sub else "")


def main() -> None:
    kubeconfig, port = sys.argv[1], int(sys.argv[2])
    server, ctx = _ssl_context(kubeconfig)
    counts: collections.Counter = collections.Counter()
    session: aiohttp.ClientSession | None = None

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal session
        if request.path == "/__bench/counts":
            rows = [{"user_agent": ua, "verb": v, "resource": r, "count": n} for (ua, v, r), n in counts.items()]
            return web.json_response(rows)
        if request.path == "/__bench/reset":
            counts.clear()
            return web.json_response({})
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                            timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)
        agent = request.headers.get("User-Agent", "").split("/")[0].split(" ")[0] or "-"
        verb, resource = classify(request.method, request.path, dict(request.query))
        counts[(agent, verb, resource)] += 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        body = await request.read()
        async with session.request(request.method, server + request.path_qs, headers=headers,
                                   data=body or None, allow_redirects=False) as upstream:
            resp = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP})
            await resp.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
            except (ConnectionResetError, aiohttp.ClientError):
                pass
            return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", handler)
    web.run_app(app, host="127.0.0.1", port=port, print=lambda *_: print("proxy ready", flush=True),
                access_log=None)


if __name__ == "__main__":
    main()
