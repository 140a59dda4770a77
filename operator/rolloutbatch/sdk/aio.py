"""The asyncio client: the same verbs (``sdk.ops``) and followers (``sdk.follow``) as ``Client``,
carried by aiohttp.

Why aiohttp: it is already installed with the operator (kopf runs on it), so the async SDK adds
no dependency; it streams a response line by line (watches) and pools connections; and the
kubeconfig is read by the same ``kube.client.load_config`` (pykube), whose certificate and token
fields become one ``ssl.SSLContext`` and a header here (``kube.transport``, ``Client``'s too, as
is the proxy: the cluster's ``proxy-url``, else the environment's). kubernetes_asyncio would
bring typed models (the SDK speaks plain dicts) and a second kubeconfig reader; httpx would be a
new dependency for the same job. Supported credentials: client certificates, bearer tokens and
token files (including in-cluster service accounts); an exec or auth-provider plugin raises
ConfigError (use ``Client`` with ``asyncio.to_thread`` there).

    client = AsyncClient()
    handle = await client.submit(build_batch("step-", task, episodes=64, inputs=tasks, samples_per_input=8))
    async for group in handle.groups():
        ...
    await handle.delete()
"""

from __future__ import annotations

import asyncio
import copy
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from rolloutbatch.kube import transport
from rolloutbatch.kube.async_session import SessionPerLoop, send_json, ssl_context
from rolloutbatch.kube.client import STRICT, USER_AGENT, load_config
from rolloutbatch.kube.errors import ConfigError, KubeError, Unavailable, from_text
from rolloutbatch.sdk import ops, result_ops, retained, session_commands, sessions
from rolloutbatch.sdk.build import build_pool, pool_options
from rolloutbatch.sdk.follow import Follower, ListWatch
from rolloutbatch.sdk.timeouts import checked_timeout
from rolloutbatch.sdk.types import Group, Row

# The longest watch line read. A watch event is one object, and etcd refuses one over 1.5 MiB
# (its default --max-request-bytes); as JSON it can be longer (base64 binaryData is 4/3, an
# escaped control character six bytes for one): 16 MiB holds that and bounds a line that never ends.
MAX_LINE_BYTES = 16 * 1024 * 1024


