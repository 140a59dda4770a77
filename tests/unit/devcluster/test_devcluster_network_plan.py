"""devcluster.network's address plan and names (pure)."""
from __future__ import annotations

import ipaddress

from devcluster import network

NODES = tuple(f"devnode-{i}" for i in range(1, 5))


def test_prefix_is_stable_per_state_dir_and_differs_between_dirs(tmp_path):
    a, b = tmp_path / "a" / ".devcluster", tmp_path / "b" / ".devcluster"
    assert network.prefix_for(a) == network.prefix_for(a)
    assert network.prefix_for(a) != network.prefix_for(b)
    assert network.prefix_for(a).startswith("rb") and len(network.prefix_for(a)) == 7


def test_addresses_are_disjoint_and_inside_the_clusters_own_range():
    plan = network.Plan("rb12345", 217, NODES)
    supernet = ipaddress.ip_network(plan.supernet)
    cidrs = [ipaddress.ip_network(plan.pod_cidr(n)) for n in NODES]
    cluster = ipaddress.ip_network(plan.cluster_cidr)
    assert all(c.subnet_of(cluster) and c.prefixlen == 23 for c in cidrs)
    assert not any(a.overlaps(b) for i, a in enumerate(cidrs) for b in cidrs[i + 1:])
    services = ipaddress.ip_network(plan.service_cidr)
    assert {ipaddress.ip_address(plan.kubernetes_ip), ipaddress.ip_address(plan.dns_ip)} <= set(services)
    assert services.subnet_of(supernet) and cluster.subnet_of(supernet) and not services.overlaps(cluster)
    node_ips = [plan.node_ip(n) for n in NODES]
    assert len(set(node_ips + [plan.host_ip])) == len(NODES) + 1
    assert all(ipaddress.ip_address(i) in ipaddress.ip_network("10.217.0.0/24") for i in node_ips)
    assert network.Plan.from_json(plan.to_json()) == plan


def test_host_names_carry_the_prefix_and_fit_kernel_limits():
    plan = network.Plan("rb12345", 217, NODES)
    assert plan.host_if.startswith(plan.prefix) and len(plan.host_if) <= 15   # IFNAMSIZ - 1
    assert all(ns.startswith(plan.prefix + "-") for ns in [plan.switch_ns] + [plan.node_ns(n) for n in NODES])
    rules = network._iptables_rules(plan, 6443) + network._jumps(plan)
    assert {c for _, c, _ in network._iptables_rules(plan, 6443)} == {"RB12345-DNAT", "RB12345-IN", "RB12345-FWD"}
    # every jump from a built-in chain matches our interface only
    for _, chain, rule in network._jumps(plan):
        assert chain in ("PREROUTING", "INPUT", "FORWARD")
        assert rule[:2] in (["-i", plan.host_if], ["-o", plan.host_if])
    # the only DNAT target is the apiserver on the host's loopback, the INPUT chain ends in DROP
    dnat = [r for t, _, r in rules if "DNAT" in r]
    assert dnat == [["-d", plan.host_ip, "-p", "tcp", "--dport", "6443", "-j", "DNAT",
                     "--to-destination", "127.0.0.1:6443"]]
    assert [r for _, c, r in rules if c == "RB12345-IN"][-1] == ["-j", "DROP"]
    assert [r for _, c, r in rules if c == "RB12345-FWD"] == [["-j", "DROP"]]


def test_a_range_the_host_routes_is_skipped(monkeypatch, tmp_path):
    state = tmp_path / ".devcluster"
    taken: set[int] = set()
    monkeypatch.setattr(network, "host_routes_overlap",
                        lambda net: int(net.split(".")[1]) in taken)
    octet = network.new_plan(state, ["devnode-1"]).octet
    taken.add(octet)
    second = network.new_plan(state, ["devnode-1"]).octet
    assert second != octet and 200 <= octet < 250 and 200 <= second < 250
