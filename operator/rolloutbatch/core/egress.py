"""Declared egress: the few destinations an episode may reach, plus cluster DNS.

``spec.isolation.egress`` takes NetworkPolicy egress rules (``networking.k8s.io/v1``: ``to``
peers and ``ports``) for the model endpoint an agent calls. The batch's policy then allows
exactly those peers and DNS, and still denies every other egress and all ingress.

The egress list must name what it opens; what a peer can match is judged, not its spelling:

- a label selector *pins* only with a ``matchLabels`` entry or an ``In`` expression with values
  (``Exists``, ``NotIn`` and ``DoesNotExist`` only exclude: every namespace has
  ``kubernetes.io/metadata.name``). A ``namespaceSelector`` must pin itself, whatever the
  ``podSelector`` beside it says: pod labels are any namespace user's to write, so a neighbour
  could label its own pod like the endpoint and receive the episodes' traffic; namespace labels
  are the cluster admin's. Labels the operator stamps (``naming.STAMPED_LABELS``: managed-by,
  the batch's and the pool's name and uid, the role, the Job controller's, Pod Security's) do not
  pin: every episode carries them, and every sandbox and pool namespace, so a podSelector on them
  is ``{}`` in a Dedicated sandbox and a namespaceSelector on them reaches every other batch's
  episodes and every pool's pods. A bare ``podSelector`` (the episodes' own namespace: the sandbox
  ``rb-<uid10>`` in Dedicated mode) must pin, or it would reach the neighbour episodes (Shared:
  every other workload of the namespace). An endpoint elsewhere needs a pinned
  ``namespaceSelector`` beside its ``podSelector``.
- the addresses all ipBlocks admit together (each ``cidr`` minus its ``except``, over every
  rule, ports aside) may not exceed one /8 of IPv4 or one /16 of IPv6; IPv6 blocks that embed
  IPv4 (``::ffff:0:0/96``, NAT64 ``64:ff9b::/96``) count as the IPv4 they reach, and a block
  that admits any address of a relay prefix (6to4 ``2002::/16``, Teredo ``2001::/32``, NAT64
  local-use ``64:ff9b:1::/48``) counts as all of IPv4, so it is refused. Unparsable CIDRs are
  refused rather than guessed at.

The accepted rules are returned as the API server will store them (``canonical_rule``: no null
or empty fields, ports' protocol TCP unless given), so the policy the operator finds again after a
crash is the one it wants. An empty ``to`` is refused for the same reason. At most MAX_RULES rules, MAX_PEERS peers and
MAX_EXCEPTS ``except`` entries per rule keep the check to milliseconds. The API server judges
the rest when it validates the policy (a dry run, before anything is created); enforcement needs
a CNI that implements NetworkPolicy.

Two mistakes look, from the episodes, like a model that refuses connections (their episodes are
graded or lost with "Connection refused" and nothing else to go on), so the operator says them:

- an ipBlock inside the cluster's **Service CIDR** (a ClusterIP, ``check_service_ips``; written
  IPv4-mapped or NAT64, it is the IPv4 it embeds, as for the breadth): a
  NetworkPolicy matches the destination after the Service's DNAT, the backing pod's IP, so a
  ClusterIP in an ipBlock never matches anything. Refused before anything is created; the
  Service CIDR is read from the cluster (ServiceCIDR objects) or given to the operator.
- a selector peer that **selects no pod** when the batch starts (``peer_probes``,
  ``empty_peer_message``): a typo, a bare podSelector (which means the episodes' own namespace),
  a model server not up yet. Only a warning (an Event and the Running status message): the
  server may come up later, and a batch is never ended on a guess.

DNS: port 53 (UDP and TCP) to the pods labelled ``k8s-app=kube-dns`` in ``kube-system`` (the
usual CoreDNS deployment), to any endpoint of the ``kube-system/kube-dns`` Service that is not a
pod (found at startup: the devcluster's CoreDNS runs beside the apiserver; a policy peer that
selects pods cannot name it), and to the CIDRs the operator is told of (``--dns-cidr``: e.g. a
node-local DNS cache's link-local address). The operator adds these itself, after the checks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rolloutbatch.core import naming
from rolloutbatch.core.model import SpecError

MAX_RULES = 32
MAX_PEERS = 16      # per rule
MAX_EXCEPTS = 16    # per rule, over all its ipBlocks
BROADEST_PREFIX = {4: 8, 6: 16}   # all ipBlocks together may admit at most one network this wide
BOUND = {4: 2 ** (32 - BROADEST_PREFIX[4]), 6: 2 ** (128 - BROADEST_PREFIX[6])}
# IPv6 ranges whose last 32 bits are an IPv4 address some stacks reach: IPv4-mapped (Go's
# net.IPNet.Contains matches IPv4 against it) and the NAT64 well-known prefix.
EMBEDDED_IPV4 = tuple(int(ipaddress.IPv6Network(n).network_address) for n in ("::ffff:0:0/96", "64:ff9b::/96"))
# IPv6 ranges a relay forwards to an IPv4 address the destination carries: 6to4 (bits 16..48),
# Teredo (the last 32 bits, obfuscated), NAT64 local-use (where depends on the translator's prefix
# length). Which IPv4 a block of them reaches is the relay's to decide: any address counts as all.
IPV4_RELAYS = ("2002::/16", "2001::/32", "64:ff9b:1::/48")
_RELAY_SPANS = tuple((int(n.network_address), int(n.broadcast_address))
                     for n in map(ipaddress.IPv6Network, IPV4_RELAYS))
RULE_FIELDS = {"to", "ports"}
PEER_FIELDS = {"podSelector", "namespaceSelector", "ipBlock"}
SELECTOR_FIELDS = {"matchLabels", "matchExpressions"}
EXPRESSION_FIELDS = {"key", "operator", "values"}
IPBLOCK_FIELDS = {"cidr", "except"}
PORT_FIELDS = {"protocol", "port", "endPort"}
PROTOCOLS = ("TCP", "UDP", "SCTP")
DNS_PEERS = ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
              "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},)
STAMPED_EXAMPLES = f"{naming.LABEL_MANAGED_BY}, {naming.LABEL_BATCH_NAME} and the like"
TO_NAME = "name the endpoint's range (e.g. its /32), or use network: AllowEgress to open all egress"


def _fields(value: object, allowed: set[str], where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise SpecError(where, f"must be an object, got {type(value).__name__}")
    unknown = set(value) - allowed
    if unknown:
        raise SpecError(where, f"unsupported fields: {', '.join(sorted(map(str, unknown)))}"[:200])
    return value


def _pins(selector: object, where: str) -> bool:
    """Whether a label selector confines what it matches to pods or namespaces carrying a label
    it names: a matchLabels entry or an ``In`` expression with values (requirements are ANDed,
    so one suffices). ``{}``, ``{matchLabels: {}}`` and Exists/NotIn/DoesNotExist match all; so
    do, here, the labels the operator stamps (naming.STAMPED_LABELS): every episode and every
    namespace it makes carries them."""
    selector = _fields(selector, SELECTOR_FIELDS, where)
    labels, expressions = selector.get("matchLabels"), selector.get("matchExpressions")
    if labels is not None and not isinstance(labels, Mapping):
        raise SpecError(f"{where}.matchLabels", "must be an object of label: value")
    if expressions is not None and not isinstance(expressions, (list, tuple)):
        raise SpecError(f"{where}.matchExpressions", "must be a list of {key, operator, values}")
    # The CRD keeps peers schemaless (preserve-unknown-fields): any JSON reaches here, and a list
    # or an object as a key is no label to look up. Only the types; the API server's dry run of
    # the policy judges the rest of the label syntax.
    for key, value in (labels or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise SpecError(f"{where}.matchLabels", "must map label names to string values")
    pinned = any(key not in naming.STAMPED_LABELS for key in labels or ())
    for k, expr in enumerate(expressions or ()):
        at = f"{where}.matchExpressions[{k}]"
        expr = _fields(expr, EXPRESSION_FIELDS, at)
        key, values = expr.get("key"), expr.get("values")
        if not isinstance(key, str):
            raise SpecError(f"{at}.key", "must be a label name (a string)")
        if values is not None and (not isinstance(values, (list, tuple))
                                   or not all(isinstance(x, str) for x in values)):
            raise SpecError(f"{at}.values", "must be a list of strings")
        pinned |= expr.get("operator") == "In" and bool(values) and key not in naming.STAMPED_LABELS
    return pinned


def _check_selectors(peer: Mapping, where: str) -> None:
    pods = _pins(peer["podSelector"], f"{where}.podSelector") if "podSelector" in peer else None
    if "namespaceSelector" in peer:
        # Not narrowed by a podSelector: any namespace user may give its own pod the same labels.
        if not _pins(peer["namespaceSelector"], f"{where}.namespaceSelector"):
            raise SpecError(f"{where}.namespaceSelector",
                            "matches every namespace (it has no matchLabels entry or In expression; Exists, "
                            "NotIn and DoesNotExist only exclude), or every namespace the operator makes (it names "
                            f"only labels the operator stamps: {STAMPED_EXAMPLES}), and a podSelector beside it "
                            "does not narrow "
                            "it: a pod anyone labels alike in their own namespace would receive the episodes' "
                            "traffic; name the endpoint's namespace, e.g. matchLabels: "
                            "{kubernetes.io/metadata.name: <namespace>}")
    elif pods is False:
        raise SpecError(f"{where}.podSelector",
                        "matches every pod of the episodes' own namespace (it has no matchLabels entry or In "
                        "expression other than on labels the operator stamps on every episode: "
                        f"{STAMPED_EXAMPLES}): the neighbour episodes in a Dedicated sandbox, every other workload in a "
                        "Shared namespace. Select the endpoint's pods by their labels, with a namespaceSelector "
                        "beside it for an endpoint elsewhere")


def _network(cidr: object, where: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    # Refused, not left to the API server: Go also parses forms Python does not ("010.0.0.0/8"),
    # and a block this check cannot read is a block it cannot bound.
    try:
        if not isinstance(cidr, str):
            raise ValueError(cidr)
        family = ipaddress.IPv6Network if ":" in cidr else ipaddress.IPv4Network   # one parse, not two
        return family(cidr, strict=False)
    except ValueError:
        raise SpecError(where, f"must be a CIDR such as 203.0.113.10/32 or fd00::/64, got {str(cidr)[:60]!r}") from None


def _admitted(block: Mapping, where: str) -> list[tuple[int, int, int]]:
    """The (family, first, last) address intervals an ipBlock admits: its cidr minus its excepts.
    An except outside the cidr, or of the other family, excludes nothing."""
    net = _network(block.get("cidr"), f"{where}.cidr")
    lo, hi = int(net.network_address), int(net.broadcast_address)
    holes = []
    for k, text in enumerate(block.get("except") or ()):
        ex = _network(text, f"{where}.except[{k}]")
        if ex.version == net.version:
            a, b = max(lo, int(ex.network_address)), min(hi, int(ex.broadcast_address))
            if a <= b:
                holes.append((a, b))
    out, cur = [], lo
    for a, b in sorted(holes):
        if a > cur:
            out.append((net.version, cur, a - 1))
        cur = max(cur, b + 1)
    if cur <= hi:
        out.append((net.version, cur, hi))
    return out


def _split_embedded(a: int, b: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """The IPv6 interval [a, b] as the IPv4 its EMBEDDED_IPV4 parts reach, and its other parts
    (still IPv6). The one reading of an embedded block, for the breadth bound and the
    Service-CIDR check alike."""
    ipv4, ipv6, cur = [], [], a
    for base in sorted(EMBEDDED_IPV4):
        x, y = max(a, base), min(b, base + 2 ** 32 - 1)
        if x <= y:
            ipv4.append((4, x - base, y - base))
            if cur < x:
                ipv6.append((6, cur, x - 1))
            cur = y + 1
    if cur <= b:
        ipv6.append((6, cur, b))
    return ipv4, ipv6


def _union_sizes(intervals: Sequence[tuple[int, int, int]]) -> dict[int, int]:
    """How many addresses of each family the intervals cover together (overlaps once)."""
    spans = list(intervals)
    for version, a, b in intervals:
        if version == 6:
            if _relays(a, b):
                spans.append((4, 0, 2 ** 32 - 1))
            spans.extend(_split_embedded(a, b)[0])
    sizes, end = {4: 0, 6: 0}, {4: -1, 6: -1}
    for version, a, b in sorted(spans):
        a = max(a, end[version] + 1)
        if a <= b:
            sizes[version] += b - a + 1
            end[version] = b
    return sizes


def _relays(a: int, b: int) -> bool:
    return any(a <= y and x <= b for x, y in _RELAY_SPANS)


def _over(sizes: Mapping[int, int]) -> int | None:
    return next((v for v in (4, 6) if sizes[v] > BOUND[v]), None)


def _check_breadth(blocks: Sequence[tuple[str, Mapping, list]]) -> None:
    """Refuses ipBlocks that admit more than one /8 (IPv4) or /16 (IPv6) together, naming the
    block at which the union (in spec order) first gets too wide."""
    flat = [iv for _, _, ivs in blocks for iv in ivs]
    if _over(_union_sizes(flat)) is None:
        return
    lo, hi = 1, len(blocks)             # the union only grows: find the first prefix over the bound
    while lo < hi:
        mid = (lo + hi) // 2
        if _over(_union_sizes([iv for _, _, ivs in blocks[:mid] for iv in ivs])) is None:
            lo = mid + 1
        else:
            hi = mid
    where, block, _ = blocks[lo - 1]
    sizes = _union_sizes([iv for _, _, ivs in blocks[:lo] for iv in ivs])
    version = _over(sizes)
    earlier = " with the ipBlocks before it" if lo > 1 else ""
    if version == 4 and any(v == 6 and _relays(a, b) for v, a, b in blocks[lo - 1][2]):
        relays = ", ".join(IPV4_RELAYS)
        raise SpecError(where, f"{block.get('cidr')} admits addresses of an IPv4 relay prefix ({relays}: 6to4, "
                               "Teredo, NAT64 local-use), which a relay forwards to the IPv4 address the "
                               f"destination carries, so it counts as all of IPv4; {TO_NAME}")
    raise SpecError(where, f"{block.get('cidr')}{earlier} admits {_amount(sizes[version])} IPv{version} addresses, more "
                           f"than one /{BROADEST_PREFIX[version]} ({_amount(BOUND[version])}): that opens nearly "
                           f"everything (the apiserver, the nodes, cloud metadata); {TO_NAME}")


def _amount(count: int) -> str:
    if count <= 2 ** 32:
        return f"{count:,}"
    power = count.bit_length() - 1
    return f"2**{power}" if count == 2 ** power else f"more than 2**{power}"


def parse_egress(raw: object) -> tuple[dict, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or len(raw) > MAX_RULES:
        raise SpecError("spec.isolation.egress", f"must be a list of at most {MAX_RULES} egress rules")
    rules, blocks = [], []
    for i, rule in enumerate(raw):
        where = f"spec.isolation.egress[{i}]"
        rule = _fields(rule, RULE_FIELDS, where)
        peers, ports = rule.get("to"), rule.get("ports")
        if not peers:
            # A rule without peers would open egress to everything on its ports.
            raise SpecError(f"{where}.to", "must name at least one peer (an empty `to` allows every destination)")
        if not isinstance(peers, (list, tuple)) or len(peers) > MAX_PEERS:
            raise SpecError(f"{where}.to", f"must be a list of at most {MAX_PEERS} peers")
        excepts = 0
        for j, peer in enumerate(peers):
            at = f"{where}.to[{j}]"
            # A null field is an absent one to the API server: judge the peer it will see.
            peer = {k: v for k, v in _fields(peer, PEER_FIELDS, at).items() if v is not None}
            if not peer:
                raise SpecError(at, "must set podSelector, namespaceSelector or ipBlock")
            _check_selectors(peer, at)
            if "ipBlock" in peer:
                block = _fields(peer["ipBlock"], IPBLOCK_FIELDS, f"{at}.ipBlock")
                holes = block.get("except")
                if holes is not None and not isinstance(holes, (list, tuple)):
                    raise SpecError(f"{at}.ipBlock.except", "must be a list of CIDRs")
                excepts += len(holes or ())
                if excepts > MAX_EXCEPTS:
                    raise SpecError(f"{at}.ipBlock.except", f"a rule may list at most {MAX_EXCEPTS} except "
                                                            "entries over its ipBlocks: name the ranges to reach instead")
                blocks.append((f"{at}.ipBlock", block, _admitted(block, f"{at}.ipBlock")))
        if ports is not None:
            if not isinstance(ports, (list, tuple)):
                raise SpecError(f"{where}.ports", "must be a list of ports")
            for j, port in enumerate(ports):
                port = _fields(port, PORT_FIELDS, f"{where}.ports[{j}]")
                protocol = port.get("protocol")   # null is absent: the API server defaults it to TCP
                if protocol is not None and protocol not in PROTOCOLS:
                    raise SpecError(f"{where}.ports[{j}].protocol", f"must be one of {', '.join(PROTOCOLS)}")
        rules.append(canonical_rule(rule))
    _check_breadth(blocks)
    return tuple(rules)


# A peer's selectors and ipBlock are pointers: `{}` there is kept (and means "all"), not dropped.
_POINTER_FIELDS = {"podSelector", "namespaceSelector", "ipBlock"}


def _as_stored(value: object) -> object:
    if isinstance(value, Mapping):
        out = {k: _as_stored(x) for k, x in value.items() if x is not None}
        return {k: x for k, x in out.items() if k in _POINTER_FIELDS or x not in ([], {})}
    if isinstance(value, (list, tuple)):
        return [_as_stored(x) for x in value]
    return value


def canonical_rule(rule: Mapping) -> dict:
    """A NetworkPolicy rule (egress or ingress) as the API server stores it: null fields and
    empty lists and maps left out (they are omitempty, or pointers read as absent), a port's
    protocol defaulted to TCP. parse_egress returns its rules so, making the desired policy the
    stored one; core.children compares live policies in this form (one found after a crash)."""
    out = _as_stored(rule)
    if not isinstance(out, dict):
        return out   # not a rule: compared as it is
    if isinstance(out.get("ports"), list):
        out["ports"] = [{"protocol": "TCP", **port} if isinstance(port, dict) else port for port in out["ports"]]
    return out


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


# --- what the cluster can tell about the peers --------------------------------------------------
def _cidr_text(block: Mapping) -> str:
    cidr, holes = str(block.get("cidr")), block.get("except") or ()
    return f"{cidr} (except {', '.join(map(str, holes))})" if holes else cidr


def check_service_ips(egress: Sequence[Mapping], service_cidrs: Sequence[str]) -> None:
    """Refuses (SpecError) an ipBlock whose every admitted address lies in the cluster's Service
    CIDRs: ClusterIPs, which a policy never sees (it matches after the Service's DNAT). A block
    that only overlaps them (a /16 holding the pods and the Services) admits pods too and passes.
    IPv6 addresses that embed IPv4 (EMBEDDED_IPV4) are read as that IPv4, as for the breadth.
    ``egress`` is what parse_egress accepted; unreadable ``service_cidrs`` are skipped."""
    nets = []
    for text in service_cidrs:
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    if not nets:
        return
    spans = [(n.version, int(n.network_address), int(n.broadcast_address)) for n in nets]
    for i, rule in enumerate(egress):
        for j, peer in enumerate(rule.get("to") or ()):
            block = (peer or {}).get("ipBlock")
            if not block:
                continue
            where = f"spec.isolation.egress[{i}].to[{j}].ipBlock"
            # An IPv4-mapped or NAT64 block reaches the IPv4 it embeds: a ClusterIP spelt so is one.
            admitted = [iv for version, lo, hi in _admitted(block, where)
                        for iv in ([(version, lo, hi)] if version == 4 else sum(_split_embedded(lo, hi), []))]
            inside = [next((n for n, (v, a, b) in zip(nets, spans) if v == version and a <= lo and hi <= b), None)
                      for version, lo, hi in admitted]
            if admitted and all(inside):
                service = ", ".join(sorted({str(n) for n in inside}))
                raise SpecError(where, f"{_cidr_text(block)} lies inside the cluster's Service CIDR {service}: a "
                                       "ClusterIP. NetworkPolicy ipBlocks match pod IPs after a Service's DNAT, so "
                                       "a ClusterIP in an ipBlock never matches; select the Service's backing pods "
                                       "with podSelector/namespaceSelector instead")


def label_selector(selector: Mapping | None) -> str:
    """A LabelSelector (matchLabels, matchExpressions) in the API's query syntax ("" selects
    everything). The selector has passed the API server's validation (the policy's dry run)."""
    parts = [f"{k}={v}" for k, v in sorted(((selector or {}).get("matchLabels") or {}).items())]
    for expr in (selector or {}).get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), ",".join(expr.get("values") or ())
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": f"{key}", "DoesNotExist": f"!{key}"}.get(op, f"{key}"))
    return ",".join(parts)


@dataclass(frozen=True)
class PeerProbe:
    """What to ask the cluster about one selector peer: does any pod (not ended) match it?"""

    where: str                  # spec.isolation.egress[i].to[j]
    namespaces: str | None      # label selector of its namespaces; None: the episodes' own namespace
    pods: str                   # label selector of its pods ("": every pod of those namespaces)


MAX_PROBED_NAMESPACES = 16      # a peer matching more namespaces is not probed further (no guess)


def peer_probes(egress: Sequence[Mapping]) -> tuple[PeerProbe, ...]:
    """One probe per podSelector/namespaceSelector peer of the declared egress (ipBlocks name
    addresses, not pods: nothing to ask)."""
    probes = []
    for i, rule in enumerate(egress):
        for j, peer in enumerate(rule.get("to") or ()):
            peer = {k: v for k, v in (peer or {}).items() if v is not None}
            if "podSelector" not in peer and "namespaceSelector" not in peer:
                continue
            namespaces = label_selector(peer["namespaceSelector"]) if "namespaceSelector" in peer else None
            probes.append(PeerProbe(f"spec.isolation.egress[{i}].to[{j}]", namespaces,
                                    label_selector(peer.get("podSelector"))))
    return tuple(probes)


def empty_peer_message(probe: PeerProbe, *, namespaces: Sequence[str] = (), sandbox: str | None = None) -> str:
    """Why ``probe`` selects nothing: ``sandbox`` (a Dedicated batch's bare podSelector, which
    means the sandbox namespace, where only episodes run), or ``namespaces`` (those its selector
    matched, none holding a matching pod; empty: it matched no namespace)."""
    if sandbox is not None:
        return (f"{probe.where}: a podSelector without a namespaceSelector selects pods of the episodes' own "
                f"namespace, the sandbox {sandbox}, where only the episodes run; add a namespaceSelector naming the "
                "endpoint's namespace (e.g. kubernetes.io/metadata.name: <namespace>)")
    if probe.namespaces is not None and not namespaces:
        return f"{probe.where}: namespaceSelector {probe.namespaces} matches no namespace"
    where = ", ".join(namespaces[:3]) + (f" and {len(namespaces) - 3} more" if len(namespaces) > 3 else "")
    if not probe.pods:
        return f"{probe.where}: namespace {where} (namespaceSelector {probe.namespaces}) has no running pod"
    return f"{probe.where}: podSelector {probe.pods} matches no running pod in namespace {where}"


def empty_peers_warning(messages: Sequence[str]) -> str:
    """The Event's and the Running status message's text for the peers that selected nothing."""
    return ("declared egress selects no pod at the start: " + "; ".join(messages)
            + ". Episodes calling it fail to connect; the batch runs on (the endpoint may come up later)")[:1000]