class AsyncApi:
    """``kube.client.Api``'s methods (get, create, merge_patch, replace, delete) as coroutines,
    plus ``lines`` for a watch."""

    def __init__(self, config: Any, *, timeout: float = 30) -> None:
        cluster, user = config.cluster, config.user
        self.config = config
        self._exec: Any = None   # kube.pod_exec.PodExec, made at the first exec
        self.url = cluster["server"].rstrip("/")
        self.timeout = timeout
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if "exec" in user or "auth-provider" in user:
            raise ConfigError("the async client supports client certificates and tokens, not exec or "
                              "auth-provider plugins: use rolloutbatch.sdk.Client")
        if not (user.get("token") or user.get("tokenFile")) and user.get("username") and user.get("password"):
            self._auth = aiohttp.BasicAuth(user["username"], user["password"])
        try:
            self._ssl = ssl_context(config)
        except (OSError, ssl.SSLError, KeyError, ValueError) as exc:
            raise ConfigError(f"cannot load the kubeconfig's certificates: {exc}") from None
        proxy = transport.proxy(config)
        self._sessions = SessionPerLoop(lambda: aiohttp.ClientSession(
            headers=self._headers, auth=getattr(self, "_auth", None), proxy=proxy,
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=16)))

    async def _client(self) -> aiohttp.ClientSession:
        # One per event loop: a trainer may asyncio.run() each step with this one client.
        return await self._sessions.get()

    async def close(self) -> None:
        await self._sessions.close()

    async def _request(self, method: str, path: str, what: str, *, params: Mapping | None = None,
                       body: Any = None, headers: Mapping | None = None, timeout: float | None = None) -> Any:
        return await send_json(await self._client(), method, self.url + path, what, params=params, body=body,
                               headers={**transport.auth_headers(self.config), **(headers or {})},
                               timeout=timeout or self.timeout)

    async def get(self, path: str, what: str, **params: Any) -> dict:
        return await self._request("GET", path, what, params=params)

    async def create(self, path: str, body: dict, what: str, *, dry_run: bool = False) -> dict:
        params = {**STRICT, "dryRun": "All"} if dry_run else STRICT
        return await self._request("POST", path, what, params=params, body=body)

    async def merge_patch(self, path: str, patch: dict, what: str) -> dict:
        return await self._request("PATCH", path, what, params=STRICT, body=patch,
                                   headers={"Content-Type": "application/merge-patch+json"})

    async def replace(self, path: str, body: dict, what: str) -> dict:
        return await self._request("PUT", path, what, params=STRICT, body=body)

    async def delete(self, path: str, what: str, body: dict | None = None) -> dict:
        return await self._request("DELETE", path, what, body=body)

    async def exec_in_pod(self, namespace: str, pod: str, container: str | None, command: list[str], *,
                          stdin: bytes = b"", timeout: float, limit_bytes: int | None = None,
                          on_output: Any = None) -> Any:
        """pods/exec (``kube.pod_exec``: its own WebSocket per call, this kubeconfig's credentials)."""
        from rolloutbatch.kube import pod_exec
        if self._exec is None:
            self._exec = pod_exec.PodExec(self.config, user_agent=USER_AGENT)
        return await self._exec.run(namespace, pod, container, command, stdin=stdin, timeout=timeout,
                                    limit_bytes=pod_exec.LIMIT_BYTES if limit_bytes is None else limit_bytes,
                                    on_output=on_output)

    async def lines(self, path: str, what: str, *, read_timeout: float, **params: Any) -> AsyncIterator[bytes]:
        """The lines of a streamed GET (a watch), each at most ``MAX_LINE_BYTES`` (KubeError past
        that); a failed read is Unavailable."""
        try:
            async with (await self._client()).get(self.url + path, params={k: str(v) for k, v in params.items()},
                                          headers=transport.auth_headers(self.config),
                                          timeout=aiohttp.ClientTimeout(total=None, sock_connect=10,
                                                                        sock_read=read_timeout)) as response:
                if response.status >= 400:
                    raise from_text(response.status, await response.text(), what)
                # Not content.readline(): it refuses a line over twice read_bufsize (aiohttp's
                # StreamReader), shorter than a results ConfigMap's watch event.
                line = bytearray()
                async for chunk in response.content.iter_any():
                    parts = chunk.split(b"\n")
                    for n, part in enumerate(parts, 1):
                        line += part
                        if len(line) > MAX_LINE_BYTES:
                            raise KubeError(f"{what}: a line longer than {MAX_LINE_BYTES} bytes, "
                                            "more than any object the API server sends")
                        if n < len(parts):      # a newline ended it
                            yield bytes(line)
                            line.clear()
                if line:
                    yield bytes(line)
        # HttpProcessingError: aiohttp's parser errors (LineTooLong, BadHttpMessage) are no ClientError.
        except (aiohttp.ClientError, HttpProcessingError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(f"{what}: {exc or type(exc).__name__}") from exc


async def run(api: Any, op: ops.Op) -> Any:
    """Drive a sans-IO operation with an async API object (``sdk.client.run``'s twin)."""
    answer: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(answer)
            except StopIteration as stop:
                return stop.value
            answer, error = None, None
            if isinstance(step, ops.Sleep):
                await asyncio.sleep(step.seconds)
                continue
            try:
                answer = await getattr(api, step.method)(*step.args, **step.kwargs)
            except KubeError as exc:
                error = exc
            # A cancellation (asyncio.wait_for, a task cancelled, Ctrl-C under asyncio.run) or an
            # error not the API's (a callback's). Not GeneratorExit: a coroutine closed unfinished
            # (its loop gone) can await nothing more.
            except (asyncio.CancelledError, Exception) as exc:
                if step.abandoned is not None:
                    ops.close(op)   # its finally blocks first: a command's time is its own, not its stop's
                    await _abandon(api, step.abandoned, exc)
                raise
    finally:
        ops.close(op)


_ABANDONING: set[asyncio.Future] = set()   # stops still running after a second cancellation


async def _abandon(api: Any, op: ops.Op, error: BaseException) -> None:
    """``op`` (a Call's ``abandoned``) run to its end, its errors ignored: ``error``, which left
    the call it stops, is what the caller gets. Shielded: cancelled meanwhile, the caller goes on at
    once with that cancellation (never lost behind the first error) and the stop still runs to
    its end."""
    stop = asyncio.ensure_future(run(api, op))
    _ABANDONING.add(stop)
    stop.add_done_callback(_ABANDONING.discard)
    stop.add_done_callback(lambda done: done.cancelled() or done.exception())   # retrieved: never logged
    try:
        await asyncio.shield(stop)
    except Warning as said:   # made an error by a filter (-W error): said with the caller's error
        error.add_note(str(said))
    except Exception:   # noqa: BLE001 - its own error: the caller's follows
        pass


async def _watch_task(api: AsyncApi, watch: ListWatch, events: asyncio.Queue) -> None:
    what = f"watch {watch.path}"
    while True:
        try:
            if watch.listing:
                for event in watch.on_list(await api.get(watch.path, f"list {watch.path}", **watch.list_params())):
                    events.put_nowait((watch, event))
                continue
            watch.started()
            async for line in api.lines(watch.path, what, read_timeout=watch.watch_seconds + 30,
                                        **watch.watch_params()):
                event = watch.on_line(line)
                if event is not None:
                    events.put_nowait((watch, event))
        except (KubeError, ValueError) as exc:
            delay = watch.on_error(exc)
            if delay is None:
                events.put_nowait((watch, ("FAIL", exc)))
                return
            await asyncio.sleep(delay)
        except Exception as exc:  # noqa: BLE001 - a surprise ends the follow with it, not at its timeout
            events.put_nowait((watch, ("FAIL", exc)))
            return


async def follow(api: AsyncApi, follower: Follower, timeout: float) -> AsyncIterator[tuple[str, Any]]:
    """``sdk.client.follow``'s twin: the follower's outputs until the batch is final."""
    checked_timeout(timeout, zero_ok=True)   # before any watch starts
    events: asyncio.Queue = asyncio.Queue()
    tasks = [asyncio.create_task(_watch_task(api, w, events)) for w in follower.watches()]
    deadline = time.monotonic() + timeout
    try:
        while True:
            if follower.needs_sweep():
                for out in follower.swept_with(await run(api, follower.sweep(deadline))):
                    yield out
            left = deadline - time.monotonic()
            if follower.done(out_of_time=left <= 0):
                if (error := follower.end_error()) is not None:
                    raise error
                for out in follower.leftover_groups():
                    yield out
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise follower.timeout_error(timeout)
            try:
                watch, (kind, obj) = await asyncio.wait_for(events.get(), timeout=min(left, 0.5))
            except asyncio.TimeoutError:
                continue
            if kind == "FAIL":
                raise obj
            for out in follower.feed(watch, kind, obj):
                yield out
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class AsyncClient:
    """``Client`` for asyncio: ``await client.submit(batch)`` returns an :class:`AsyncBatchHandle`.

    Use ``async with AsyncClient() as client:`` (or ``await client.close()``) to close its
    connections. Raises ``ConfigError`` when the kubeconfig is missing or unusable.
    """

    def __init__(self, kubeconfig: str | None = None, *, namespace: str | None = None,
                 api: Any = None, timeout: float = 30) -> None:
        checked_timeout(timeout)
        self.config = load_config(kubeconfig) if api is None else None
        self.namespace = ops.client_namespace(namespace, self.config)
        self.api = api if api is not None else AsyncApi(self.config, timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if hasattr(self.api, "close"):
            await self.api.close()

    async def _run(self, op: ops.Op) -> Any:
        return await run(self.api, op)

    @property
    def context(self) -> str:
        return getattr(self.config, "current_context", None) or "in-cluster"

    async def crd_installed(self) -> bool:
        return await self._run(ops.crd_installed())

    def sandbox_namespace(self, batch: Mapping) -> str | None:
        return ops.sandbox_namespace(batch)

    async def namespace_exists(self, name: str, uid: str | None = None) -> bool:
        return await self._run(ops.namespace_exists(name, uid))

    async def create(self, batch: Mapping, *, dry_run: bool = False) -> dict:
        return await self._run(ops.create(batch, self.namespace, dry_run=dry_run))

    async def submit(self, batch: Mapping, *, pool: str | None = None) -> AsyncBatchHandle:
        return AsyncBatchHandle(self, await self._run(ops.submit_on_pool(batch, pool, self.namespace) if pool is not None else
                                                      ops.submit(batch, self.namespace)))

    async def get(self, name: str, namespace: str | None = None) -> dict:
        return await self._run(ops.get(name, ops.namespace_of(namespace, self.namespace)))

    async def handle(self, name: str, namespace: str | None = None) -> AsyncBatchHandle:
        return AsyncBatchHandle(self, await self.get(name, namespace))

    async def list(self, namespace: str | None = None, *, all_namespaces: bool = False) -> list[dict]:
        return await self._run(ops.list_(ops.namespace_of(namespace, self.namespace), all_namespaces))

    async def results_document(self, batch: Mapping) -> dict:
        return await self._run(result_ops.results_document(batch))

    async def delete(self, batch: Mapping, *, wait: bool = True, timeout: float = 300, interval: float = 1.0) -> None:
        """Delete; with ``wait`` (awaiting, never blocking the loop) until the sandbox is gone."""
        await self._run(ops.delete(batch, wait=wait, timeout=timeout, interval=interval))

    async def stop(self, batch: Mapping) -> dict:
        return await self._run(ops.stop(batch))

    async def open_sessions(self, pool: str, episodes: int, *, verifier: Mapping, name: str = "session-",
                            **options: Any) -> AsyncSessions:
        """``Client.open_sessions``, awaited: ``async with await client.open_sessions(...) as s:``."""
        batch = sessions.build_sessions(pool, episodes, verifier=verifier, name=name,
                                        namespace=ops.namespace_of(options.pop("namespace", None), self.namespace),
                                        **options)
        return AsyncSessions(await self.submit(batch))

    # --- warm pools (RolloutPool): Client's, awaited --------------------------------------------
    async def create_pool(self, name: str, size: int, *, task_files: Mapping[str, str],
                          namespace: str | None = None, dry_run: bool = False, **options: Any) -> dict:
        pool = build_pool(name, size, task_files=task_files, namespace=ops.namespace_of(namespace, self.namespace),
                          **pool_options(options))
        return await self._run(ops.create_pool(pool, self.namespace, dry_run=dry_run))

    async def get_pool(self, name: str, namespace: str | None = None) -> dict:
        return await self._run(ops.get_pool(name, ops.namespace_of(namespace, self.namespace)))

    async def list_pools(self, namespace: str | None = None, *, all_namespaces: bool = False) -> list[dict]:
        return await self._run(ops.list_pools(ops.namespace_of(namespace, self.namespace), all_namespaces))

    async def scale_pool(self, name: str, size: int, namespace: str | None = None) -> dict:
        return await self._run(ops.scale_pool(name, ops.namespace_of(namespace, self.namespace), size))

    async def wait_pool(self, name: str, namespace: str | None = None, *, timeout: float = 300) -> dict:
        return await self._run(ops.wait_pool(name, ops.namespace_of(namespace, self.namespace), timeout=timeout))

    async def delete_pool(self, name: str, namespace: str | None = None, *, wait: bool = True,
                          timeout: float = 300, on_waiting: Callable[[str], None] | None = None) -> None:
        await self._run(ops.delete_pool(name, ops.namespace_of(namespace, self.namespace), wait=wait, timeout=timeout,
                                        on_waiting=on_waiting))

    async def retained_document(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> dict:
        return await self._run(retained.retained_document(name, ops.namespace_of(namespace, self.namespace), uid))

    async def retained_results(self, name: str, namespace: str | None = None, *,
                               uid: str | None = None) -> list[Row]:
        namespace = ops.namespace_of(namespace, self.namespace)
        document = await self.retained_document(name, namespace, uid=uid)
        return result_ops.rows(document, retained.retained_batch(document, name, namespace))

    async def retained_uids(self, name: str, namespace: str | None = None) -> list[str]:
        return await self._run(retained.retained_uids(name, ops.namespace_of(namespace, self.namespace)))

    async def delete_retained(self, name: str, namespace: str | None = None, *,
                              uid: str | None = None) -> list[str]:
        return await self._run(retained.delete_retained(name, ops.namespace_of(namespace, self.namespace), uid))


class AsyncBatchHandle:
    """``BatchHandle`` for asyncio: ``await wait()``, ``await results()``, ``async for`` over
    ``stream()`` and ``groups()``, ``await delete()``."""

    def __init__(self, client: AsyncClient, obj: dict) -> None:
        self.client = client
        self.obj = obj

    name = property(lambda self: self.obj["metadata"]["name"])
    namespace = property(lambda self: self.obj["metadata"]["namespace"])
    uid = property(lambda self: self.obj["metadata"]["uid"])
    status = property(lambda self: self.obj.get("status") or {})

    async def refresh(self) -> dict:
        self.obj = ops.not_a_namesake(self.obj, await self.client.get(self.name, self.namespace))
        return self.status

    async def _follow(self, follower: Follower, timeout: float) -> AsyncIterator[tuple[str, Any]]:
        async for kind, value in follow(self.client.api, follower, timeout):
            if kind == "status":
                self.obj = dict(self.obj, status=value)
            yield kind, value

    async def wait(self, timeout: float = 3600, on_progress: Callable[[dict], None] | None = None,
                   settle: float = 10.0) -> dict:
        follower = Follower(self.obj, rows=False, settle_seconds=settle)
        if on_progress is not None:
            on_progress(copy.deepcopy(self.status))
        async for _, status in self._follow(follower, timeout):
            if on_progress is not None:
                on_progress(copy.deepcopy(status))
        return self.status

    async def stream(self, timeout: float = 3600, *, watch_seconds: int | None = None) -> AsyncIterator[Row]:
        follower = Follower(self.obj, watch_seconds=watch_seconds)
        async for kind, value in self._follow(follower, timeout):
            if kind == "row":
                yield value

    async def groups(self, timeout: float = 3600, *, watch_seconds: int | None = None) -> AsyncIterator[Group]:
        follower = Follower(self.obj, groups=True, watch_seconds=watch_seconds)
        async for kind, value in self._follow(follower, timeout):
            if kind == "group":
                yield value

    async def document(self) -> dict:
        return await self.client.results_document(self.obj)

    async def results(self) -> list[Row]:
        return result_ops.rows(await self.document(), self.obj)

    async def stop(self, wait: bool = False, timeout: float = 3600) -> dict:
        checked_timeout(timeout, zero_ok=True)   # before the stop, not after it
        self.obj = await self.client.stop(self.obj)
        return await self.wait(timeout=timeout) if wait else self.status

    async def delete(self, wait: bool = True, timeout: float = 300) -> None:
        await self.client.delete(self.obj, wait=wait, timeout=timeout)


class AsyncSessions(session_commands.AsyncEndsOnExit):
    """``Sessions`` for asyncio: ``await session(i)``, ``await wait()``, ``async with``."""

    def __init__(self, handle: AsyncBatchHandle) -> None:
        self.handle = handle
        self._core = session_commands.SessionsCore(handle.obj)

    name = property(lambda self: self.handle.name)

    async def _end_left_open(self) -> None:
        await self.end_all()

    async def session(self, index: int, timeout: float = sessions.SESSION_TIMEOUT) -> AsyncSession:
        client = self.handle.client
        return AsyncSession(client, await client._run(self._core.session(self.handle.obj, index, timeout)))

    async def end_all(self) -> None:
        await self.handle.client._run(self._core.end_all(self.handle.obj))

    async def wait(self, timeout: float = 3600) -> list[Row]:
        await self.handle.wait(timeout=timeout)
        return self._core.with_stats(await self.handle.results())


class AsyncSession(session_commands.SessionView, session_commands.AsyncEndsOnExit):
    """``Session`` for asyncio: ``await run(...)``, ``write_file``, ``read_file``, ``end``."""

    def __init__(self, client: AsyncClient, core: session_commands.SessionCore) -> None:
        self._client, self._core = client, core

    async def _end_left_open(self) -> None:
        await self.end()

    async def run(self, command: str | Sequence[str], *, on_output: sessions.OnOutput | None = None,
                  timeout: float | None = None, stdin: bytes = b"",
                  limit_bytes: int = sessions.RUN_LIMIT_BYTES) -> sessions.CommandResult:
        """``Session.run``'s twin: past ``timeout`` the command is stopped in the sandbox, then
        TimedOut; cancelled (``asyncio.wait_for``, a task's cancel), it is stopped before the
        cancellation goes on (cancelled again meanwhile: at once, the stop still sent); a
        background process holding its output (``server &``) keeps it until then, so redirect
        that output: ``nohup server > /dev/null 2>&1 &``."""
        return await self._client._run(self._core.run(command, stdin=stdin, timeout=timeout, on_output=on_output,
                                                      limit_bytes=limit_bytes))

    async def write_file(self, path: str, data: bytes, *, timeout: float = sessions.FILE_TIMEOUT) -> None:
        await self._client._run(self._core.write_file(path, data, timeout=timeout))

    async def read_file(self, path: str, *, max_bytes: int = sessions.MAX_FILE_BYTES,
                        timeout: float = sessions.FILE_TIMEOUT) -> bytes:
        return await self._client._run(self._core.read_file(path, max_bytes=max_bytes, timeout=timeout))

    async def end(self) -> None:
        await self._client._run(self._core.end())
