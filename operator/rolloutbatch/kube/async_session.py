"""aiohttp sessions to the API server, built from the kubeconfig ``kube.client`` loads.

The synchronous client (``kube.client.Api``) lets pykube apply the kubeconfig's TLS settings and
its exec and auth-provider credentials at send time. The calls made on the event loop instead
(log reads in ``kube.async_logs``, pods/exec in ``kube.pod_exec``) need the TLS settings as an
``ssl.SSLContext``; this module is the one place that builds it. The token header and the proxy
are every client's (``kube.transport``).

Handled: a client certificate, a bearer token or a token file (re-read on every call: projected
service-account tokens rotate), the cluster's CA or ``insecure-skip-tls-verify``, its
``proxy-url`` or the environment's proxy (``kube.transport.proxy``). Not handled:
exec plugins and auth providers (they need pykube's machinery, which is synchronous) and plain
``http://`` servers; :func:`supported` says so before anything is tried.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp
import pykube

from rolloutbatch.kube.errors import BadRequest, Unavailable, from_text, json_answer
from rolloutbatch.kube.transport import proxy


def supported(config: pykube.KubeConfig) -> bool:
    """Whether the kubeconfig's credentials can be carried by an aiohttp session."""
    user = config.user or {}
    return not ({"exec", "auth-provider"} & set(user)) and config.cluster["server"].startswith("https://")


def ssl_context(config: pykube.KubeConfig) -> ssl.SSLContext:
    """The TLS settings: the cluster's CA and the client certificate. ``insecure-skip-tls-verify``
    skips checking the server, never sending the certificate (pykube sends it either way: without
    it the API server takes the caller for system:anonymous)."""
    cluster, user = config.cluster, config.user or {}
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(
            cafile=cluster["certificate-authority"].filename() if "certificate-authority" in cluster else None)
    if "client-certificate" in user:
        context.load_cert_chain(user["client-certificate"].filename(), user["client-key"].filename())
    return context


def open_session(config: pykube.KubeConfig, *, pool: int, timeout: float | None, user_agent: str,
                 tls: ssl.SSLContext | bool | None = None, middlewares: Sequence[Any] = (),
                 keepalive: float | None = None) -> aiohttp.ClientSession:
    """A session whose connections carry the kubeconfig's TLS settings (``tls``: one already
    built, to skip reading the files again), idle ones kept ``keepalive`` seconds (aiohttp's
    default when None). Credentials in headers are per request (``transport.auth_headers``): a token
    file may change between two requests."""
    kept = {"keepalive_timeout": keepalive} if keepalive is not None else {}
    connector = aiohttp.TCPConnector(limit=pool, ssl=ssl_context(config) if tls is None else tls, **kept)
    extra = {"middlewares": tuple(middlewares)} if middlewares else {}
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout),
                                 headers={"User-Agent": user_agent}, proxy=proxy(config), **extra)


class SessionPerLoop:
    """An aiohttp session per event loop, opened by ``opener`` at its first use on that loop.

    A session is bound to the loop it was opened on: one caller that runs each step with
    ``asyncio.run`` (a training loop) gets a new loop each time, and the last step's session
    then fails with "Event loop is closed". The session of a loop that has been closed is let go
    from the loop in use: nothing is left to run on its own loop (its connections cannot be closed
    politely there, only forgotten). A session of a loop still open (another thread's) is its own.
    """

    def __init__(self, opener: Callable[[], aiohttp.ClientSession]) -> None:
        self._opener = opener
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

    async def get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            await self._let_go_of_dead_loops()
            session = self._sessions[loop] = self._opener()
        return session

    async def _let_go_of_dead_loops(self) -> None:
        for loop in [loop for loop in self._sessions if loop.is_closed()]:
            # On a closed loop, close() marks the session and its connector closed (no "Unclosed"
            # warnings later) without scheduling anything there.
            await self._sessions.pop(loop).close()

    async def close(self) -> None:
        """Close this loop's session, and let go of those of closed loops."""
        await self._let_go_of_dead_loops()
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()


class LoopSession:
    """One session to the API server per event loop it is used on, opened at its first use there
    (and again once closed); :meth:`close` at shutdown. The base of the operator's calls on the
    loop (``async_logs``, ``async_writes``)."""

    def __init__(self, config: pykube.KubeConfig, *, pool: int, timeout: float, user_agent: str,
                 keepalive: float | None = None) -> None:
        self.config = config
        self.base = config.cluster["server"].rstrip("/")
        self.pool, self.timeout, self.user_agent, self.keepalive = pool, timeout, user_agent, keepalive
        self._sessions = SessionPerLoop(lambda: open_session(self.config, pool=self.pool, timeout=self.timeout,
                                                             user_agent=self.user_agent, keepalive=self.keepalive))

    async def _open(self) -> aiohttp.ClientSession:
        return await self._sessions.get()

    async def close(self) -> None:
        await self._sessions.close()


async def send_json(session: aiohttp.ClientSession, method: str, url: str, what: str, *,
                    params: Mapping[str, Any] | None = None, body: Any = None,
                    headers: Mapping[str, str] | None = None, timeout: float | None = None) -> Any:
    """One API call with a JSON body (``body``, when not None) and a JSON answer ({} when empty),
    as ``kube.client.Api.request`` makes it in a thread: a body JSON cannot carry (NaN) is
    ``BadRequest`` before anything is sent, a refusal the mapped ``KubeError`` (``errors.from_text``),
    a failed connection, a timeout or an answer that is not JSON ``Unavailable``."""
    try:
        data = json.dumps(body, allow_nan=False) if body is not None else None
    except ValueError as exc:
        raise BadRequest(f"{what}: the request body is not valid JSON: {exc}") from None
    sent = {"Content-Type": "application/json", **(headers or {})} if data is not None else dict(headers or {})
    extra = {"timeout": aiohttp.ClientTimeout(total=timeout)} if timeout is not None else {}
    try:
        async with session.request(method, url, params={k: str(v) for k, v in (params or {}).items()}, data=data,
                                   headers=sent, **extra) as response:
            text = await response.text(errors="replace")
            if response.status >= 400:
                raise from_text(response.status, text, what)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise Unavailable(f"{what}: {exc or type(exc).__name__}") from exc
    return json_answer(text, what)


def api_message(text: str) -> str:
    """The ``message`` of the API's Status body, or the text as it came."""
    try:
        body = json.loads(text)
        return str(body.get("message") or text) if isinstance(body, dict) else text
    except ValueError:
        return text


def api_reason(text: str) -> str:
    """The ``reason`` of the API's Status body ("" when there is none)."""
    try:
        body = json.loads(text)
        return str(body.get("reason") or "") if isinstance(body, dict) else ""
    except ValueError:
        return ""
