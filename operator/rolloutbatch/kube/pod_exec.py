"""Run a command in a pod's container through the API server (pods/exec), on the event loop.

A warm pool's pod is given its episode by a command run in it (the contract's "claim"), and is
prepared the same way; so exec is a call the operator makes per claim, on its event loop, with
the same credentials as its other asynchronous calls (``kube.async_session``).

The protocol. ``GET /api/v1/namespaces/<ns>/pods/<pod>/exec?command=..&container=..`` upgraded
to a WebSocket. We offer the subprotocols ``v5.channel.k8s.io`` then ``v4.channel.k8s.io``; the
server picks one. Every binary message is one frame: its first byte the channel, the rest the
data::

    0 stdin (ours)   1 stdout   2 stderr   3 status (one JSON metav1.Status, at the end)
    255 close (v5 only): the data's one byte names the channel closed, ours is stdin

The status is ``Success`` (exit 0), or ``Failure`` with reason ``NonZeroExitCode`` and the code in
``details.causes[reason=ExitCode].message``; any other ``Failure`` means the command did not run
to an exit code (not found, the container gone): :class:`ExecResult` then has ``exit_code``
None and the status says why. A connection that ends without a status is ``Unavailable``.

stdin: sent concurrently with reading, never before it: a command that writes more than the
socket buffers hold before it has read its input would otherwise block on us while we block on
it. With v5 stdin is closed after the last byte, so the command sees end of file. v4 has no way
to close it: a command there must know how much to read (``head -c N``), or it waits for input
until the timeout. An empty ``stdin`` asks for no stdin at all (the command's reads see end of
file at once, on both versions). The exit status comes only once the runtime copied the whole
stdin into the process (measured on the devcluster's containerd: tests/devcluster/test_pod_exec.py):
a command that exits without reading all of it (``head -c 1`` given 1 MB) leaves that copy
blocked on a full pipe, and no status comes before the timeout, whatever the client does. A
caller gives stdin only to a command that reads all of it, or runs it behind one that does
(sdk.sessions: ``core.sessions.drained_command``).

Streaming: ``on_output(stream, data)`` (stream ``"stdout"`` or ``"stderr"``) is called with each
frame's data as it arrives, all of it (the limit below bounds only what the result keeps), on
the event loop: a trainer watching a command's output (sdk.sessions) sees it before the exit.

Bounds, since a command's output is hostile input and a command can hang: stdout and stderr keep
at most ``limit_bytes`` each (the rest is read and dropped, to get to the status), and the whole
call, connecting included, is bounded by ``timeout``: past it, :class:`TimedOut`. The connection
is then aborted, not closed politely: a close handshake with a server that stopped answering
would wait again. Closing the stream does not kill the command: the container runtime leaves
an exec'd process running when its client goes away, so a caller whose command timed out must
assume it still runs (and evict the pod if that matters).

Errors on the upgrade are the API's answers, mapped by ``kube.errors.classify`` with the API's
own message (aiohttp does not keep a refused upgrade's body, so a client middleware reads it
first). As the devcluster (1.37) gives them: 404 no such pod; 400 an unscheduled pod, a
container not in the pod, no container named in a pod of several; 500 ``container not found``
for a pod that has ended (so ``Unavailable``, though asking again cannot help: check the pod's
phase first). 403 from RBAC: the upgrade is a GET, authorized as ``get`` on pods/exec, and the
API server then also asks for ``create``; a Role needs both verbs, and the second refusal's
message names no verb (``pods "x" is forbidden: ``).

Cost, measured on the devcluster: one exec of ``true`` takes a median 40-55 ms end to end (a
GET of the pod takes 3 ms: the time is the kubelet's and the runtime's), 20 concurrent ones
0.45 s in all.

Credentials that cannot be carried by an aiohttp session (exec plugins, auth providers) raise
``ConfigError`` at once: exec has no synchronous fallback, unlike log reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
import pykube
import pykube.exceptions

from rolloutbatch.core.sessions import unspellable
from rolloutbatch.kube import async_session, transport
from rolloutbatch.kube.errors import ConfigError, KubeError, TimedOut, Unavailable, classify

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
V5 = PROTOCOLS[0]
STDIN, STDOUT, STDERR, STATUS, CLOSE = 0, 1, 2, 3, 255
LIMIT_BYTES = 64 * 1024
STDIN_CHUNK = 32 * 1024   # one frame of stdin; the server copies each frame to the process
MAX_STATUS = 64 * 1024     # a status bigger than this is not the API server's
USER_AGENT = "rolloutbatch-operator"
STREAMS = {1: "stdout", 2: "stderr"}
OnOutput = Callable[[str, bytes], None]
Connect = Callable[[str, list], Awaitable[tuple[aiohttp.ClientWebSocketResponse, str]]]
# Client middlewares came with aiohttp 3.12 (the operator's kopf needs 3.14); an older aiohttp
# only loses the API's message from a refused upgrade, not the mapping of its status.
_MIDDLEWARES = "middlewares" in inspect.signature(aiohttp.ClientSession).parameters


@dataclass(frozen=True)
class ExecResult:
    """What a command run through pods/exec left: its exit code (None when it did not run to
    one: ``status`` says why), its output (each cut at the caller's limit) and the final status."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    status: dict = field(default_factory=dict)
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    protocol: str = V5

    @property
    def message(self) -> str:
        """The status's message ("" on success): why the command failed or did not run."""
        return str(self.status.get("message") or "")


# -- the frames: pure, tested without a cluster -------------------------------------------------
def frame(channel: int, data: bytes = b"") -> bytes:
    """One message of the channel protocol."""
    return bytes((channel,)) + data


def stdin_frames(data: bytes, protocol: str, chunk: int = STDIN_CHUNK, close: bool = True) -> list[bytes]:
    """The messages that deliver ``data`` on stdin and (v5, ``close``) then close it."""
    frames = [frame(STDIN, data[at:at + chunk]) for at in range(0, len(data), chunk)]
    if protocol == V5 and close:
        frames.append(frame(CLOSE, bytes((STDIN,))))
    return frames


def split_frame(message: bytes) -> tuple[int, bytes] | None:
    """(channel, data) of one message; None for an empty one (carries nothing)."""
    if not message:
        return None
    return message[0], bytes(message[1:])


def exit_code(status: dict) -> int | None:
    """The command's exit code from its final Status: 0 on Success, the ExitCode cause of a
    NonZeroExitCode failure; None when the command did not run to an exit code."""
    if status.get("status") == "Success":
        return 0
    if status.get("status") != "Failure" or status.get("reason") != "NonZeroExitCode":
        return None
    for cause in (status.get("details") or {}).get("causes") or []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(str(cause.get("message")).strip())
            except ValueError:
                return None
    return None


def parse_status(data: bytes) -> dict:
    """The status channel's JSON; a body that is not a JSON object becomes a Failure status
    quoting it (the stream ended, the code is unknown)."""
    try:
        body = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"status": "Failure", "message": "the status channel held no JSON object: "
                                            + data[:2000].decode("utf-8", "replace")}


