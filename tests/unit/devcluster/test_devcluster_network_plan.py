"""devcluster.network's address plan and names, the sandbox's netns entry, pods' resolv.conf (pure)."""
from __future__ import annotations

import ipaddress

from devcluster import network
from devcluster.nodeagent.pods import resolv_conf
from devcluster.nodeagent.sandbox import SandboxSpec, build_argv

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


def test_sandbox_enters_the_pods_netns_instead_of_a_fresh_one():
    argv = build_argv(SandboxSpec(argv=["x"], hostname="p", netns="/run/netns/rb1-devnode-1-u"))
    assert argv[:2] == ["nsenter", "--net=/run/netns/rb1-devnode-1-u"] and argv[2] == "bwrap"
    assert "--unshare-net" not in argv and "--unshare-pid" in argv


def _pod(**spec):
    return {"metadata": {"namespace": "team"}, "spec": spec}


def test_resolv_conf_follows_dns_policy():
    assert resolv_conf(_pod(), "10.217.1.10") == (
        "nameserver 10.217.1.10\n"
        "search team.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")
    assert "nameserver" not in resolv_conf(_pod(hostNetwork=True), "10.217.1.10")
    assert "nameserver 10.217.1.10" in resolv_conf(
        _pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"), "10.217.1.10")
    assert "nameserver" not in resolv_conf(_pod(dnsPolicy="Default"), "10.217.1.10")
    assert "nameserver" not in resolv_conf(_pod(), None)
    custom = resolv_conf(_pod(dnsPolicy="None", dnsConfig={
        "nameservers": ["10.217.1.53"], "searches": ["x.local"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}), "10.217.1.10")
    assert custom == "nameserver 10.217.1.53\nsearch x.local\noptions ndots:2 edns0\n"
    extra = resolv_conf(_pod(dnsConfig={"searches": ["x.local"]}), "10.217.1.10")
    assert "search team.svc.cluster.local svc.cluster.local cluster.local x.local\n" in extra


def test_policy_gate_reads_kube_routers_pod_jumps():
    from devcluster.nodeagent.cni import PolicyGate
    rules = "\n".join([
        "-A KUBE-ROUTER-FORWARD -d 10.217.128.2/32 -m comment --comment \"rule to jump traffic destined to POD "
        "name:gate-x namespace: default to chain KUBE-POD-FW-P3LDNKOK4HLARPXS\" -j KUBE-POD-FW-P3LDNKOK4HLARPXS",
        "-A KUBE-ROUTER-FORWARD -s 10.217.128.2/32 -m comment --comment \"rule to jump traffic from POD "
        "name:gate-x namespace: default to chain KUBE-POD-FW-P3LDNKOK4HLARPXS\" -j KUBE-POD-FW-P3LDNKOK4HLARPXS",
        "-A KUBE-ROUTER-INPUT -s 10.217.128.3/32 -m comment --comment \"rule to jump traffic from POD "
        "name:other namespace: default to chain KUBE-POD-FW-AAAA\" -j KUBE-POD-FW-AAAA",
    ])
    # only the FORWARD jump of a pod's own egress counts (written with all its other rules)
    assert PolicyGate("ns").programmed(rules) == {("10.217.128.2", "gate-x", "default")}
