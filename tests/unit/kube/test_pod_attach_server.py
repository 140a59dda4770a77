"""kube.pod_attach against a fake API server in this process (as test_pod_exec_server.py does for
exec): the bytes reach the container's stdin, the call returns once the container's line comes
(even split across frames, after other output), and a container that ends first, a server that
hangs or refuses are errors. tests/e2e/test_pools.py hands real pods their episodes this way."""
from __future__ import annotations

import asyncio

import pytest
from aiohttp import WSMsgType, web

from rolloutbatch.kube import pod_attach
from rolloutbatch.kube import pod_exec as pe
from rolloutbatch.kube.errors import Forbidden, TimedOut, Unavailable, Unconfirmed
from tests.unit.kube.test_pod_exec_server import pki  # noqa: F401 (the fixture)
from tests.unit.kube.test_pod_exec_server import serving as exec_serving

ACK = b"rolloutbatch: episode received"
HELLO = (b"ping\n", b"pong")


class FakeAttach:
    """pods/attach of the pod named after a behaviour: ack (reads a length line and that many
    bytes, then says ACK in two frames after other output), deaf (as ack, but loses the first two
    pings' answers, as containerd can before the attach reaches the container's stdout), flood
    (ACK, then 200 KiB at once in the same burst: an agent printing as soon as it runs), silent
    (reads everything, never says ACK), gone (reads everything, then its stream ends), ended (closes
    without a word), hang, forbidden."""

    def __init__(self) -> None:
        self.requests: list[web.Request] = []
        self.stdin = b""
        self.pings = 0
        self.closed_stdin = False

    async def attach(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request)
        pod = request.match_info["pod"]
        if pod == "forbidden":
            return web.json_response({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                                      "message": 'pods "forbidden" is forbidden: cannot create resource '
                                                 '"pods/attach"'}, status=403)
        ws = web.WebSocketResponse(protocols=pe.PROTOCOLS)
        await ws.prepare(request)
        if pod == "hang":
            await asyncio.sleep(3600)
        if pod in ("ack", "deaf", "flood", "silent", "gone"):
            lost = 2 if pod == "deaf" else 0
            async for message in ws:
                if message.type != WSMsgType.BINARY or message.data[:1] != b"\x00":
                    break
                self.stdin += message.data[1:]
                while self.stdin.startswith(HELLO[0]):
                    self.stdin = self.stdin[len(HELLO[0]):]
                    self.pings += 1
                    if self.pings > lost:
                        await ws.send_bytes(b"\x01" + HELLO[1] + b"\n")
                size, _, rest = self.stdin.partition(b"\n")
                if _ and len(rest) >= int(size):
                    break
            if pod == "gone":   # read it all, then ended (a short episode) before its line reached us
                await ws.close()
                return ws
            try:   # containerd ends an attach whose client closed its stdin (a pod without stdinOnce)
                after = await asyncio.wait_for(ws.receive(), 0.1)
            except asyncio.TimeoutError:
                after = None
            if after is not None and after.type == WSMsgType.BINARY and after.data[:1] == b"\xff":
                self.closed_stdin = True
                await ws.close()
                return ws
            if pod == "flood":
                await ws.send_bytes(b"\x01" + ACK + b"\n" + b"x" * 32768)
                for _ in range(6):
                    await ws.send_bytes(b"\x01" + b"y" * 32768)
            elif pod != "silent":
                await ws.send_bytes(b"\x01" + b"prepare said something\n" + ACK[:10])
                await ws.send_bytes(b"\x01" + ACK[10:] + b"\n")
            await asyncio.sleep(3600)   # an attach streams on while the container runs
        await ws.close()
        return ws


async def serving(pki, scenario):  # noqa: F811
    return await exec_serving(pki, scenario, FakeAttach(), "attach")


def test_the_bytes_reach_stdin_and_the_call_returns_on_the_containers_line(pki):  # noqa: F811
    script = b"x" * 70_000   # several stdin frames
    data = b"%d\n" % len(script) + script

    async def scenario(client, fake):
        started = asyncio.get_running_loop().time()
        await pod_attach.deliver(client, "ns", "ack", "agent", data, ack=ACK, timeout=10)
        request = fake.requests[0]
        assert dict(request.query) == {"container": "agent", "stdin": "true", "stdout": "true"}
        assert request.headers["Authorization"] == "Bearer tok-123"
        assert fake.stdin == data
        return asyncio.get_running_loop().time() - started
    assert asyncio.run(serving(pki, scenario)) < 5   # not the server's endless stream


def test_with_a_hello_it_pings_until_answered_then_sends(pki):  # noqa: F811
    data = b"5\nhello"

    async def scenario(client, fake):
        await pod_attach.deliver(client, "ns", "deaf", "agent", data, ack=ACK, timeout=10, hello=HELLO)
        return fake.pings, fake.stdin
    pings, stdin = asyncio.run(serving(pki, scenario))
    assert pings >= 3 and stdin == data   # two answers lost, one came: then the script, once


def test_a_channel_kept_open_then_delivers_once_and_never_closes_the_stdin(pki):  # noqa: F811
    """The pool's channel (service.warm_channels): opened and answered, idle, then the script."""
    async def scenario(client, fake):
        channel = await pod_attach.open_channel(client, "ns", "deaf", "agent", ack=ACK, timeout=10, hello=HELLO,
                                                keepalive=5)
        await asyncio.sleep(0.2)
        assert channel.alive and fake.stdin == b""
        await channel.deliver(b"5\nhello", timeout=10)
        assert not channel.alive
        with pytest.raises(Unavailable, match="closed or used"):
            await channel.deliver(b"5\nagain", timeout=10)
        return fake.stdin, fake.closed_stdin
    stdin, closed = asyncio.run(serving(pki, scenario))
    assert stdin == b"5\nhello" and not closed


def test_a_line_followed_at_once_by_a_flood_is_seen(pki):  # noqa: F811
    """What the agent prints as soon as it runs comes in the same burst as the launcher's line: the
    line must not be pushed out of what is looked at before it is looked for."""
    async def scenario(client, fake):
        await pod_attach.deliver(client, "ns", "flood", "agent", b"1\nx", ack=ACK, timeout=5, hello=HELLO)
    asyncio.run(serving(pki, scenario))


@pytest.mark.parametrize("pod,error,message", [
    ("ended", Unavailable, "before the container confirmed"),
    ("hang", TimedOut, "did not answer within"),   # its pings: nothing was sent
    ("silent", Unconfirmed, "all of it was sent"),
    ("gone", Unconfirmed, "all of it was sent"),   # it may run what it got: never evicted for it
    ("forbidden", Forbidden, "pods/attach"),
])
def test_a_container_that_never_confirms_is_an_error(pki, pod, error, message):  # noqa: F811
    async def scenario(client, fake):
        with pytest.raises(error, match=message):
            await pod_attach.deliver(client, "ns", pod, "agent", b"1\nx", ack=ACK, timeout=1, hello=HELLO)
    asyncio.run(serving(pki, scenario))
