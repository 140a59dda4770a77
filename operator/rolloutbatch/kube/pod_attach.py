"""Write to a running container's stdin through the API server (pods/attach), on the event loop.

A warm pool's pod is handed its episode this way (core.pool_delivery): its launcher holds the
container's stdin (``stdin: true``, ``stdinOnce: true``) and reads one length-prefixed script
from it. Unlike exec, attach starts no process in the container: the runtime copies the bytes to
the stdin the container already has, where an exec costs a `runc exec` (or a gVisor one) and a
shell. That process was what a claim cost (docs/design.md §5.17).

The protocol is exec's (``kube.pod_exec``: the same channels, v5 then v4, the same refusals) on
``/attach?container=..&stdin=true&stdout=true``. An attach has no exit status: it lasts until the
container ends or the client goes. So the launcher says on its stdout that it has read the whole
script, and :func:`deliver` returns when that line arrives (after a ping the container answers,
so that its stdout is known to reach the attach); the connection is then closed, which
closes the container's stdin (``stdinOnce``): the runtime closes it when the first attach that
used it ends, so a pod is handed at most one script, and a second attach (a repeat after an
operator's restart) writes to nothing.

The agent cannot forge the line: it is written before anything the script runs. RBAC: ``get``
and ``create`` on pods/attach, as exec needs both on pods/exec.
"""

from __future__ import annotations

import asyncio
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
    ``timeout`` seconds in all. ``hello`` = (ping, pong): first send ``ping`` until ``pong``
    comes back, so the container's stdout is known to reach this attach before ``data`` goes
    (containerd copies an attach's stdin before it adds the attach to the container's stdout: a
    line printed at once can be lost). Raises the mapped ``KubeError`` (NotFound, Forbidden,
    BadRequest: a container without stdin), ``Unconfirmed`` (a ``TimedOut``: every byte was sent,
    the container did not say it read them), ``TimedOut`` before that, ``Unavailable`` when the
    connection fails or ends first (the container ended)."""
    what = f"attach to pod {namespace}/{pod} container {container}"
    sent = [False]
    async with client.connection(what) as connect:
        try:
            await asyncio.wait_for(_exchange(connect, namespace, pod, container, data, hello, ack, what, sent),
                                   timeout)
        except asyncio.TimeoutError:
            if sent[0]:
                raise Unconfirmed(f"{what}: the container did not confirm its input within {timeout:g}s "
                                  "(all of it was sent)") from None
            raise TimedOut(f"{what}: the container did not confirm its input within {timeout:g}s") from None


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


async def _exchange(connect: Connect, namespace: str, pod: str, container: str, data: bytes,
                    hello: tuple[bytes, bytes] | None, ack: bytes, what: str, sent: list[bool]) -> None:
    ws, protocol = await connect(attach_path(namespace, pod), attach_query(container))
    stdout = _Stdout(what, (hello[1], ack) if hello is not None else (ack,))
    reader = asyncio.ensure_future(stdout.read(ws))
    try:
        if hello is not None:
            ping, pong = hello
            await ws.send_bytes(frame(STDIN, ping))
            sent_pings = 1
            while not await stdout.wait_for(pong, PING_WAITS[min(sent_pings, len(PING_WAITS)) - 1]):
                await ws.send_bytes(frame(STDIN, ping))
                sent_pings += 1
        await send_frames(ws, stdin_frames(data, protocol))
        sent[0] = True
        await stdout.wait_for(ack, None)
    except (aiohttp.ClientError, OSError) as exc:
        raise Unavailable(f"{what}: {exc!r}") from exc
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    # no close handshake: the launcher has read everything, and the session's close aborts the
    # connection without waiting on a server that may no longer answer
