"""Write to a running container's stdin through the API server (pods/attach), on the event loop.

A warm pool's pod is handed its episode this way (core.pool_delivery): its launcher holds the
container's stdin (``stdin: true``) and reads one length-prefixed script from it. Unlike exec,
attach starts no process in the container: the runtime copies the bytes to the stdin the
container already has, where an exec costs a `runc exec` (or a gVisor one) and a shell. That
process was what a claim cost (docs/design.md §5.17).

The protocol is exec's (``kube.pod_exec``: the same channels, v5 then v4, the same refusals) on
``/attach?container=..&stdin=true&stdout=true``. An attach has no exit status: it lasts until the
container ends or the client goes. So the launcher says on its stdout that it has read the whole
script, and :meth:`AttachChannel.deliver` returns when that line arrives; the connection is then
closed. The launcher stops reading its stdin once it has the script, so a second attach (a repeat
after an operator's restart) writes to nothing.

:func:`open_channel` connects and pings until the container answers, so that its stdout is known to
reach the attach, and keeps the connection open: a warm pod's channel is opened while it waits in
its pool (service.warm_channels), and its claim then costs only the script's bytes and the answer
(opening one took most of a claim's time when 20 were opened at a claim). :func:`deliver` opens and
delivers at once. Closing a channel that delivered nothing leaves the container's stdin open (the
pod has no ``stdinOnce``): the pod can still be handed its episode through another.

The agent cannot forge the line: it is written before anything the script runs. RBAC: ``get``
and ``create`` on pods/attach, as exec needs both on pods/exec.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import quote

import aiohttp

from rolloutbatch.kube.errors import KubeError, TimedOut, Unavailable, Unconfirmed
from rolloutbatch.kube.pod_exec import STDIN, STDOUT, Connect, PodExec, frame, send_frames, split_frame, stdin_frames

# Seconds before each ping is sent again while no answer came, the last repeated. The first
# answer is lost when the runtime's race (below) hits: a short first wait keeps that from costing
# the claim a whole interval; a ping is a line the launcher answers at once.
PING_WAITS = (0.02, 0.05, 0.1, 0.2)


def attach_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/attach"


def attach_query(container: str) -> list[tuple[str, str]]:
    return [("container", container), ("stdin", "true"), ("stdout", "true")]


async def deliver(client: PodExec, namespace: str, pod: str, container: str, data: bytes, *,
                  ack: bytes, timeout: float, hello: tuple[bytes, bytes] | None = None) -> None:
    """Write ``data`` to the container's stdin and wait for ``ack`` on its stdout, at most
    ``timeout`` seconds in all: :func:`open_channel`, then :meth:`AttachChannel.deliver`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    channel = await open_channel(client, namespace, pod, container, ack=ack, timeout=timeout, hello=hello)
    await channel.deliver(data, timeout=max(0.0, deadline - loop.time()))


async def open_channel(client: PodExec, namespace: str, pod: str, container: str, *, ack: bytes, timeout: float,
                       hello: tuple[bytes, bytes] | None = None, keepalive: float | None = None) -> AttachChannel:
    """An attach to the container, its stdout read from now on, that :meth:`AttachChannel.deliver`
    writes to once. ``hello`` = (ping, pong): first send ``ping`` until ``pong`` comes back, so the
    container's stdout is known to reach this attach before anything is delivered (containerd
    copies an attach's stdin before it adds the attach to the container's stdout: a line printed at
    once can be lost). Raises the mapped ``KubeError`` (NotFound, Forbidden, BadRequest: a container
    without stdin), ``TimedOut`` past ``timeout``, ``Unavailable`` when the connection fails or
    ends first (the container ended). ``keepalive``: seconds between the client's WebSocket pings
    while the channel waits (a connection gone silent then ends it, as a closed one does)."""
    what = f"attach to pod {namespace}/{pod} container {container}"
    stack = contextlib.AsyncExitStack()
    try:
        connect = await stack.enter_async_context(client.connection(what, heartbeat=keepalive))
        try:
            return await asyncio.wait_for(_open(connect, stack, namespace, pod, container, hello, ack, what), timeout)
        except asyncio.TimeoutError:
            raise TimedOut(f"{what}: the container did not answer within {timeout:g}s") from None
    except BaseException:
        await stack.aclose()
        raise


