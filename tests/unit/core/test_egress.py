"""Declared egress (issue 15): shape checks and the policy the batch gets."""
import pytest

from rolloutbatch.core import egress, manifests
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.spec import parse_spec

REF = BatchRef("team", "b", "0123456789abcdef", 1)
MODEL = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
                 "podSelector": {"matchLabels": {"app": "policy-server"}}}],
         "ports": [{"protocol": "TCP", "port": 8000}]}


def spec(**isolation):
    return parse_spec({"episodes": 1, "task": {"files": {"episode.py": "x"}}, "isolation": isolation})


def test_declared_egress_allows_its_rules_and_dns_only():
    policy = manifests.network_policy(REF, spec(egress=[MODEL]), dns_cidrs=("10.96.0.10/32",))["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in policy
    assert policy["egress"][0] == MODEL
    dns = policy["egress"][1]
    assert {p["port"] for p in dns["ports"]} == {53} and {p["protocol"] for p in dns["ports"]} == {"UDP", "TCP"}
    assert {"ipBlock": {"cidr": "10.96.0.10/32"}} in dns["to"]
    assert any(p.get("podSelector") == {"matchLabels": {"k8s-app": "kube-dns"}} for p in dns["to"])


def test_deny_all_without_egress_stays_sealed():
    policy = manifests.network_policy(REF, spec())["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and "egress" not in policy


@pytest.mark.parametrize("isolation,field", [
    ({"egress": [{"ports": [{"port": 80}]}]}, "spec.isolation.egress[0].to"),            # no peers = everywhere
    ({"egress": [{"to": []}]}, "spec.isolation.egress[0].to"),
    ({"egress": [{"to": [{}]}]}, "spec.isolation.egress[0].to[0]"),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "from": []}]}, "spec.isolation.egress[0]"),
    ({"egress": [{"to": [{"hostNetwork": True}]}]}, "spec.isolation.egress[0].to[0]"),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"protocol": "ICMP"}]}]},
     "spec.isolation.egress[0].ports[0].protocol"),
    ({"network": "AllowEgress", "egress": [MODEL]}, "spec.isolation.egress"),
    ({"egress": "everything"}, "spec.isolation.egress"),
])
def test_egress_shapes_that_are_refused(isolation, field):
    with pytest.raises(SpecError) as err:
        spec(**isolation)
    assert err.value.field == field


def test_dns_endpoints_that_are_not_pods_become_cidrs():
    slices = [
        {"addressType": "IPv4", "endpoints": [
            {"addresses": ["10.96.0.20"], "targetRef": {"kind": "Pod", "name": "coredns-1"}},  # the selector covers it
            {"addresses": ["10.9.0.1"]},                                                       # not a pod: named
            {"addresses": ["10.9.0.1"], "targetRef": {"kind": "Node"}}]},
        {"addressType": "IPv6", "endpoints": [{"addresses": ["fd00::a"]}]},
        {"addressType": "FQDN", "endpoints": [{"addresses": ["dns.example"]}]},              # no CIDR form
        {"endpoints": None}, {},
    ]
    assert egress.non_pod_dns_cidrs(slices) == ("10.9.0.1/32", "fd00::a/128")
    assert egress.non_pod_dns_cidrs([]) == ()


@pytest.mark.parametrize("peer, field", [
    ({"ipBlock": {"cidr": "0.0.0.0/0"}}, "ipBlock"), ({"ipBlock": {"cidr": "::/0"}}, "ipBlock"),
    ({"ipBlock": {"cidr": "0.0.0.0/1"}}, "ipBlock"), ({"ipBlock": {"cidr": "128.0.0.0/1"}}, "ipBlock"),
    ({"ipBlock": {"cidr": "10.0.0.0/7"}}, "ipBlock"), ({"ipBlock": {"cidr": "2000::/3"}}, "ipBlock"),
    ({"ipBlock": {"cidr": "169.254.169.254/0"}}, "ipBlock"),     # host bits set: still /0
    ({"namespaceSelector": {}}, "namespaceSelector")])
def test_peers_that_open_everything_are_refused(peer, field):
    with pytest.raises(SpecError) as err:
        spec(egress=[{"to": [peer]}])
    assert field in err.value.field


@pytest.mark.parametrize("peer", [
    {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16", "10.0.0.0/8"]}},
    {"ipBlock": {"cidr": "203.0.113.0/24"}}, {"ipBlock": {"cidr": "10.0.0.0/8"}},
    {"ipBlock": {"cidr": "fd00::/16"}},
    {"ipBlock": {"cidr": "not-a-cidr"}},          # left to the API server's dry run of the policy
    {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "policy-server"}}}])
def test_narrower_peers_pass(peer):
    assert spec(egress=[{"to": [peer]}]).egress
