"""The storage layer a batch's services talk to: every API call by name, off the event loop.

``kube.resources`` holds the operations (create-or-adopt, owned deletes, the results ConfigMaps'
writes, bounded log reads) as plain functions of an ``Api``; this class gives each one a name a
service calls and runs it in a worker thread, since the HTTP client blocks. The services take a
``Storage`` and never an ``Api``: their unit tests build one over an in-memory API server
(``tests/support/memory_api.py``) that keeps resourceVersions, preconditions, finalizers and
owner references as the real one does, so the operations under test are the real ones.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import OwnerGone
from rolloutbatch.kube.pod_exec import LIMIT_BYTES, ExecResult


class Storage:
    """The operator's API calls, each awaited; ``api`` is a ``kube.client.Api`` (or its stand-in).

    A call runs on in its worker thread when the task awaiting it is cancelled (kopf cancels a
    batch's daemon when the batch is deleted): a create on its way then lands after the
    finalizer's pass, and a sandbox namespace (cluster-scoped, owned by nothing) would outlive
    its batch. So a call abandoned that way either never starts or is waited for by
    :meth:`settled`, and :meth:`close` refuses new ones: the finalizer closes the batch's
    storage and waits for it to settle before it removes anything.
    """

    def __init__(self, api: Any, writer: Any = None) -> None:
        self.api = api
        # kube.async_writes.AsyncWriter: the status patches go out on the event loop through it
        # (one in a thread cost twice the CPU: bench/README.md, "Writes on the loop")
        self.writer = writer
        self._lock = threading.Lock()
        self._running: set[threading.Event] = set()   # calls abandoned by their task, still running
        self._closed = False

    async def _run(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise OwnerGone("the batch is being deleted: no more API calls for it")
        state = {"started": False, "abandoned": False}
        done = threading.Event()

        def call() -> Any:
            with self._lock:
                if state["abandoned"]:
                    return None   # its task was cancelled before it started: it never runs
                state["started"] = True
            try:
                return operation(self.api, *args, **kwargs)
            finally:
                done.set()
        try:
            return await asyncio.to_thread(call)
        except asyncio.CancelledError:
            with self._lock:
                state["abandoned"] = True
                if state["started"] and not done.is_set():
                    self._running.add(done)
            raise

    def close(self) -> None:
        """No new call from now on (they raise OwnerGone)."""
        self._closed = True

    async def settled(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until no abandoned call still runs. True when none does."""
        deadline = time.monotonic() + timeout
        for done in list(self._running):
            await asyncio.to_thread(done.wait, max(0.0, deadline - time.monotonic()))
            if done.is_set():
                self._running.discard(done)
        return not self._running

    # -- any kind ----------------------------------------------------------------------------
    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The object, or None when there is none of that name."""
        return await self._run(resources.get_or_none, kind, name, namespace)

    async def create_or_adopt(self, obj: dict, batch_uid: str,
                              same: Callable[[dict, dict], bool] | None = None) -> dict:
        return await self._run(resources.create_or_adopt, obj, batch_uid, same)

    async def dry_run_create(self, obj: dict) -> None:
        await self._run(resources.dry_run_create, obj)

    async def delete_owned(self, kind: str, name: str, namespace: str | None, batch_uid: str,
                           *, propagation: str = "Background") -> bool:
        return await self._run(resources.delete_owned, kind, name, namespace, batch_uid, propagation=propagation)

    async def events_of(self, namespace: str, uid: str) -> list[dict]:
        return await self._run(resources.events_of, namespace, uid)

    # -- the batch ---------------------------------------------------------------------------
    async def patch_batch_status(self, namespace: str, name: str, patch: dict) -> dict:
        if self.writer is None:
            return await self._run(resources.patch_batch_status, namespace, name, patch)
        if self._closed:
            raise OwnerGone("the batch is being deleted: no more API calls for it")
        path, body, what = resources.batch_status_patch(namespace, name, patch)
        return await self.writer.merge_patch(path, body, what)

    async def delete_batch(self, namespace: str, name: str, uid: str) -> None:
        await self._run(resources.delete_batch, namespace, name, uid)

    # -- its children ------------------------------------------------------------------------
    async def list_pods(self, namespace: str, selector: str) -> list[dict]:
        return await self._run(resources.list_pods, namespace, selector)

    async def patch_pod(self, namespace: str, name: str, ops: list[dict]) -> bool:
        return await self._run(resources.patch_pod, namespace, name, ops)

    async def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        await self._run(resources.evict_pod, namespace, name, uid)

    async def exec_in_pod(self, namespace: str, pod: str, container: str | None, command: list[str], *,
                          stdin: bytes = b"", timeout: float, limit_bytes: int = LIMIT_BYTES) -> ExecResult:
        """Run a command in a pod (``kube.pod_exec``). On the event loop, not in a worker thread:
        exec is asynchronous already. A cancelled exec drops its connection at once; the command
        itself may run on in the container."""
        if self._closed:
            raise OwnerGone("the batch is being deleted: no more API calls for it")
        return await self.api.exec_in_pod(namespace, pod, container, command, stdin=stdin, timeout=timeout,
                                          limit_bytes=limit_bytes)

    async def attach_to_pod(self, namespace: str, pod: str, container: str, data: bytes, *, ack: bytes,
                            timeout: float, hello: tuple[bytes, bytes] | None = None) -> None:
        """Hand a container ``data`` on its stdin (``kube.pod_attach``), on the event loop as exec."""
        if self._closed:
            raise OwnerGone("the batch is being deleted: no more API calls for it")
        await self.api.attach_to_pod(namespace, pod, container, data, ack=ack, timeout=timeout, hello=hello)

    async def read_log(self, namespace: str, pod: str, container: str, limit_bytes: int) -> tuple[bytes, bool]:
        return await self._run(resources.read_log, namespace, pod, container, limit_bytes)

    async def suspend_job(self, name: str, namespace: str, batch_uid: str, job_uid: str | None = None) -> bool:
        return await self._run(resources.suspend_job, name, namespace, batch_uid, job_uid)

    async def job_workload(self, namespace: str, job_uid: str) -> dict | None:
        return await self._run(resources.job_workload, namespace, job_uid)

    async def deactivate_workload(self, namespace: str, job_uid: str) -> bool:
        return await self._run(resources.deactivate_workload, namespace, job_uid)

    async def list_configmaps(self, namespace: str, selector: str) -> list[dict]:
        return await self._run(resources.list_configmaps, namespace, selector)

    async def configmap_versions(self, namespace: str, selector: str) -> dict[str, str]:
        return await self._run(resources.configmap_versions, namespace, selector)

    async def put_configmap(self, obj: dict, batch_uid: str, resource_version: str | None = None,
                            also_ours: Callable[[dict], bool] | None = None, *,
                            batch: tuple[str, str] | None = None) -> dict:
        return await self._run(resources.put_configmap, obj, batch_uid, resource_version, also_ours, batch=batch)

    # -- the cluster around it ---------------------------------------------------------------
    async def runtime_class(self, name: str) -> dict | None:
        return await self._run(resources.runtime_class, name)

    async def resource_quotas(self, namespace: str) -> list[dict]:
        return await self._run(resources.resource_quotas, namespace)

    async def node_allocatables(self) -> list[dict]:
        return await self._run(resources.node_allocatables)

    async def service_cidrs(self) -> list[str]:
        return await self._run(resources.service_cidrs)

    async def namespace_names(self, selector: str, limit: int) -> list[str]:
        return await self._run(resources.namespace_names, selector, limit)

    async def has_live_pod(self, namespace: str, selector: str) -> bool:
        return await self._run(resources.has_live_pod, namespace, selector)
