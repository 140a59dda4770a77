"""Declared egress: shape checks, what a peer can match, and the policy the batch gets."""
import ipaddress
import time

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rolloutbatch.core import egress, manifests, naming
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


def test_a_null_protocol_is_an_absent_one():
    """The API server reads a null protocol as absent, and defaults it to TCP: not refused, and
    kept as the server will store it (the policy found after a crash is then the one wanted)."""
    rule = {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"protocol": None, "port": 443}]}
    assert spec(egress=[rule]).egress == ({**rule, "ports": [{"protocol": "TCP", "port": 443}]},)
    with pytest.raises(SpecError):   # "" is no protocol, to the API server too
        spec(egress=[{**rule, "ports": [{"protocol": "", "port": 443}]}])


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
    {"ipBlock": {"cidr": "203.0.113.0/24"}}, {"ipBlock": {"cidr": "10.0.0.0/8"}},
    {"ipBlock": {"cidr": "fd00::/16"}},
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
     "podSelector": {"matchLabels": {"app": "policy-server"}}}])
def test_narrower_peers_pass(peer):
    assert spec(egress=[{"to": [peer]}]).egress


# What a selector can match, not how it is spelt.

NS_MODELS = {"matchLabels": {"kubernetes.io/metadata.name": "models"}}
POD_SERVER = {"matchLabels": {"app": "policy-server"}}
EXISTS_NAME = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "Exists"}]}
EVERYTHING = [                       # selectors that match every namespace (or every pod)
    {}, {"matchLabels": {}}, {"matchExpressions": []}, {"matchLabels": {}, "matchExpressions": []},
    EXISTS_NAME,
    {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                           "values": ["kube-system", "default"]}]},
    {"matchExpressions": [{"key": "nobody-has-this", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "NotIn", "values": ["x"]}]},
    {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "in", "values": ["models"]}]},
]


def refused(*peers, rules=None):
    with pytest.raises(SpecError) as err:
        spec(egress=rules if rules is not None else [{"to": list(peers)}])
    return err.value


@pytest.mark.parametrize("selector", EVERYTHING)
def test_a_namespace_selector_that_matches_every_namespace_is_refused(selector):
    assert refused({"namespaceSelector": selector}).field == "spec.isolation.egress[0].to[0].namespaceSelector"


@pytest.mark.parametrize("pods", [*EVERYTHING, POD_SERVER,
                                  {"matchExpressions": [{"key": "app", "operator": "In", "values": ["policy-server"]}]}])
@pytest.mark.parametrize("namespaces", [{}, {"matchLabels": {}}, EXISTS_NAME])
def test_no_pod_selector_narrows_an_everything_namespace_selector(namespaces, pods):
    # A pinned podSelector would not help: any namespace user may label its own pod app=policy-server
    # and receive the episodes' traffic.
    err = refused({"namespaceSelector": namespaces, "podSelector": pods})
    assert err.field == "spec.isolation.egress[0].to[0].namespaceSelector"
    assert "name the endpoint's namespace" in str(err) and "does not narrow" in str(err)


@pytest.mark.parametrize("pods", EVERYTHING)
def test_a_bare_pod_selector_that_matches_every_pod_is_refused(pods):
    # The episodes' own namespace: the neighbour episodes (Dedicated), other workloads (Shared).
    err = refused({"podSelector": pods})
    assert err.field == "spec.isolation.egress[0].to[0].podSelector" and "neighbour episodes" in str(err)
    # A null namespaceSelector is an absent one to the API server.
    assert refused({"podSelector": pods, "namespaceSelector": None}).field.endswith("podSelector")