class _Output:
    """stdout and stderr as they come, each kept to ``limit`` bytes; and the status."""

    def __init__(self, limit: int, on_output: OnOutput | None = None) -> None:
        self.limit = limit
        self.on_output = on_output
        self.chunks: dict[int, list[bytes]] = {STDOUT: [], STDERR: []}
        self.sizes = {STDOUT: 0, STDERR: 0}
        self.status_data: bytes | None = None

    def feed(self, message: bytes) -> None:
        parts = split_frame(message)
        if parts is None:
            return
        channel, data = parts
        if channel in self.chunks:
            room = self.limit - min(self.sizes[channel], self.limit)
            if room > 0:
                self.chunks[channel].append(data[:room])
            self.sizes[channel] += len(data)
            if self.on_output is not None and data:
                self.on_output(STREAMS[channel], data)
        elif channel == STATUS:
            # the status can come in more than one message; the first ones are kept, bounded
            self.status_data = ((self.status_data or b"") + data)[:MAX_STATUS]
        # other channels (a server's close frame, a resize channel) carry nothing for us

    def result(self, protocol: str) -> ExecResult:
        status = parse_status(self.status_data or b"")
        return ExecResult(exit_code=exit_code(status), stdout=b"".join(self.chunks[STDOUT]),
                          stderr=b"".join(self.chunks[STDERR]), status=status,
                          stdout_truncated=self.sizes[STDOUT] > self.limit,
                          stderr_truncated=self.sizes[STDERR] > self.limit, protocol=protocol)


