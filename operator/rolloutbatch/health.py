"""``/healthz`` and ``/readyz`` on the liveness port, served on the operator's event loop.

``/healthz`` answers 200 while the loop answers (a wedged loop fails the Deployment's liveness
probe, as kopf's own liveness endpoint did) and the leader-election threads run. ``/readyz``
tells the leader from the standby in a JSON body, ``{"role": "leader" | "standby", "holder": ...}``,
and answers 200 for both: the Deployment's two replicas are both available (``kubectl rollout
status`` finishes, the PodDisruptionBudget counts both), and a standby is ready in the sense
that matters, ready to take over: so only while its last round read the Lease (a standby that
cannot, for want of rights or of the namespace, could never lead; the body's error says why). It
answers 503 while the role is not known yet, while a new leader's reconciler starts, and once the
process stops.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web


def readiness(status: dict, reconciling: bool) -> tuple[int, dict]:
    """The HTTP status and body of ``/readyz`` for an elector's ``status`` (see the docstring)."""
    body = dict(status, reconciling=reconciling)
    standby = status.get("role") == "standby" and not status.get("error")
    ready = standby or (status.get("role") == "leader" and reconciling)
    return (200 if ready else 503), body


class HealthServer:
    def __init__(self, status: Callable[[], tuple[int, dict]], alive: Callable[[], bool]) -> None:
        self._status, self._alive = status, alive
        self._runner: web.AppRunner | None = None

    async def _healthz(self, request: web.Request) -> web.Response:
        if self._alive():
            return web.Response(text="ok\n")
        return web.Response(status=500, text="leader election stopped\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        code, body = self._status()
        return web.Response(status=code, text=json.dumps(body) + "\n", content_type="application/json")

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        # None: one socket per family on every address (asyncio's create_server), IPv6 clusters too.
        await web.TCPSite(self._runner, host or None, port, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