# Labels the operator stamps on every episode and on every namespace it makes: they name nothing.
STAMPED = [{"matchLabels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}},
           {"matchLabels": {naming.LABEL_BATCH_NAME: "b"}},              # the batch's own name: known to its submitter
           {"matchLabels": {naming.LABEL_BATCH_UID: REF.uid, naming.LABEL_EPISODE_ROLE: "episode"}},
           {"matchLabels": {naming.LABEL_POOL_NAME: "warm"}},
           {"matchLabels": {"batch.kubernetes.io/job-name": "b"}},       # the Job controller's, for the operator
           {"matchLabels": {"pod-security.kubernetes.io/enforce": "restricted"}},
           {"matchExpressions": [{"key": naming.LABEL_MANAGED_BY, "operator": "In", "values": [naming.MANAGED_BY]}]}]


@pytest.mark.parametrize("pods", STAMPED)
def test_a_bare_pod_selector_on_the_operators_own_labels_is_refused(pods):
    # In a Dedicated sandbox only episodes run, and every one carries these: it is `podSelector: {}`.
    err = refused({"podSelector": pods})
    assert err.field == "spec.isolation.egress[0].to[0].podSelector" and "neighbour episodes" in str(err)


@pytest.mark.parametrize("namespaces", STAMPED)
@pytest.mark.parametrize("pods", [None, {}, POD_SERVER])
def test_a_namespace_selector_on_the_operators_own_labels_is_refused(namespaces, pods):
    # Every sandbox and pool namespace carries them: every other batch's episodes, every pool's pods.
    assert manifests.namespace(REF, spec())["metadata"]["labels"][naming.LABEL_MANAGED_BY] == naming.MANAGED_BY
    peer = {"namespaceSelector": namespaces, **({} if pods is None else {"podSelector": pods})}
    assert refused(peer).field == "spec.isolation.egress[0].to[0].namespaceSelector"


def test_a_selector_pinned_beside_the_operators_labels_passes():
    # the operator's labels narrow nothing, nor do they widen: the endpoint's own label pins
    stamped = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
    assert spec(egress=[{"to": [{"namespaceSelector": {"matchLabels": {**stamped, **NS_MODELS["matchLabels"]}}}]}]).egress
    assert spec(egress=[{"to": [{"podSelector": {"matchLabels": {**stamped, "app": "policy-server"}}}]}]).egress


def test_only_one_peer_of_a_rule_need_be_too_broad():
    err = refused(rules=[MODEL, {"to": [{"ipBlock": {"cidr": "203.0.113.10/32"}}, {"namespaceSelector": EXISTS_NAME}]}])
    assert err.field == "spec.isolation.egress[1].to[1].namespaceSelector"


@pytest.mark.parametrize("peer, field", [
    ({"namespaceSelector": "all"}, "namespaceSelector"),
    ({"namespaceSelector": {"matchLabels": ["models"]}}, "namespaceSelector.matchLabels"),
    ({"namespaceSelector": {"matchExpressions": {"key": "a", "operator": "In"}}}, "namespaceSelector.matchExpressions"),
    ({"podSelector": {"matchLabel": {"app": "x"}}}, "podSelector"),          # misspelt: would mean everything
    ({"podSelector": {"matchExpressions": ["app"]}}, "podSelector.matchExpressions[0]"),
    ({"namespaceSelector": None}, ""), ({"ipBlock": None}, ""),                # null is absent: no peer at all
])
def test_selectors_that_cannot_be_read_are_refused(peer, field):
    assert refused(peer).field == "spec.isolation.egress[0].to[0]" + (f".{field}" if field else "")


@pytest.mark.parametrize("selector, field", [
    ({"matchExpressions": [{"key": ["app"], "operator": "In", "values": ["x"]}]}, "matchExpressions[0].key"),
    ({"matchExpressions": [{"key": {"a": "b"}, "operator": "In", "values": ["x"]}]}, "matchExpressions[0].key"),
    ({"matchExpressions": [{"operator": "Exists"}]}, "matchExpressions[0].key"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": [["x"]]}]}, "matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": "x"}]}, "matchExpressions[0].values"),
    ({"matchLabels": {"app": ["x"]}}, "matchLabels"), ({"matchLabels": {"app": 1}}, "matchLabels"),
])
def test_selector_keys_and_values_that_are_not_strings_are_refused_naming_the_field(selector, field):
    """The CRD keeps egress peers schemaless (preserve-unknown-fields), so any JSON reaches the
    check: a list or an object as an expression's key raised TypeError (unhashable, looked up in
    the stamped labels), an InternalError of the reconciler instead of InvalidSpec, and non-string
    values reached label_selector, which joins them."""
    for peer, at in (({"namespaceSelector": NS_MODELS, "podSelector": selector}, "podSelector"),
                     ({"namespaceSelector": selector}, "namespaceSelector")):
        assert refused(peer).field == f"spec.isolation.egress[0].to[0].{at}.{field}"


@pytest.mark.parametrize("peer", [
    {"namespaceSelector": NS_MODELS},                                      # every pod of one named namespace
    {"namespaceSelector": NS_MODELS, "podSelector": {}},
    {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                 "values": ["models", "models-canary"]}]}},
    {"namespaceSelector": {**EXISTS_NAME, "matchLabels": {"team": "inference"}}},   # ANDed: the label pins
    {"namespaceSelector": NS_MODELS, "podSelector": POD_SERVER},
    {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                 "values": ["models"]}]},
     "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["policy-server"]}]}},
    {"podSelector": POD_SERVER},                                           # a named pod of the own namespace
    {"podSelector": POD_SERVER, "namespaceSelector": None},
])
def test_selectors_that_name_what_they_reach_pass(peer):
    assert spec(egress=[{"to": [peer]}]).egress


