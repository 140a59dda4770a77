"""The asyncio clients' TLS (kube.async_session.ssl_context: sdk.AsyncClient, the sessions' and the
operator's exec and attach): what the kubeconfig says, as pykube reads it for the sync client."""

from __future__ import annotations

import asyncio

import pykube
from aiohttp import web

from rolloutbatch.sdk.aio import AsyncApi
from tests.unit.kube.test_pod_exec_server import pki, tls_server  # noqa: F401 (pki: the fixture)


def _config(server: str, pki, cluster: dict) -> pykube.KubeConfig:  # noqa: F811
    return pykube.KubeConfig({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": {"client-certificate": str(pki.admin_crt), "client-key": str(pki.admin_key)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]})


async def _whoami(pki, cluster: dict) -> dict:  # noqa: F811
    """GET through AsyncApi from a server that asks for a client certificate (as the API server
    does) and says whose it got."""
    async def who(request: web.Request) -> web.Response:
        cert = request.transport.get_extra_info("peercert") or {}
        subject = dict(pair[0] for pair in cert.get("subject", ()))
        return web.json_response({"user": subject.get("commonName", "system:anonymous")})
    app = web.Application()
    app.router.add_get("/whoami", who)
    async with tls_server(app, pki, client_ca=True) as url:
        api = AsyncApi(_config(url, pki, cluster))
        try:
            return await api.get("/whoami", "who am I")
        finally:
            await api.close()


def test_the_client_certificate_goes_with_a_verified_server(pki):  # noqa: F811
    assert asyncio.run(_whoami(pki, {"certificate-authority": str(pki.ca_crt)})) == {"user": "admin"}


def test_skipping_the_servers_verification_still_sends_the_client_certificate(pki):  # noqa: F811
    """insecure-skip-tls-verify skips checking the server; without the certificate the API server
    took the async client for system:anonymous, where pykube's sync client was admin."""
    assert asyncio.run(_whoami(pki, {"insecure-skip-tls-verify": True})) == {"user": "admin"}
