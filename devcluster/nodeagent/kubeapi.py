"""Kubeconfig loading and a small asyncio REST client (aiohttp) for the kube-apiserver."""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
from typing import AsyncIterator

import aiohttp
import yaml

log = logging.getLogger("nodeagent.api")

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, body: dict | str, method: str = "", path: str = ""):
        self.status = status
        self.body = body
        reason = body.get("reason", "") if isinstance(body, dict) else ""
        msg = body.get("message", "") if isinstance(body, dict) else str(body)[:300]
        self.reason = reason
        super().__init__(f"{method} {path}: {status} {reason}: {msg}")


def load_kubeconfig(path: str, secret_dir: str) -> tuple[str, ssl.SSLContext]:
    """Return (server URL, SSL context with the client certificate) for the current context."""
    with open(path) as f:
        cfg = yaml.safe_load(f)
    ctx_name = cfg.get("current-context")
    contexts = {c["name"]: c["context"] for c in cfg.get("contexts", [])}
    context = contexts.get(ctx_name) or next(iter(contexts.values()))
    cluster = {c["name"]: c["cluster"] for c in cfg["clusters"]}[context["cluster"]]
    user = {u["name"]: u["user"] for u in cfg.get("users", [])}.get(context.get("user"), {})
    base = os.path.dirname(os.path.abspath(path))

    def material(data_key: str, file_key: str, src: dict, out_name: str) -> str | None:
        if src.get(data_key):
            os.makedirs(secret_dir, mode=0o700, exist_ok=True)
            out = os.path.join(secret_dir, out_name)
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(src[data_key]))
            return out
        if src.get(file_key):
            p = src[file_key]
            return p if os.path.isabs(p) else os.path.join(base, p)
        return None

    ca = material("certificate-authority-data", "certificate-authority", cluster, "ca.crt")
    # with a cluster CA, don't load the system's trust store (slow, and not wanted)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT) if ca else ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif ca:
        ctx.load_verify_locations(cafile=ca)
    cert = material("client-certificate-data", "client-certificate", user, "client.crt")
    key = material("client-key-data", "client-key", user, "client.key")
    if cert and key:
        ctx.load_cert_chain(cert, key)
    return cluster["server"].rstrip("/"), ctx


class Api:
    def __init__(self, server: str, ssl_ctx: ssl.SSLContext, *, connections: int = 24):
        self.server = server
        self._ssl = ssl_ctx
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._watch_session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._connections, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=60, sock_connect=10))
        self._watch_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=8),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None))

    async def close(self) -> None:
        for s in (self._session, self._watch_session):
            if s is not None:
                await s.close()

    async def request(self, method: str, path: str, *, params: dict | None = None,
                      body: dict | None = None, content_type: str = "application/json",
                      retries: int = 3) -> dict:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"))
            headers["Content-Type"] = content_type
        for attempt in range(retries + 1):
            try:
                async with self._session.request(method, self.server + path, params=params,
                                                 data=data, headers=headers) as resp:
                    raw = await resp.read()
                    if resp.status >= 400:
                        try:
                            err = json.loads(raw)
                        except ValueError:
                            err = raw.decode("utf-8", "replace")
                        if resp.status in (429, 500, 503, 504) and attempt < retries:
                            await asyncio.sleep(0.5 * (attempt + 1))
                            continue
                        raise ApiError(resp.status, err, method, path)
                    return json.loads(raw) if raw else {}
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as e:
                if attempt >= retries:
                    raise
                log.debug("%s %s: %s; retrying", method, path, e)
                await asyncio.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    async def get(self, path: str, **params) -> dict:
        return await self.request("GET", path, params=params or None)

    async def post(self, path: str, body: dict) -> dict:
        return await self.request("POST", path, body=body)

    async def put(self, path: str, body: dict) -> dict:
        return await self.request("PUT", path, body=body)

    async def patch(self, path: str, body: dict, content_type: str = SMP) -> dict:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, body: dict | None = None) -> dict:
        return await self.request("DELETE", path, body=body)

    async def watch(self, path: str, params: dict) -> AsyncIterator[dict]:
        """One watch request; yields decoded events until the server closes the stream."""
        params = dict(params, watch="true")
        async with self._watch_session.get(self.server + path, params=params,
                                           headers={"Accept": "application/json"}) as resp:
            if resp.status >= 400:
                raw = await resp.read()
                try:
                    err = json.loads(raw)
                except ValueError:
                    err = raw.decode("utf-8", "replace")
                raise ApiError(resp.status, err, "WATCH", path)
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                if b"\n" not in chunk:
                    continue
                lines = buf.split(b"\n")
                buf = lines.pop()
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