# The addresses all ipBlocks admit together.

def block(cidr, *excepts):
    return {"ipBlock": {"cidr": cidr, **({"except": list(excepts)} if excepts else {})}}


def spread(peers, per_rule=egress.MAX_PEERS):
    return [{"to": peers[i:i + per_rule]} for i in range(0, len(peers), per_rule)]


@pytest.mark.parametrize("rules, field", [
    (spread([block(f"{i}.0.0.0/8") for i in range(256)]), "spec.isolation.egress[0].to[1].ipBlock"),
    ([{"to": [block("10.0.0.0/8")]}, {"to": [block("11.0.0.0/8")]}], "spec.isolation.egress[1].to[0].ipBlock"),
    ([{"to": [block("0.0.0.0/0", "10.96.0.1/32")]}], "spec.isolation.egress[0].to[0].ipBlock"),
    ([{"to": [block("0.0.0.0/0", "169.254.0.0/16", "10.0.0.0/8")]}], "spec.isolation.egress[0].to[0].ipBlock"),
    ([{"to": [block("10.0.0.0/7", "10.0.0.0/9")]}], "spec.isolation.egress[0].to[0].ipBlock"),
    ([{"to": [block("10.0.0.0/7", "12.0.0.0/8")]}], "spec.isolation.egress[0].to[0].ipBlock"),  # except outside
    ([{"to": [block("0.0.0.0/0", "::/1")]}], "spec.isolation.egress[0].to[0].ipBlock"),      # except of other family
    ([{"to": [block("10.0.0.0/8"), block("10.0.0.0/7")]}], "spec.isolation.egress[0].to[1].ipBlock"),
    (spread([block(f"10.{16 * i}.0.0/12") for i in range(16)] + [block("11.0.0.0/12")]),
     "spec.isolation.egress[1].to[0].ipBlock"),                                                # small blocks add up
    ([{"to": [block("::/0", "::/1")]}], "spec.isolation.egress[0].to[0].ipBlock"),
    ([{"to": [block("::/0", "fd00::1/128")]}], "spec.isolation.egress[0].to[0].ipBlock"),
    ([{"to": [block("fd00::/16"), block("fd01::/16")]}], "spec.isolation.egress[0].to[1].ipBlock"),
    ([{"to": [block("fd00::/16")]}, {"to": [block("10.0.0.0/8"), block("fe00::/16")]}],
     "spec.isolation.egress[1].to[1].ipBlock"),                                                # per family
    ([{"to": [block("::ffff:0.0.0.0/96")]}], "spec.isolation.egress[0].to[0].ipBlock"),     # IPv4-mapped
    ([{"to": [block("10.0.0.0/8"), block("::ffff:11.0.0.0/104")]}], "spec.isolation.egress[0].to[1].ipBlock"),
    ([{"to": [block("64:ff9b::/96")]}], "spec.isolation.egress[0].to[0].ipBlock"),          # NAT64
    ([{"to": [block("2002::/16")]}], "spec.isolation.egress[0].to[0].ipBlock"),             # relays: 6to4,
    ([{"to": [block("2001::/32")]}], "spec.isolation.egress[0].to[0].ipBlock"),             # Teredo,
    ([{"to": [block("64:ff9b:1::/48")]}], "spec.isolation.egress[0].to[0].ipBlock"),        # NAT64 local-use
    ([{"to": [block("10.1.2.3/7")]}], "spec.isolation.egress[0].to[0].ipBlock"),            # host bits
    ([{"to": [block("000.0.0.0/0")]}], "spec.isolation.egress[0].to[0].ipBlock.cidr"),      # Go reads it as /0
    ([{"to": [block("not-a-cidr")]}], "spec.isolation.egress[0].to[0].ipBlock.cidr"),
    ([{"to": [{"ipBlock": {"cidr": 10}}]}], "spec.isolation.egress[0].to[0].ipBlock.cidr"),
    ([{"to": [{"ipBlock": {"except": ["10.0.0.0/9"]}}]}], "spec.isolation.egress[0].to[0].ipBlock.cidr"),
    ([{"to": [block("10.0.0.0/8", "10.0.0.0/33")]}], "spec.isolation.egress[0].to[0].ipBlock.except[0]"),
    ([{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": "10.0.0.0/8"}}]}],
     "spec.isolation.egress[0].to[0].ipBlock.except"),
    ([{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "exclude": ["10.0.0.0/9"]}}]}], "spec.isolation.egress[0].to[0].ipBlock"),
])
def test_ip_blocks_that_admit_more_than_one_network_together_are_refused(rules, field):
    err = refused(rules=rules)
    assert err.field == field
    if not field.endswith(("cidr", "]", "except")) and "exclude" not in str(err):
        assert "network: AllowEgress" in str(err) and "name the endpoint's range" in str(err)


