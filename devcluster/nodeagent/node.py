"""Node registration, Lease renewal (kube-node-lease, every 10 s) and status heartbeat."""
from __future__ import annotations

import asyncio
import logging
import platform
import time

from .kubeapi import Api, ApiError, MERGE
from .status import rfc3339, rfc3339_micro

log = logging.getLogger("nodeagent.node")

KUBELET_VERSION = "v1.37.2"
LEASE_DURATION = 40
LEASE_RENEW = 10
HEARTBEAT = 30

_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("NetworkUnavailable", "False", "RouteCreated", "devcluster node agent: loopback-only pod networks"),
)


def _arch() -> str:
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def node_labels(name: str) -> dict:
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _arch(), "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": _arch(), "devcluster.rolloutbatch.io/node-agent": "bwrap"}


def node_status(name: str, *, port: int, capacity: dict, now: float, boot_id: str = "",
                transition: str | None = None, address: str = "127.0.0.1") -> dict:
    """Full Node status (pure). transition: keep this lastTransitionTime for the conditions."""
    t = rfc3339(now)
    conds = [{"type": ty, "status": st, "reason": r, "message": m,
              "lastHeartbeatTime": t, "lastTransitionTime": transition or t}
             for ty, st, r, m in _CONDITIONS]
    uname = platform.uname()
    return {
        "capacity": dict(capacity), "allocatable": dict(capacity),
        "conditions": conds,
        "addresses": [{"type": "InternalIP", "address": address},
                      {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": int(port)}},
        "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": boot_id,
                     "kernelVersion": uname.release, "osImage": "devcluster bubblewrap node",
                     "containerRuntimeVersion": "bwrap://0.8", "kubeletVersion": KUBELET_VERSION,
                     "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": _arch()},
    }


def lease_body(name: str, node_uid: str, now: float, rv: str | None = None) -> dict:
    meta = {"name": name, "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}]}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION,
                     "renewTime": rfc3339_micro(now)}}


class NodeManager:
    def __init__(self, api: Api, name: str, *, port: int, capacity: dict, address: str = "127.0.0.1",
                 pod_cidr: str | None = None):
        self.api = api
        self.name = name
        self.port = port
        self.address = address
        self.pod_cidr = pod_cidr
        self.capacity = capacity
        self.uid = ""
        self._transition = None
        self._lease_rv: str | None = None
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                self._boot_id = f.read().strip()
        except OSError:
            self._boot_id = ""

    async def register(self) -> None:
        path = f"/api/v1/nodes/{self.name}"
        now = time.time()
        try:
            node = await self.api.get(path)
            log.info("node %s exists; reusing it", self.name)
        except ApiError as e:
            if e.status != 404:
                raise
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": self.name, "labels": node_labels(self.name)},
                    "status": node_status(self.name, port=self.port, capacity=self.capacity, now=now,
                                          boot_id=self._boot_id, address=self.address)}
            if self.pod_cidr:  # the node's share of the cluster CIDR, as kind's nodes get
                body["spec"] = {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]}
            try:
                node = await self.api.post("/api/v1/nodes", body)
                log.info("registered node %s", self.name)
            except ApiError as e2:
                if e2.status != 409:
                    raise
                node = await self.api.get(path)
        self.uid = node["metadata"]["uid"]
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in node_labels(self.name).items()):
            await self.api.patch(path, {"metadata": {"labels": node_labels(self.name)}}, MERGE)
        self._transition = rfc3339(now)
        await self.heartbeat()
        await self.renew_lease()

    async def heartbeat(self) -> None:
        st = node_status(self.name, port=self.port, capacity=self.capacity, now=time.time(),
                         boot_id=self._boot_id, transition=self._transition, address=self.address)
        await self.api.patch(f"/api/v1/nodes/{self.name}/status", {"status": st})

    async def renew_lease(self) -> None:
        base = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        for _ in range(3):
            try:
                if self._lease_rv is None:
                    try:
                        cur = await self.api.get(f"{base}/{self.name}")
                        self._lease_rv = cur["metadata"]["resourceVersion"]
                    except ApiError as e:
                        if e.status != 404:
                            raise
                        out = await self.api.post(base, lease_body(self.name, self.uid, time.time()))
                        self._lease_rv = out["metadata"]["resourceVersion"]
                        return
                out = await self.api.put(f"{base}/{self.name}",
                                         lease_body(self.name, self.uid, time.time(), self._lease_rv))
                self._lease_rv = out["metadata"]["resourceVersion"]
                return
            except ApiError as e:
                if e.status in (409, 404):
                    self._lease_rv = None
                    continue
                raise

    async def run(self) -> None:
        """Lease every 10 s, node status every 30 s; errors are logged and retried."""
        last_hb = time.monotonic()
        while True:
            await asyncio.sleep(LEASE_RENEW)
            try:
                await self.renew_lease()
            except Exception as e:  # noqa: BLE001 - keep renewing whatever happens
                log.warning("lease renewal failed: %s", e)
            if time.monotonic() - last_hb >= HEARTBEAT:
                try:
                    await self.heartbeat()
                    last_hb = time.monotonic()
                except Exception as e:  # noqa: BLE001
                    log.warning("node heartbeat failed: %s", e)
