"""Pod network namespaces wired by the upstream CNI plugins (bridge + host-local, loopback).

The agent runs in the host's network namespace; the plugins run in the node's (nsenter), so
the bridge `cni0` and each pod's host-side veth live there, as they would on a kind node. The
agent calls the plugins itself, as libcni does: one ADD per plugin, DEL in reverse order.
"""
from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import socket
from dataclasses import dataclass

from devcluster.policy_seal import POD_JUMP  # kube-router's pod chain jump, defined once

log = logging.getLogger("nodeagent.cni")

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000


class CniError(RuntimeError):
    pass


@dataclass(frozen=True)
class Network:
    node_netns: str      # name under /run/netns
    node_ip: str
    pod_cidr: str
    cni_bin: str         # directory holding bridge, host-local, loopback
    data_dir: str        # host-local's allocations
    pod_prefix: str      # pod netns names start with this (cluster prefix + node)
    cluster_dns: str | None = None
    wait_for_netpol: bool = False   # hold containers until kube-router programmed the pod

    def pod_netns(self, uid: str) -> str:
        return f"{self.pod_prefix}-{uid}"

    def bridge_conf(self) -> dict:
        return {"cniVersion": "1.0.0", "name": "devcluster", "type": "bridge", "bridge": "cni0",
                "isGateway": True, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_cidr}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": self.data_dir}}


LOOPBACK_CONF = {"cniVersion": "1.0.0", "name": "loopback", "type": "loopback"}


async def _exec(argv: list[str], env: dict | None = None, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await proc.communicate(stdin)
    return proc.returncode, out, err


async def _plugin(net: Network, command: str, conf: dict, uid: str, netns: str, in_node: bool) -> dict:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": uid, "CNI_NETNS": os.path.join(NETNS_DIR, netns) if netns else "",
           "CNI_IFNAME": "eth0" if conf["type"] != "loopback" else "lo", "CNI_PATH": net.cni_bin,
           "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    binary = os.path.join(net.cni_bin, conf["type"])
    argv = (["nsenter", f"--net={os.path.join(NETNS_DIR, net.node_netns)}", binary]
            if in_node else [binary])
    rc, out, err = await _exec(argv, env, json.dumps(conf).encode())
    if rc != 0:
        try:
            msg = json.loads(out).get("msg", out.decode())
        except ValueError:
            msg = (out or err).decode(errors="replace")
        raise CniError(f"CNI {conf['type']} {command}: {msg.strip()}")
    return json.loads(out) if out.strip() else {}


async def setup(net: Network, uid: str) -> str:
    """Create the pod's netns and wire it; returns the pod IP. Undone by teardown()."""
    name = net.pod_netns(uid)
    if not os.path.exists(os.path.join(NETNS_DIR, name)):
        rc, _, err = await _exec(["ip", "netns", "add", name])
        if rc != 0:
            raise CniError(f"ip netns add {name}: {err.decode().strip()}")
    await _plugin(net, "ADD", LOOPBACK_CONF, uid, name, in_node=False)
    result = await _plugin(net, "ADD", net.bridge_conf(), uid, name, in_node=True)
    for ip in result.get("ips") or []:
        addr = ip.get("address", "").split("/")[0]
        if addr and ":" not in addr:
            return addr
    raise CniError(f"CNI bridge ADD returned no IPv4 address: {result}")


async def teardown(net: Network, uid: str) -> None:
    """DEL in reverse order (frees the address even when the netns is gone), then the netns."""
    name = net.pod_netns(uid)
    present = os.path.exists(os.path.join(NETNS_DIR, name))
    try:
        await _plugin(net, "DEL", net.bridge_conf(), uid, name if present else "", in_node=True)
    except CniError as e:
        log.warning("%s", e)
    if present:
        rc, _, err = await _exec(["ip", "netns", "del", name])
        if rc != 0:
            log.warning("ip netns del %s: %s", name, err.decode().strip())


def stale_pods(net: Network) -> list[str]:
    """Pod uids whose netns a previous agent run left behind."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    lead = net.pod_prefix + "-"
    return [n[len(lead):] for n in names if n.startswith(lead)]


def listen_in_netns(netns: str, host: str, port: int) -> socket.socket:
    """A listening TCP socket inside `netns` (setns on this thread, then back): the apiserver
    reaches a kubelet at its node's address."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((host, port))
                s.listen(128)
                s.setblocking(False)
            except OSError:
                s.close()
                raise
            return s
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the agent's netns")
    finally:
        os.close(own)
        os.close(target)




class PolicyGate:
    """Holds a pod's containers until the node's NetworkPolicy engine (kube-router) has
    programmed that pod: its chain jumps name the pod and its address, written in one
    iptables-restore with all of the pod's rules. kube-router learns the address from the pod's
    status, so without this a fresh pod runs unfiltered until its next sync (Calico's CNI has the
    same wait, `policy_setup_timeout_seconds`). One poller per node, only while pods wait."""

    def __init__(self, node_netns: str, interval: float = 0.1):
        self.node_netns = node_netns
        self.interval = interval
        self.waiters: dict[tuple[str, str, str], list[asyncio.Future]] = {}
        self.task: asyncio.Task | None = None

    async def wait(self, namespace: str, name: str, ip: str, timeout: float) -> bool:
        key = (ip, name, namespace)
        fut = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(key, []).append(fut)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._poll(), name=f"netpol gate {self.node_netns}")
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            futs = self.waiters.get(key, [])
            if fut in futs:
                futs.remove(fut)
            if not futs:
                self.waiters.pop(key, None)

    def programmed(self, rules: str) -> set[tuple[str, str, str]]:
        return {m.groups() for m in map(POD_JUMP.match, rules.splitlines()) if m}

    async def _poll(self) -> None:
        while self.waiters:
            rc, out, err = await _exec(["nsenter", f"--net={os.path.join(NETNS_DIR, self.node_netns)}",
                                        "iptables-save", "-t", "filter"])
            if rc == 0:
                done = self.programmed(out.decode(errors="replace"))
                for key in done & set(self.waiters):
                    for fut in self.waiters.get(key, []):
                        if not fut.done():
                            fut.set_result(True)
            else:
                log.warning("iptables-save in %s: %s", self.node_netns, err.decode().strip())
            await asyncio.sleep(self.interval)
