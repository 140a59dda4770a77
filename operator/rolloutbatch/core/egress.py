"""Declared egress (issue 15): the few destinations an episode may reach, plus cluster DNS.

``spec.isolation.egress`` takes NetworkPolicy egress rules (``networking.k8s.io/v1``: ``to``
peers and ``ports``) for the model endpoint an agent calls. The batch's policy then allows
exactly those peers and DNS, and still denies every other egress and all ingress. Peers that
open everything (an ipBlock wider than a /8 or an IPv6 /16 without ``except``, an empty
namespaceSelector alone) are
refused like an empty ``to``. A bare ``podSelector`` peer selects pods in the episodes' own
namespace (the sandbox ``rb-<uid10>`` in Dedicated mode), as NetworkPolicy defines it: an
endpoint elsewhere needs a ``namespaceSelector`` beside it. Only the shape
is checked here; the API server judges the rest when it validates the policy (a dry run, before
anything is created). Enforcement needs a CNI that implements NetworkPolicy.

DNS: port 53 (UDP and TCP) to the pods labelled ``k8s-app=kube-dns`` in ``kube-system`` (the
usual CoreDNS deployment), to any endpoint of the ``kube-system/kube-dns`` Service that is not a
pod (found at startup: the devcluster's CoreDNS runs beside the apiserver; a policy peer that
selects pods cannot name it), and to the CIDRs the operator is told of (``--dns-cidr``: e.g. a
node-local DNS cache's link-local address).
"""

from __future__ import annotations

import ipaddress

from collections.abc import Mapping, Sequence

from rolloutbatch.core.model import SpecError

MAX_RULES = 32
BROADEST_PREFIX = {4: 8, 6: 16}   # an ipBlock wider than this without except is refused
RULE_FIELDS = {"to", "ports"}
PEER_FIELDS = {"podSelector", "namespaceSelector", "ipBlock"}
PORT_FIELDS = {"protocol", "port", "endPort"}
PROTOCOLS = ("TCP", "UDP", "SCTP")
DNS_PEERS = ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
              "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},)


def _fields(value: object, allowed: set[str], where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise SpecError(where, f"must be an object, got {type(value).__name__}")
    unknown = set(value) - allowed
    if unknown:
        raise SpecError(where, f"unsupported fields: {', '.join(sorted(map(str, unknown)))}"[:200])
    return value


def _too_broad(cidr: object) -> bool:
    """A block wider than one /8 (IPv4) or /16 (IPv6): past any single network an endpoint
    lives in. ``0.0.0.0/1`` + ``128.0.0.0/1`` opened everything as surely as ``/0`` did."""
    try:
        network = ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return False    # not a CIDR: the API server's dry run of the policy says so
    return network.prefixlen < BROADEST_PREFIX[network.version]


def _refuse_everything(peer: Mapping, where: str) -> None:
    """Peers that, like an empty ``to``, open every destination are refused: the egress list
    names what an agent may reach (``network: AllowEgress`` is the honest way to open it all)."""
    block = peer.get("ipBlock")
    if isinstance(block, Mapping) and _too_broad(block.get("cidr")) and not block.get("except"):
        raise SpecError(f"{where}.ipBlock", f"{block.get('cidr')} is wider than a /{BROADEST_PREFIX[4]} (IPv4) or "
                                            f"/{BROADEST_PREFIX[6]} (IPv6) and opens nearly every address (the "
                                            "apiserver, the nodes, cloud metadata): name the endpoint's range, "
                                            "list what it must not reach under except, or use network: AllowEgress")
    if peer.get("namespaceSelector") == {} and not peer.get("podSelector"):
        raise SpecError(f"{where}.namespaceSelector", "an empty namespaceSelector alone opens every pod in the cluster: "
                                                      "select the endpoint's namespace and pods")


def parse_egress(raw: object) -> tuple[dict, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or len(raw) > MAX_RULES:
        raise SpecError("spec.isolation.egress", f"must be a list of at most {MAX_RULES} egress rules")
    rules = []
    for i, rule in enumerate(raw):
        where = f"spec.isolation.egress[{i}]"
        rule = _fields(rule, RULE_FIELDS, where)
        peers, ports = rule.get("to"), rule.get("ports")
        if not peers:
            # A rule without peers would open egress to everything on its ports.
            raise SpecError(f"{where}.to", "must name at least one peer (an empty `to` allows every destination)")
        if not isinstance(peers, (list, tuple)):
            raise SpecError(f"{where}.to", "must be a list of peers")
        for j, peer in enumerate(peers):
            peer = _fields(peer, PEER_FIELDS, f"{where}.to[{j}]")
            if not peer:
                raise SpecError(f"{where}.to[{j}]", "must set podSelector, namespaceSelector or ipBlock")
            _refuse_everything(peer, f"{where}.to[{j}]")
        if ports is not None:
            if not isinstance(ports, (list, tuple)):
                raise SpecError(f"{where}.ports", "must be a list of ports")
            for j, port in enumerate(ports):
                port = _fields(port, PORT_FIELDS, f"{where}.ports[{j}]")
                if port.get("protocol", "TCP") not in PROTOCOLS:
                    raise SpecError(f"{where}.ports[{j}].protocol", f"must be one of {', '.join(PROTOCOLS)}")
        rules.append({k: rule[k] for k in ("to", "ports") if rule.get(k) is not None})
    return tuple(rules)


def non_pod_dns_cidrs(slices: Sequence[Mapping]) -> tuple[str, ...]:
    """The kube-dns EndpointSlices' addresses that no pod selector covers, as /32 or /128."""
    out: set[str] = set()
    for sl in slices:
        suffix = {"IPv4": "/32", "IPv6": "/128"}.get(str(sl.get("addressType")))
        if suffix is None:
            continue
        for ep in sl.get("endpoints") or ():
            if ((ep.get("targetRef") or {}).get("kind")) == "Pod":
                continue
            out.update(f"{a}{suffix}" for a in ep.get("addresses") or () if isinstance(a, str) and a)
    return tuple(sorted(out))


def dns_rule(extra_cidrs: Sequence[str] = ()) -> dict:
    peers = [dict(p) for p in DNS_PEERS] + [{"ipBlock": {"cidr": c}} for c in extra_cidrs]
    return {"to": peers, "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