@pytest.mark.parametrize("rules", [
    [{"to": [block("10.0.0.0/8")]}],
    [{"to": [block("203.0.113.10/32")], "ports": [{"protocol": "TCP", "port": 443}]}],  # a hosted model API
    [{"to": [block("10.0.0.0/8"), block("10.0.0.0/8"), block("10.1.0.0/16")]}, {"to": [block("10.0.0.0/8")]}],
    [{"to": [block("10.0.0.0/8"), block("fd00::/16")]}],                                    # one of each family
    [{"to": [block("10.0.0.0/7", "11.0.0.0/8")]}],
    [{"to": [block("0.0.0.0/0", "128.0.0.0/1", "64.0.0.0/2", "32.0.0.0/3", "16.0.0.0/4", "0.0.0.0/5",
                   "12.0.0.0/6", "8.0.0.0/7", "11.0.0.0/8")]}],                             # carved to 10/8
    spread([block(f"10.{16 * i}.0.0/12") for i in range(16)]),                             # exactly one /8
    [{"to": [block("::/0", "8000::/1", "4000::/2", "2000::/3", "1000::/4", "800::/5", "400::/6", "200::/7",
                   "100::/8", "80::/9", "40::/10", "20::/11", "10::/12", "8::/13", "4::/14", "2::/15",
                   "::/16")]}],                                                            # carved to 1::/16
    [{"to": [block("::ffff:10.0.0.0/104")]}],
    [{"to": [block("192.168.0.0/16")]}, MODEL],
])
def test_ip_blocks_within_one_network_pass(rules):
    assert spec(egress=rules).egress == tuple(rules)


