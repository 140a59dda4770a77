"""kube.pod_exec against a fake API server in this process (aiohttp, TLS from the devcluster's
PKI code): the WebSocket exchange end to end, with servers that misbehave as a real one might
(hang, refuse, end without a status, speak only v4). The devcluster test
(tests/devcluster/test_pod_exec.py) runs the same calls on a real API server and kubelet."""
from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time

import pykube
import pytest
from aiohttp import WSMsgType, web

from devcluster.pki import ensure_pki
from rolloutbatch.kube import pod_exec as pe
from rolloutbatch.kube.client import Api
from rolloutbatch.kube.errors import ConfigError, Forbidden, KubeError, NotFound, TimedOut, Unavailable

SUCCESS = {"metadata": {}, "status": "Success"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return ensure_pki(tmp_path_factory.mktemp("pki"))


def kubeconfig(server: str, pki, user: dict | None = None) -> pykube.KubeConfig:
    return pykube.KubeConfig({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server, "certificate-authority": str(pki.ca_crt)}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "tok-123"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]})


class FakeServer:
    """pods/exec of the pod named after a behaviour: echo (stdin back on stdout, until stdin's
    end), fail3, hang, flood, nostatus, v4only, noprotocol, forbidden, missing."""

    def __init__(self) -> None:
        self.requests: list[web.Request] = []
        self.received: list[bytes] = []

    async def exec(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request)
        pod = request.match_info["pod"]
        if pod in ("forbidden", "missing"):
            status, reason = (403, "Forbidden") if pod == "forbidden" else (404, "NotFound")
            message = ('pods "forbidden" is forbidden: User "u" cannot create resource "pods/exec"'
                       if pod == "forbidden" else 'pods "missing" not found')
            return web.json_response({"kind": "Status", "status": "Failure", "message": message,
                                      "reason": reason, "code": status}, status=status)
        protocols = {"v4only": ("v4.channel.k8s.io",), "noprotocol": ()}.get(pod, pe.PROTOCOLS)
        ws = web.WebSocketResponse(protocols=protocols)
        await ws.prepare(request)
        if pod == "hang":
            await asyncio.sleep(3600)   # never reads, never answers a close
        if pod == "echo" or pod == "v4only":
            data = b""
            async for message in ws:
                if message.type != WSMsgType.BINARY:
                    break
                self.received.append(message.data)
                if message.data == b"\xff\x00" or (pod == "v4only" and len(data) + len(message.data) - 1 >= 5):
                    if message.data[0] == pe.STDIN:
                        data += message.data[1:]
                    break
                data += message.data[1:]
            await ws.send_bytes(b"\x01" + data)
            await ws.send_bytes(b"\x02" + b"%d bytes" % len(data))
            await ws.send_bytes(b"\x03" + json.dumps(SUCCESS).encode())
        elif pod == "fail3":
            await ws.send_bytes(b"\x01out")
            await ws.send_bytes(b"\x03" + json.dumps({
                "status": "Failure", "reason": "NonZeroExitCode", "message": "exit code 3",
                "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}).encode())
        elif pod == "flood":
            for _ in range(50):
                await ws.send_bytes(b"\x01" + b"x" * 4096)
            await ws.send_bytes(b"\x03" + json.dumps(SUCCESS).encode())
        elif pod == "nostatus":
            await ws.send_bytes(b"\x01partial")
        await ws.close()
        return ws


@contextlib.asynccontextmanager
async def tls_server(app: web.Application, pki, client_ca: bool = False):
    """``app`` served over TLS with the devcluster PKI's apiserver certificate on 127.0.0.1; yields
    its URL. ``client_ca``: ask for a client certificate (as the API server does), not require it."""
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_crt) if client_ca else None)
    if client_ca:
        tls.verify_mode = ssl.CERT_OPTIONAL
    tls.load_cert_chain(pki.apiserver_crt, pki.apiserver_key)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    try:
        yield f"https://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


async def serving(pki, scenario, fake=None, subresource: str = "exec"):
    """``scenario(client, fake)`` against ``fake`` (a FakeServer) serving pods/<subresource> over TLS."""
    fake = fake or FakeServer()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/" + subresource, getattr(fake, subresource))
    async with tls_server(app, pki) as url:
        return await scenario(pe.PodExec(kubeconfig(url, pki)), fake)


def test_stdin_goes_in_and_output_and_status_come_back(pki):
    async def scenario(ex, fake):
        payload = bytes(range(256)) * 400   # 100 KiB: several stdin frames, then the close
        result = await ex.run("ns", "echo", "main", ["sh", "-c", "cat"], stdin=payload, timeout=10,
                              limit_bytes=1 << 20)
        request = fake.requests[0]
        assert request.query.getall("command") == ["sh", "-c", "cat"]
        assert request.query["container"] == "main" and request.query["stdin"] == "true"
        assert request.headers["Authorization"] == "Bearer tok-123"
        assert request.headers["Sec-WebSocket-Protocol"] == "v5.channel.k8s.io,v4.channel.k8s.io"
        assert fake.received[-1] == b"\xff\x00" and len(fake.received) == 5
        return result
    result = asyncio.run(serving(pki, scenario))
    assert result.exit_code == 0 and result.stdout == bytes(range(256)) * 400
    assert result.stderr == b"102400 bytes" and result.protocol == "v5.channel.k8s.io"


def test_no_stdin_asks_for_none_and_a_non_zero_exit_is_a_result(pki):
    async def scenario(ex, fake):
        result = await ex.run("ns", "fail3", None, ["false"], timeout=10)
        assert "stdin" not in fake.requests[0].query and "container" not in fake.requests[0].query
        return result
    result = asyncio.run(serving(pki, scenario))
    assert (result.exit_code, result.stdout, result.message) == (3, b"out", "exit code 3")


def test_output_past_the_limit_is_read_and_dropped(pki):
    heard: list[tuple[str, int]] = []
    result = asyncio.run(serving(pki, lambda ex, _: ex.run("ns", "flood", None, ["yes"], timeout=10,
                                                           limit_bytes=10_000,
                                                           on_output=lambda s, d: heard.append((s, len(d))))))
    assert len(result.stdout) == 10_000 and result.stdout_truncated and result.exit_code == 0
    # streamed as the frames came, every one of them
    assert heard == [("stdout", 4096)] * 50


def test_a_v4_server_gets_stdin_without_its_end(pki):
    result = asyncio.run(serving(pki, lambda ex, _: ex.run("ns", "v4only", None, ["head", "-c", "5"],
                                                           stdin=b"12345", timeout=10)))
    assert (result.protocol, result.stdout, result.exit_code) == ("v4.channel.k8s.io", b"12345", 0)


def test_a_server_that_hangs_is_left_at_the_timeout(pki):
    async def scenario(ex, fake):
        started = time.monotonic()
        with pytest.raises(TimedOut, match="within 1s"):
            await ex.run("ns", "hang", None, ["sleep", "30"], stdin=b"x", timeout=1)
        return time.monotonic() - started
    assert asyncio.run(serving(pki, scenario)) < 1.5


def test_refusals_carry_the_api_message(pki):
    async def scenario(ex, fake):
        with pytest.raises(Forbidden, match='cannot create resource "pods/exec"') as refused:
            await ex.run("ns", "forbidden", None, ["true"], timeout=5)
        assert refused.value.status == 403 and refused.value.reason == "Forbidden"
        with pytest.raises(NotFound, match='exec in pod ns/missing: pods "missing" not found'):
            await ex.run("ns", "missing", None, ["true"], timeout=5)
    asyncio.run(serving(pki, scenario))


def test_an_end_without_status_or_protocol_is_an_error(pki):
    async def scenario(ex, fake):
        with pytest.raises(Unavailable, match="before the command's exit status"):
            await ex.run("ns", "nostatus", None, ["true"], timeout=5)
        with pytest.raises(KubeError, match="none of the channel protocols"):
            await ex.run("ns", "noprotocol", None, ["true"], timeout=5)
    asyncio.run(serving(pki, scenario))


def test_no_server_is_unavailable_and_fast(pki):
    ex = pe.PodExec(kubeconfig("https://127.0.0.1:9", pki))   # the discard port: nothing listens
    with pytest.raises(Unavailable):
        asyncio.run(ex.run("ns", "p", None, ["true"], timeout=5))


def test_credentials_the_session_cannot_carry_make_exec_unavailable(pki):
    plugin = kubeconfig("https://127.0.0.1:9", pki, {"exec": {"command": "get-token", "apiVersion": "v1"}})
    with pytest.raises(ConfigError, match="exec is unavailable with this kubeconfig's credentials"):
        asyncio.run(Api(plugin).exec_in_pod("ns", "p", None, ["true"], timeout=5))
    plain = kubeconfig("http://127.0.0.1:9", pki)
    with pytest.raises(ConfigError, match="unavailable"):
        asyncio.run(pe.PodExec(plain).run("ns", "p", None, ["true"], timeout=5))
    missing = kubeconfig("https://127.0.0.1:9", pki, {"client-certificate": "/nonexistent.crt",
                                                      "client-key": "/nonexistent.key"})
    with pytest.raises(ConfigError, match="credentials are unusable"):
        asyncio.run(pe.PodExec(missing).run("ns", "p", None, ["true"], timeout=5))


def test_a_word_no_exec_can_carry_is_refused_never_sent_changed(pki):
    """The operator's own execs too: a lone surrogate is not UTF-8, and the URL library dropped it
    from the query without a word (another command would run)."""
    async def scenario(ex, fake):
        with pytest.raises(ValueError, match="not UTF-8"):
            await ex.run("ns", "fail3", None, ["rm", "-rf", "build\udcff"], timeout=10)
        assert fake.requests == []
    asyncio.run(serving(pki, scenario))