class AttachChannel:
    """One open attach (:func:`open_channel`): delivers one input, then is closed."""

    def __init__(self, stack: contextlib.AsyncExitStack, ws: aiohttp.ClientWebSocketResponse, protocol: str,
                 stdout: _Stdout, reader: asyncio.Future, ack: bytes, what: str) -> None:
        self._stack, self._ws, self._protocol = stack, ws, protocol
        self._stdout, self._reader, self._ack, self.what = stdout, reader, ack, what
        self._used = False

    @property
    def alive(self) -> bool:
        """Not used yet, and its connection has not ended (a closed stream, a failed connection)."""
        return not self._used and self._stdout.ended is None and not self._reader.done()

    async def deliver(self, data: bytes, *, timeout: float) -> None:
        """Write ``data`` and wait for the ack, at most ``timeout`` seconds; the channel is closed
        after. Raises ``Unavailable`` (the connection ended, or a used channel: nothing was sent,
        or not all of it), ``Unconfirmed`` (a ``TimedOut``: every byte was sent, and the container
        did not say it read them in time, or its stream ended first), ``TimedOut`` before that."""
        sent = [False]
        try:
            if not self.alive:
                raise Unavailable(f"{self.what}: the channel is closed or used")
            self._used = True
            await asyncio.wait_for(self._send(data, sent), timeout)
        except asyncio.TimeoutError:
            if sent[0]:
                raise Unconfirmed(f"{self.what}: the container did not confirm its input within {timeout:g}s "
                                  "(all of it was sent)") from None
            raise TimedOut(f"{self.what}: the container did not confirm its input within {timeout:g}s") from None
        finally:
            await self.close()

    async def _send(self, data: bytes, sent: list[bool]) -> None:
        try:
            # Not closed: the runtime ends an attach whose stdin ended (a container without
            # stdinOnce), before the container's answer could come back on it.
            await send_frames(self._ws, stdin_frames(data, self._protocol, close=False))
        except (aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"{self.what}: {exc!r}") from exc
        sent[0] = True
        try:
            await self._stdout.wait_for(self._ack, None)
        except (KubeError, aiohttp.ClientError, OSError) as exc:
            # Every byte went: the container may run what it was handed (it ends, and its stream
            # with it, as soon as a short episode does; its line may be lost), so not Unavailable,
            # which says it never got it.
            raise Unconfirmed(f"{self.what}: the stream ended before the container confirmed its input "
                              f"(all of it was sent): {exc}") from exc

    async def close(self) -> None:
        """Stop reading and drop the connection (no close handshake: the launcher has read
        everything, or nothing is owed; the session's close aborts it without waiting on a server
        that may no longer answer)."""
        self._used = True
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        await self._stack.aclose()


class _Stdout:
    """The container's stdout as it comes, read by one task, looking for ``lines`` in each frame
    as it arrives (with the end of the one before): nothing is kept beyond that, so however much
    the container prints after a line (an agent flooding its stdout once it runs), the line was
    seen when it came."""

    def __init__(self, what: str, lines: tuple[bytes, ...]) -> None:
        self.what = what
        self.lines = lines
        self.found: set[bytes] = set()
        self._tail = b""
        self._keep = max(len(line) for line in lines) - 1
        self.ended: KubeError | None = None
        self.changed = asyncio.Event()

    def feed(self, data: bytes) -> None:
        window = self._tail + data
        self.found.update(line for line in self.lines if line in window)
        self._tail = window[-self._keep:] if self._keep else b""

    async def read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            while True:
                message = await ws.receive()
                if message.type == aiohttp.WSMsgType.BINARY:
                    parts = split_frame(message.data)
                    if parts is not None and parts[0] == STDOUT:
                        self.feed(parts[1])
                elif message.type == aiohttp.WSMsgType.ERROR:
                    self.ended = Unavailable(f"{self.what}: the connection failed: {ws.exception()!r}")
                elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                                      aiohttp.WSMsgType.CLOSED):
                    self.ended = Unavailable(f"{self.what}: the stream ended before the container confirmed its "
                                             "input (it ended, or its stdin was closed by an earlier attach)")
                self.changed.set()
                if self.ended is not None or self.found >= set(self.lines[-1:]):
                    return   # ended, or the last line came: what follows is not ours to read
        except (aiohttp.ClientError, OSError) as exc:
            self.ended = Unavailable(f"{self.what}: {exc!r}")
            self.changed.set()

    async def wait_for(self, line: bytes, within: float | None) -> bool:
        """Whether ``line`` came (False: not within ``within`` seconds); raises once the stream ended."""
        while line not in self.found:
            if self.ended is not None:
                raise self.ended
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), within)
            except asyncio.TimeoutError:
                return False
        return True


async def _open(connect: Connect, stack: contextlib.AsyncExitStack, namespace: str, pod: str, container: str,
                hello: tuple[bytes, bytes] | None, ack: bytes, what: str) -> AttachChannel:
    ws, protocol = await connect(attach_path(namespace, pod), attach_query(container))
    stdout = _Stdout(what, (hello[1], ack) if hello is not None else (ack,))
    reader = asyncio.ensure_future(stdout.read(ws))
    channel = AttachChannel(stack, ws, protocol, stdout, reader, ack, what)
    try:
        if hello is not None:
            ping, pong = hello
            await ws.send_bytes(frame(STDIN, ping))
            sent_pings = 1
            while not await stdout.wait_for(pong, PING_WAITS[min(sent_pings, len(PING_WAITS)) - 1]):
                await ws.send_bytes(frame(STDIN, ping))
                sent_pings += 1
    except (aiohttp.ClientError, OSError) as exc:
        reader.cancel()
        raise Unavailable(f"{what}: {exc!r}") from exc
    except BaseException:
        reader.cancel()
        raise
    return channel