@pytest.mark.parametrize("cidr, excepts", [
    ("2002::/16", ()), ("2002:cb00:710a::/48", ()), ("2002::1/128", ()),          # 6to4 of one address, or less
    ("2001::/32", ()), ("2001:0:4136:e378:8000:63bf:3fff:fdd2/128", ()),         # Teredo, one client
    ("2001::/16", ()), ("2001::/31", ()), ("2000::/15", ("2000::/16",)),        # around them
    ("64:ff9b:1::/48", ()), ("64:ff9b:1:a::/64", ()), ("64:ff9b::/47", ("64:ff9b::/96",)),
    ("2001::/16", ("2001::/33",)),                                               # half of Teredo is left
])
def test_ip_blocks_that_reach_an_ipv4_relay_count_as_all_of_ipv4(cidr, excepts):
    # The relay decides which IPv4 address it forwards to: the block is refused, however narrow.
    err = refused(block(cidr, *excepts))
    assert err.field == "spec.isolation.egress[0].to[0].ipBlock"
    assert "relay" in str(err) and "all of IPv4" in str(err) and "network: AllowEgress" in str(err)
    # Also after a block that passes alone, with the message naming the relay block.
    err = refused(block("203.0.113.10/32"), block(cidr, *excepts))
    assert err.field == "spec.isolation.egress[0].to[1].ipBlock" and "relay" in str(err)


@pytest.mark.parametrize("cidr, excepts", [
    ("2001:db8::/32", ()), ("2003::/16", ()), ("2001:1::/32", ()),               # beside them
    ("64:ff9b:2::/48", ()), ("64:ff9b::a00:1/128", ()),                          # NAT64 well-known: one address
    ("2001::/16", ("2001::/32",)),                                               # Teredo carved out
])
def test_ip_blocks_beside_the_ipv4_relays_pass(cidr, excepts):
    assert spec(egress=[{"to": [block(cidr, *excepts)]}]).egress


def test_the_operator_dns_peers_are_not_counted():
    # A /8 is the whole allowance; the DNS rule the operator adds beside it is its own.
    policy = manifests.network_policy(REF, spec(egress=[{"to": [block("10.0.0.0/8")]}]),
                                      dns_cidrs=("169.254.20.10/32", "172.16.0.10/32"))["spec"]
    assert {"ipBlock": {"cidr": "169.254.20.10/32"}} in policy["egress"][-1]["to"]


def test_peers_and_excepts_per_rule_are_bounded():
    too_many = [block(f"10.0.{i}.0/24") for i in range(egress.MAX_PEERS + 1)]
    assert refused(rules=[{"to": too_many}]).field == "spec.isolation.egress[0].to"
    holes = [block("10.0.0.0/8", *(f"10.{i}.0.0/16" for i in range(9))),
             block("11.0.0.0/9", *(f"11.{i}.0.0/16" for i in range(egress.MAX_EXCEPTS - 8)))]
    assert refused(rules=[{"to": holes}]).field == "spec.isolation.egress[0].to[1].ipBlock.except"


def test_the_largest_allowed_input_is_checked_in_milliseconds():
    # Every rule full of distinct IPv6 blocks with excepts: parsing dominates; and the refused
    # variant searches for the culprit block.
    def full(prefix):
        def net(i, j, length):
            return str(ipaddress.IPv6Network((((0xfc00 + i * egress.MAX_PEERS + j) << 112) | 1 << 64, length),
                                             strict=False))
        return [{"to": [block(net(i, j, prefix), net(i, j, 100)) for j in range(egress.MAX_PEERS)]}
                for i in range(egress.MAX_RULES)]
    # CPU time of this process, not wall time: a busy machine must not fail it, a blow-up must.
    for rules, ok in ((full(80), True), (full(16), False)):
        started = time.process_time()
        try:
            egress.parse_egress(rules)
            assert ok
        except SpecError:
            assert not ok
        assert time.process_time() - started < 0.5


