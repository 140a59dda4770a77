"""core.egress, what the cluster can tell: an ipBlock of ClusterIPs is refused (policies match
after the Service's DNAT), and the selector peers to ask about, with the warning when one selects
no pod."""
import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import egress
from rolloutbatch.core.model import SpecError

SERVICES = ("10.96.0.0/12", "fd00:96::/112")


def block(cidr, *holes):
    return {"to": [{"ipBlock": {"cidr": cidr, **({"except": list(holes)} if holes else {})}}]}


@pytest.mark.parametrize("cidr", ["10.96.0.10/32", "10.100.0.0/16", "10.96.0.0/12", "fd00:96::a/128"])
def test_an_ip_block_of_cluster_ips_is_refused_and_says_why(cidr):
    rules = egress.parse_egress([{"to": [{"podSelector": {"matchLabels": {"a": "b"}}}]}, block(cidr)])
    with pytest.raises(SpecError) as err:
        egress.check_service_ips(rules, SERVICES)
    assert err.value.field == "spec.isolation.egress[1].to[0].ipBlock"
    text = str(err.value)
    assert cidr in text and "Service CIDR" in text and "DNAT" in text and "never matches" in text
    assert "podSelector/namespaceSelector" in text


@pytest.mark.parametrize("rule", [
    block("10.0.0.0/8"),                       # holds the Service CIDR, and pods, nodes: not only ClusterIPs
    block("10.95.255.255/32"), block("10.112.0.0/32"), block("203.0.113.0/24"),
    block("fd00:97::1/128"),
    block("10.96.0.0/11", "10.96.0.0/12"),     # its Service half excepted: what it admits is outside
])
def test_ip_blocks_that_admit_an_address_outside_pass(rule):
    egress.check_service_ips(egress.parse_egress([rule]), SERVICES)


@pytest.mark.parametrize("cidr", ["::ffff:10.96.0.10/128", "::ffff:10.100.0.0/112", "64:ff9b::10.96.0.10/128",
                                  "64:ff9b::a60:0/108"])
def test_a_cluster_ip_written_as_ipv4_in_ipv6_is_refused_like_its_ipv4_spelling(cidr):
    """An IPv4-mapped (::ffff:0:0/96) or NAT64 (64:ff9b::/96) block reaches the IPv4 it embeds,
    as the breadth bound already counts it; the Service-CIDR check compared it only with IPv6
    Service CIDRs and let ::ffff:10.96.0.10/128 (kube-dns's ClusterIP) through, where
    10.96.0.10/32 is refused."""
    with pytest.raises(SpecError) as err:
        egress.check_service_ips(egress.parse_egress([block(cidr)]), SERVICES)
    assert "Service CIDR 10.96.0.0/12" in str(err.value)


@pytest.mark.parametrize("rule", [
    block("::ffff:10.95.255.255/128"), block("64:ff9b::a00:0/104"),   # embedded IPv4 outside the Service CIDR
    block("::ffff:10.96.0.0/127", "::ffff:10.96.0.0/128", "::ffff:10.96.0.1/128"),   # nothing left of it
    block("::fffe:a60:a/128"),           # beside ::ffff:0:0/96: no IPv4 in it
])
def test_ipv4_in_ipv6_blocks_that_admit_an_address_outside_pass(rule):
    egress.check_service_ips(egress.parse_egress([rule]), SERVICES)


def test_what_is_excepted_does_not_count():
    # 10.80.0.0/11 minus its half outside the Service CIDR admits only ClusterIPs.
    with pytest.raises(SpecError):
        egress.check_service_ips(egress.parse_egress([block("10.64.0.0/10", "10.64.0.0/11", "10.112.0.0/12")]),
                                 SERVICES)


def test_without_a_service_cidr_nothing_is_refused():
    rules = egress.parse_egress([block("10.96.0.10/32")])
    egress.check_service_ips(rules, ())
    egress.check_service_ips(rules, ("not a cidr",))


@settings(max_examples=300, deadline=None, database=None)
@given(st.integers(0, 2**20 - 1), st.integers(12, 32), st.integers(0, 2**32 - 1), st.integers(8, 32))
def test_refused_exactly_when_every_address_is_a_cluster_ip(offset, length, address, outer):
    service = ipaddress.ip_network("10.96.0.0/12")
    inside = ipaddress.ip_network(f"{service.network_address + offset}/{length}", strict=False)
    with pytest.raises(SpecError):
        egress.check_service_ips(egress.parse_egress([block(str(inside))]), ("10.96.0.0/12",))
    other = ipaddress.ip_network(f"{ipaddress.ip_address(address)}/{outer}", strict=False)
    refused = other.subnet_of(service)
    try:
        egress.check_service_ips(egress.parse_egress([block(str(other))]), ("10.96.0.0/12",))
    except SpecError:
        assert refused
    else:
        assert not refused


def test_label_selectors_in_the_apis_syntax():
    assert egress.label_selector(None) == "" and egress.label_selector({}) == ""
    assert egress.label_selector({"matchLabels": {"b": "2", "a": "1"}}) == "a=1,b=2"
    assert egress.label_selector({"matchLabels": {"app": "m"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["x", "y"]}, {"key": "t", "operator": "NotIn", "values": ["z"]},
        {"key": "e", "operator": "Exists"}, {"key": "d", "operator": "DoesNotExist"}]}) == \
        "app=m,tier in (x,y),t notin (z),e,!d"


MODEL = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
         "podSelector": {"matchLabels": {"app": "policy-server"}}}


def test_each_selector_peer_is_probed_and_ip_blocks_are_not():
    rules = egress.parse_egress([
        {"to": [MODEL, {"ipBlock": {"cidr": "203.0.113.7/32"}}], "ports": [{"port": 8000}]},
        {"to": [{"podSelector": {"matchLabels": {"app": "proxy"}}},
                {"namespaceSelector": {"matchLabels": {"team": "ml"}}}]},
    ])
    assert egress.peer_probes(rules) == (
        egress.PeerProbe("spec.isolation.egress[0].to[0]", "kubernetes.io/metadata.name=models", "app=policy-server"),
        egress.PeerProbe("spec.isolation.egress[1].to[0]", None, "app=proxy"),
        egress.PeerProbe("spec.isolation.egress[1].to[1]", "team=ml", ""),
    )


def test_the_messages_say_what_matched_nothing():
    model, bare, ns_only = egress.peer_probes(egress.parse_egress([{"to": [
        MODEL, {"podSelector": {"matchLabels": {"app": "proxy"}}}, {"namespaceSelector": {"matchLabels": {"t": "x"}}}]}]))
    assert egress.empty_peer_message(model) == \
        "spec.isolation.egress[0].to[0]: namespaceSelector kubernetes.io/metadata.name=models matches no namespace"
    assert egress.empty_peer_message(model, namespaces=["models"]) == \
        "spec.isolation.egress[0].to[0]: podSelector app=policy-server matches no running pod in namespace models"
    sandbox = egress.empty_peer_message(bare, sandbox="rb-0123456789")
    assert "rb-0123456789" in sandbox and "only the episodes run" in sandbox and "add a namespaceSelector" in sandbox
    assert egress.empty_peer_message(ns_only, namespaces=list("abcde")) == \
        "spec.isolation.egress[0].to[2]: namespace a, b, c and 2 more (namespaceSelector t=x) has no running pod"
    warning = egress.empty_peers_warning(["m1", "m2"])
    assert warning.startswith("declared egress selects no pod at the start: m1; m2.")
    assert "runs on" in warning and len(egress.empty_peers_warning(["x" * 2000])) == 1000
