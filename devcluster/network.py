"""Pod networking of one devcluster: a network namespace per node, as kind's node containers.

    host netns        <p>h (veth) 10.B.0.1/24 -- the control plane's address for nodes and pods
      |
    <p>-sw netns      bridge br0: the cluster's "switch" (host-side traffic never bridges on the host)
      |  |
    <p>-devnode-i     eth0 10.B.0.(10+i); cni0 (CNI bridge plugin) 10.B.(128+2(i-1)).1/23;
                      kube-proxy, kube-router; the kubelet's API on 10.B.0.(10+i)
        pods          one netns each (<p>-<node>-<pod uid>), an address from the node's podCIDR

`<p>` is `rb` + 5 hex digits of a hash of the state directory, so three checkouts on one machine
never share a name. B is picked from that hash too, skipping any 10.B.0.0/16 the host already
routes (another devcluster's). Routes: each node has the other nodes' podCIDRs via their eth0
addresses; the host has them via its veth and a blackhole for the rest of 10.B.0.0/16. Nothing
has a default route, nothing masquerades: a pod reaches only the cluster's own addresses.

On the host, traffic from the veth is cut down by our own chains (jumped to from INPUT, FORWARD
and nat PREROUTING, matched on our interface only): pods and nodes reach the apiserver (DNAT to
its 127.0.0.1 port, route_localnet on our veth only) and CoreDNS on 10.B.0.1:53, nothing else on
the host, and nothing is ever forwarded.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")


def prefix_for(state_dir: Path) -> str:
    return "rb" + hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:5]


@dataclass(frozen=True)
class Plan:
    """Every name and address of one cluster's network (pure; persisted in state.json)."""

    prefix: str
    octet: int                 # B in 10.B.0.0/16
    nodes: tuple[str, ...]

    @property
    def host_if(self) -> str:
        return self.prefix + "h"

    @property
    def host_ip(self) -> str:
        return f"10.{self.octet}.0.1"

    @property
    def supernet(self) -> str:
        return f"10.{self.octet}.0.0/16"

    @property
    def service_cidr(self) -> str:
        return f"10.{self.octet}.1.0/24"

    @property
    def kubernetes_ip(self) -> str:
        return f"10.{self.octet}.1.1"

    @property
    def dns_ip(self) -> str:
        return f"10.{self.octet}.1.10"

    @property
    def cluster_cidr(self) -> str:
        return f"10.{self.octet}.128.0/17"

    @property
    def switch_ns(self) -> str:
        return f"{self.prefix}-sw"

    def node_ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def node_ip(self, node: str) -> str:
        return f"10.{self.octet}.0.{10 + self.nodes.index(node) + 1}"

    def pod_cidr(self, node: str) -> str:
        return f"10.{self.octet}.{128 + 2 * self.nodes.index(node)}.0/23"

    @property
    def chain(self) -> str:
        return self.prefix.upper()

    def to_json(self) -> dict:
        return {"prefix": self.prefix, "octet": self.octet, "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, d: dict) -> "Plan":
        return cls(d["prefix"], int(d["octet"]), tuple(d["nodes"]))


def _run(*argv: str, check: bool = True, netns: str | None = None, input: str | None = None) -> str:
    if netns:
        argv = ("ip", "netns", "exec", netns) + argv
    r = subprocess.run(argv, capture_output=True, text=True, input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def host_routes_overlap(net: str) -> bool:
    """True when the host already has an address or route inside `net` (someone else's)."""
    want = ipaddress.ip_network(net)
    for line in _run("ip", "-4", "route", "show", "table", "all").splitlines():
        words = line.split()
        if not words:
            continue
        dst = words[1] if words[0] in ("blackhole", "unreachable", "local", "broadcast", "prohibit") else words[0]
        if dst == "default":
            continue
        try:
            if ipaddress.ip_network(dst, strict=False).overlaps(want):
                return True
        except ValueError:
            continue
    return False


def new_plan(state_dir: Path, nodes: list[str]) -> Plan:
    if len(nodes) > 64:
        raise RuntimeError("at most 64 nodes: each node's /23 comes from 10.B.128.0/17")
    prefix = prefix_for(state_dir)
    start = int(prefix[2:], 16) % 50
    for k in range(50):
        octet = 200 + (start + k) % 50
        if not host_routes_overlap(f"10.{octet}.0.0/16"):
            return Plan(prefix, octet, tuple(nodes))
    raise RuntimeError("no free 10.B.0.0/16 with 200 <= B < 250 on this host")


def _iptables_rules(plan: Plan, apiserver_port: int) -> list[tuple[str, str, list[str]]]:
    """(table, chain, rule) of our host chains; the jumps into them match our veth only."""
    c, hif = plan.chain, plan.host_if
    return [
        ("nat", f"{c}-DNAT", ["-d", plan.host_ip, "-p", "tcp", "--dport", str(apiserver_port),
                              "-j", "DNAT", "--to-destination", f"127.0.0.1:{apiserver_port}"]),
        ("filter", f"{c}-IN", ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]),
        ("filter", f"{c}-IN", ["-d", "127.0.0.1", "-p", "tcp", "--dport", str(apiserver_port), "-j", "ACCEPT"]),
        ("filter", f"{c}-IN", ["-d", plan.host_ip, "-p", "udp", "--dport", "53", "-j", "ACCEPT"]),
        ("filter", f"{c}-IN", ["-d", plan.host_ip, "-p", "tcp", "--dport", "53", "-j", "ACCEPT"]),
        ("filter", f"{c}-IN", ["-j", "DROP"]),
        ("filter", f"{c}-FWD", ["-j", "DROP"]),
    ]


def _jumps(plan: Plan) -> list[tuple[str, str, list[str]]]:
    c, hif = plan.chain, plan.host_if
    return [("nat", "PREROUTING", ["-i", hif, "-j", f"{c}-DNAT"]),
            ("filter", "INPUT", ["-i", hif, "-j", f"{c}-IN"]),
            ("filter", "FORWARD", ["-i", hif, "-j", f"{c}-FWD"]),
            ("filter", "FORWARD", ["-o", hif, "-j", f"{c}-FWD"])]


def up(plan: Plan, apiserver_port: int) -> None:
    """Create everything (idempotence is not needed: `down` runs first on a stale cluster)."""
    sw, hif = plan.switch_ns, plan.host_if
    _run("ip", "netns", "add", sw)
    _run("ip", "link", "set", "lo", "up", netns=sw)
    _run("ip", "link", "add", "br0", "type", "bridge", netns=sw)
    _run("ip", "link", "set", "br0", "up", netns=sw)
    # the switch only bridges: bridged frames skip iptables there
    _run("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=0", netns=sw)
    _run("ip", "link", "add", hif, "type", "veth", "peer", "name", hif + "p")
    _run("ip", "link", "set", hif + "p", "netns", sw)
    _run("ip", "link", "set", hif + "p", "master", "br0", "up", netns=sw)
    _run("ip", "addr", "add", f"{plan.host_ip}/24", "dev", hif)
    _run("sysctl", "-qw", f"net.ipv4.conf.{hif}.route_localnet=1")
    _run("ip", "link", "set", hif, "up")
    _run("ip", "route", "add", "blackhole", plan.supernet)
    for node in plan.nodes:
        ns, ip = plan.node_ns(node), plan.node_ip(node)
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "set", "lo", "up", netns=ns)
        port = "p" + node.rsplit("-", 1)[-1]
        _run("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns, netns=sw)
        _run("ip", "link", "set", port, "master", "br0", "up", netns=sw)
        _run("ip", "addr", "add", f"{ip}/24", "dev", "eth0", netns=ns)
        _run("ip", "link", "set", "eth0", "up", netns=ns)
        _run("sysctl", "-qw", "net.ipv4.ip_forward=1", netns=ns)
        # same-node pod traffic crosses cni0: kube-proxy and kube-router must see it
        _run("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1", netns=ns)
        _run("ip", "route", "add", plan.pod_cidr(node), "via", ip, "dev", hif)
        for other in plan.nodes:
            if other != node:
                _run("ip", "route", "add", plan.pod_cidr(other), "via", plan.node_ip(other), netns=ns)
    for table, chain, _ in _iptables_rules(plan, apiserver_port):
        _run("iptables", "-w", "-t", table, "-N", chain, check=False)
    for table, chain, rule in _iptables_rules(plan, apiserver_port):
        _run("iptables", "-w", "-t", table, "-A", chain, *rule)
    for table, chain, rule in _jumps(plan):
        _run("iptables", "-w", "-t", table, "-I", chain, "1", *rule)


def down(prefix: str, supernet: str | None) -> list[str]:
    """Remove everything named with `prefix` (and our blackhole route). Returns what went."""
    gone = []
    chain = prefix.upper()
    for table in ("nat", "filter"):
        rules = _run("iptables", "-w", "-t", table, "-S", check=False).splitlines()
        for rule in rules:  # jumps into our chains first, then the chains
            if rule.startswith("-A ") and re.search(rf"-j {chain}-\w+\b", rule):
                _run("iptables", "-w", "-t", table, *("-D " + rule[3:]).split(), check=False)
                gone.append(f"{table}: {rule}")
        for rule in rules:
            if rule.startswith(f"-N {chain}-"):
                name = rule.split()[1]
                _run("iptables", "-w", "-t", table, "-F", name, check=False)
                _run("iptables", "-w", "-t", table, "-X", name, check=False)
                gone.append(f"{table} chain {name}")
    links = json.loads(_run("ip", "-j", "link", "show", check=False) or "[]")
    for link in links:
        if link.get("ifname", "").startswith(prefix):
            _run("ip", "link", "del", link["ifname"], check=False)
            gone.append(f"link {link['ifname']}")
    for name in netns_names(prefix):
        _run("ip", "netns", "del", name, check=False)
        gone.append(f"netns {name}")
    if supernet and _run("ip", "route", "show", "type", "blackhole", supernet, check=False).strip():
        _run("ip", "route", "del", "blackhole", supernet, check=False)
        gone.append(f"route blackhole {supernet}")
    return gone


def netns_names(prefix: str) -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix + "-"))
    except FileNotFoundError:
        return []