# Property: the check is exact. Computed independently: IPv4 by counting /12 cells (every
# generated prefix is at most 12 long), IPv6 with ipaddress's own set operations.

CELL = 12


def v4_cells(blocks):
    def span(cidr):                 # the cells a network covers, as (top bits, prefix length)
        net = ipaddress.IPv4Network(cidr)
        return int(net.network_address) >> (32 - net.prefixlen), net.prefixlen

    def inside(cell, top_length):
        top, length = top_length
        return cell >> (CELL - length) == top
    nets = [(span(c), [span(e) for e in ex if ":" not in e]) for c, ex in blocks]
    return sum(1 for cell in range(2 ** CELL)
               if any(inside(cell, c) and not any(inside(cell, e) for e in ex) for c, ex in nets))


def v6_addresses(blocks):
    kept = []
    for cidr, excepts in blocks:
        parts = [ipaddress.IPv6Network(cidr)]
        for e in (ipaddress.ip_network(e) for e in excepts):
            if e.version != 6:
                continue
            parts = [q for p in parts for q in (
                [] if p.subnet_of(e) else list(p.address_exclude(e)) if e.subnet_of(p) else [p])]
        kept += parts
    return sum(n.num_addresses for n in ipaddress.collapse_addresses(kept))


def v4_net(prefixes):
    return st.builds(lambda a, p: str(ipaddress.IPv4Network((a, p), strict=False)), st.integers(0, 2 ** 32 - 1), prefixes)


def v6_net(prefixes):              # under fd00::/8: clear of the prefixes that embed IPv4
    return st.builds(lambda a, p: str(ipaddress.IPv6Network(((0xfd << 120) | a, p), strict=False)),
                     st.integers(0, 2 ** 120 - 1), prefixes)


def v4_prefix():                   # as often inside the bound as past it
    return st.one_of(st.integers(0, 12), st.integers(9, 12))


def v4_blocks():
    return st.lists(st.tuples(v4_net(v4_prefix()), st.lists(st.one_of(v4_net(v4_prefix()), v6_net(st.integers(8, 24))),
                                                            max_size=3)), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(v4=v4_blocks(), split=st.integers(1, 4),
       v6=st.lists(st.tuples(v6_net(st.integers(14, 20)), st.lists(v6_net(st.integers(8, 24)), max_size=3)), max_size=4))
def test_accepted_ip_blocks_admit_at_most_one_network(v4, v6, split):
    blocks = v4 + v6
    peers = [block(c, *ex) if ex else block(c) for c, ex in blocks]
    rules = [{"to": peers[i:i + split]} for i in range(0, len(peers), split)]
    within = v4_cells(v4) * 2 ** (32 - CELL) <= 2 ** 24 and v6_addresses(v6) <= 2 ** 112
    try:
        spec(egress=rules)
        accepted = True
    except SpecError as err:
        assert err.field.endswith(".ipBlock") and "AllowEgress" in str(err)
        accepted = False
    assert accepted == within
    event(f"accepted={accepted}")


@settings(max_examples=100, deadline=None)
@given(relay=st.sampled_from(egress.IPV4_RELAYS), offset=st.integers(0, 2 ** 112 - 1), length=st.integers(16, 128))
def test_any_block_inside_or_around_an_ipv4_relay_is_refused(relay, offset, length):
    net = ipaddress.IPv6Network(relay)
    address = int(net.network_address) + offset % net.num_addresses
    cidr = str(ipaddress.IPv6Network((address, max(length, 16)), strict=False))
    err = refused(block(cidr))
    assert err.field == "spec.isolation.egress[0].to[0].ipBlock" and "relay" in str(err)