def exec_query(command: Sequence[str], container: str | None, stdin: bool) -> list[tuple[str, str]]:
    """The exec request's query: each word of the command its own ``command`` parameter; a word
    no exec can carry is a ValueError, never sent changed (core.sessions.unspellable)."""
    for word in command:
        if (why := unspellable(word)) is not None:
            raise ValueError(f"a command cannot hold {why}: {word!r}"[:300])
    query = [("command", word) for word in command]
    if container:
        query.append(("container", container))
    query += [("stdout", "true"), ("stderr", "true")]
    if stdin:
        query.append(("stdin", "true"))
    return query


def exec_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"


# -- the call -------------------------------------------------------------------------------
class PodExec:
    """pods/exec with one kubeconfig's credentials. The TLS context is built once; each call
    opens its own connection (an upgraded connection is never reused), so an instance can be
    shared by any number of concurrent calls, on any event loop."""

    def __init__(self, config: pykube.KubeConfig, *, user_agent: str = USER_AGENT) -> None:
        self.config = config
        self.user_agent = user_agent
        self.base = config.cluster["server"].rstrip("/")
        self._tls: ssl.SSLContext | bool | None = None

    def _check(self, what: str) -> None:
        if not async_session.supported(self.config):
            raise ConfigError(f"{what}: exec is unavailable with this kubeconfig's credentials: it runs on the "
                              "event loop, which carries client certificates and bearer tokens over https, not "
                              "exec plugins, auth providers or plain http")

    async def run(self, namespace: str, pod: str, container: str | None, command: Sequence[str], *,
                  stdin: bytes = b"", timeout: float, limit_bytes: int = LIMIT_BYTES,
                  on_output: OnOutput | None = None) -> ExecResult:
        """Run ``command`` (no shell: a list of words) in the pod's container; at most ``timeout``
        seconds in all; ``on_output`` hears the output as it comes. Raises the mapped ``KubeError``
        (NotFound, Forbidden, BadRequest, ...), ``TimedOut`` past the timeout, ``Unavailable`` when
        the connection fails."""
        what = f"exec in pod {namespace}/{pod}" + (f" container {container}" if container else "")
        if not command:
            raise ValueError("exec needs a command")
        async with self.connection(what) as connect:
            try:
                return await asyncio.wait_for(
                    self._exchange(connect, namespace, pod, container, command, stdin,
                                   _Output(limit_bytes, on_output), what), timeout)
            except asyncio.TimeoutError:
                raise TimedOut(f"{what}: no exit status within {timeout:g}s (the command may still be running "
                               "in the container)") from None

    @contextlib.asynccontextmanager
    async def connection(self, what: str, heartbeat: float | None = None) -> AsyncIterator[Connect]:
        """One call's session: yields ``connect(path, params)`` -> (the upgraded WebSocket, its
        protocol), refusals mapped to ``KubeError``s. Closing it aborts what is still open (a
        timed-out call's connection) without a close handshake. ``heartbeat``: aiohttp's pings on
        the connection, every that many seconds (an unanswered one closes it)."""
        refused: dict[str, Any] = {}
        try:
            self._check(what)
            if self._tls is None:
                self._tls = async_session.ssl_context(self.config)
            headers = transport.auth_headers(self.config)
            session = async_session.open_session(self.config, pool=1, timeout=None, user_agent=self.user_agent,
                                                 tls=self._tls,
                                                 middlewares=(_keep_refusal(refused),) if _MIDDLEWARES else ())
        except (pykube.exceptions.PyKubeError, OSError, ssl.SSLError, KeyError, ValueError) as exc:
            # pykube reads the files a kubeconfig names when its user is first read: one gone since
            raise ConfigError(f"{what}: the kubeconfig's credentials are unusable: {exc}") from None

        async def connect(path: str, params: list[tuple[str, str]]) -> tuple[aiohttp.ClientWebSocketResponse, str]:
            try:
                ws = await session.ws_connect(self.base + path, protocols=PROTOCOLS, params=params, headers=headers,
                                              heartbeat=heartbeat)
            except aiohttp.WSServerHandshakeError as exc:
                raise _refusal(exc, refused.get("body", b""), what) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise Unavailable(f"{what}: {exc!r}") from exc
            protocol = ws.protocol or ""
            if protocol not in PROTOCOLS:
                raise KubeError(f"{what}: the API server offers none of the channel protocols "
                                f"{', '.join(PROTOCOLS)} (answered {protocol or 'none'})")
            return ws, protocol

        try:
            yield connect
        finally:
            await session.close()

    async def _exchange(self, connect: Connect, namespace: str, pod: str, container: str | None,
                        command: Sequence[str], stdin: bytes, output: _Output, what: str) -> ExecResult:
        ws, protocol = await connect(exec_path(namespace, pod), exec_query(command, container, bool(stdin)))
        sender = asyncio.ensure_future(send_frames(ws, stdin_frames(stdin, protocol))) if stdin else None
        try:
            while True:
                message = await ws.receive()
                if message.type == aiohttp.WSMsgType.BINARY:
                    output.feed(message.data)
                elif message.type == aiohttp.WSMsgType.ERROR:
                    raise Unavailable(f"{what}: the connection failed: {ws.exception()!r}")
                elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                                      aiohttp.WSMsgType.CLOSED):
                    break   # the server is done
                # text comes only with the base64 protocols, which we do not offer: ignored
        except (aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"{what}: {exc!r}") from exc
        finally:
            if sender is not None:
                # Done, or the command ended without reading all its input. A failed send shows
                # in the reads as well (the same connection): its error is only collected here.
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
        if output.status_data is None:
            raise Unavailable(f"{what}: the connection ended before the command's exit status")
        return output.result(protocol)


async def send_frames(ws: aiohttp.ClientWebSocketResponse, frames: list[bytes]) -> None:
    for message in frames:
        await ws.send_bytes(message)


def _keep_refusal(store: dict[str, Any]) -> Any:
    """A client middleware keeping the body of an answer that is not the upgrade (aiohttp raises
    on it without reading it), so the error can quote the API's message."""
    async def middleware(request: aiohttp.ClientRequest, handler: Any) -> aiohttp.ClientResponse:
        response = await handler(request)
        if response.status != 101:
            body = b""
            try:
                while len(body) < 4000:   # one read() returns what has arrived so far, maybe a part
                    chunk = await response.content.read(4000 - len(body))
                    if not chunk:
                        break
                    body += chunk
            except (aiohttp.ClientError, OSError):
                pass
            store["body"] = body
        return response
    return middleware


def _refusal(exc: aiohttp.WSServerHandshakeError, body: bytes, what: str) -> KubeError:
    """The KubeError for an exec the server did not upgrade: by its status, with its message."""
    text = body.decode("utf-8", "replace")
    message = async_session.api_message(text) if text else f"HTTP {exc.status}: {exc.message}"
    return classify(exc.status, message, async_session.api_reason(text), what)
