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
