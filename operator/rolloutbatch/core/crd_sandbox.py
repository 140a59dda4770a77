"""The RolloutBatch spec's fields about the sandbox: where the episodes run (isolation,
podTemplate), what is re-run (retries) and what is deleted afterwards (cleanup).

Part of the CRD's one definition (``core.crd`` assembles it; ``core.crd_spec`` holds the rest of
the spec). Enums are core.vocabulary's tuples, their first word the default; the refused taints
and the system PriorityClass prefix are core.defaults', which parse_spec checks as well.
"""

from __future__ import annotations

from rolloutbatch.core import defaults as d
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.naming import LABEL_BATCH_NAME, LABEL_BATCH_UID, LABEL_RESULTS_RETAINED, RESULTS_RETAINED
from rolloutbatch.core.openapi import Schema, array, boolean, integer, obj, rule, string


def listing(words: tuple[str, ...], last: str) -> str:
    """'a, b and c' (``last`` = "and") or 'a, b or c'."""
    return f"{', '.join(words[:-1])} {last} {words[-1]}" if len(words) > 1 else words[0]


def _cel_list(words: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{w}'" for w in words) + "]"


def retries() -> Schema:
    return obj("Re-runs the operator allows.", {
        "infrastructure": integer(
            ("Re-runs of an episode whose pod was evicted, preempted or lost with its node, "
             f"0..{d.MAX_INFRASTRUCTURE_RETRIES}. Default {d.INFRASTRUCTURE_RETRIES}. Episodes that fail on "
             "their own are never re-run."),
            minimum=0, maximum=d.MAX_INFRASTRUCTURE_RETRIES, default=d.INFRASTRUCTURE_RETRIES),
    }, default={})


def _egress_rule() -> Schema:
    return obj(properties={
        "to": array(
            (f"Peers (podSelector, namespaceSelector, ipBlock) this rule opens, at most {d.MAX_EGRESS_PEERS}. "
             "A namespaceSelector must itself name a label (matchLabels or an In expression), whatever "
             "podSelector is beside it; a bare podSelector (the episodes' own namespace) must name one too. "
             "A label the operator stamps on episodes and sandboxes (app.kubernetes.io/managed-by, the "
             "batch's or pool's rl.agentruntime.io/ labels, the Job controller's, Pod Security's) names "
             "nothing: it selects every neighbour episode or sandbox. "
             "All ipBlocks of all rules together (cidr minus except, at most 16 excepts each) may admit at "
             "most one /8 (IPv4) or one /16 (IPv6); IPv4-mapped and NAT64 64:ff9b::/96 blocks count as the "
             "IPv4 they embed, and a block reaching an IPv4 relay prefix (6to4 2002::/16, Teredo 2001::/32, "
             "NAT64 local-use 64:ff9b:1::/48) as all of IPv4. A block inside the cluster's Service CIDR "
             "(ClusterIPs) is refused: policies match pod IPs after a Service's DNAT, so select the "
             "Service's pods instead. A selector peer that selects no pod when the batch starts is reported "
             "(Warning Event EgressPeerSelectsNothing, the Running message), not refused."),
            obj(preserve_unknown=True), min_items=1, max_items=d.MAX_EGRESS_PEERS),
        "ports": array("Ports (protocol, port, endPort) this rule opens; all ports when omitted.",
                       obj(preserve_unknown=True)),
    }, required=["to"])


def isolation() -> Schema:
    dedicated, shared = v.ISOLATION_MODES
    deny_all, allow_egress = v.NETWORK_MODES
    return obj("Where the episodes run and what they may reach.", {
        "namespace": string(
            (f"{dedicated} (default): a sandbox namespace rb-<uid10> per batch, Pod Security restricted. "
             f"{shared}: the batch's own namespace."),
            enum=v.ISOLATION_MODES, default=v.ISOLATION_MODES[0]),
        "resourceQuota": boolean(
            (f"{dedicated} only: also cap the sandbox with a ResourceQuota of parallelism (+2) episode pods. "
             "Off by default: only the Job controller creates pods there, never more than parallelism at "
             "once, and the quota makes every pod admission a compare-and-swap on one object (slower "
             "batches, no extra protection). Made anyway when a ResourceQuota of the batch's namespace "
             "bounds its pods: the sandbox carries that bound."),
            default=d.SANDBOX_QUOTA),
        # No schema default: a batch on a pool must be told from one that asked for DenyAll, which an
        # AllowEgress pool cannot give (core.pool_spec.sandbox_conflict); the operator reads an
        # absent one as DenyAll (core.spec).
        "network": string(
            (f"{deny_all} (the default when unset): a default-deny NetworkPolicy for the episode pods. "
             f"{allow_egress}: outgoing connections allowed, incoming denied. With poolRef: unset runs on the "
             "pool's network, a value other than the pool's is refused."),
            enum=v.NETWORK_MODES),
        "egress": array(
            (f"With {deny_all}: the only destinations the episodes may reach, as NetworkPolicy egress rules "
             "(networking.k8s.io/v1: `to` peers and `ports`), e.g. the model endpoint an agent calls. "
             "Cluster DNS is allowed beside them; everything else, ingress included, stays denied. Enforced "
             "only by a CNI that implements NetworkPolicy."),
            _egress_rule(), max_items=d.MAX_EGRESS_RULES),
    }, default={})


def cleanup() -> Schema:
    delete, retain = v.RESULTS_POLICIES
    on_success, always, never = v.CLEANUP_POLICIES
    return obj("What is deleted after the batch finished.", {
        "results": string(
            (f"The results ConfigMaps (<name>-results and its shards): {delete} (default) makes them owned by "
             f"the batch, deleted with it (and by ttlSecondsAfterFinished); {retain} leaves them when the "
             f"batch is deleted, unowned and labelled {LABEL_BATCH_NAME}, {LABEL_BATCH_UID} and "
             f"{LABEL_RESULTS_RETAINED}={RESULTS_RETAINED}, until rolloutbatch cleanup NAME removes them. "
             "Without the batch its status no longer vouches for them: rolloutbatch results NAME --retained "
             "reads them, checked only against the shard digests their head records (anyone who may write "
             "ConfigMaps in the namespace could rewrite the whole set)."),
            enum=v.RESULTS_POLICIES, default=v.RESULTS_POLICIES[0]),
        "sandbox": string(
            ("When the sandbox namespace (Dedicated) or the Job (Shared) is deleted after the batch "
             f"finished: {on_success} (default; a failed batch keeps its pods and logs), {always} or "
             f"{never}. Deleting the RolloutBatch always deletes them."),
            enum=v.CLEANUP_POLICIES, default=v.CLEANUP_POLICIES[0]),
        "ttlSecondsAfterFinished": integer(
            (f"Delete the whole RolloutBatch (and its results ConfigMap, unless results is {retain}) this "
             "many seconds after it finished. Default: never."),
            minimum=0, maximum=d.MAX_INT32, nullable=True),
    }, default={})


def _toleration() -> Schema:
    protected = d.PROTECTED_TAINTS
    return obj(properties={
        "key": string("The taint key tolerated (required here, see above).", max_length=317),
        "operator": string("Equal (default) or Exists."),
        "value": string("The taint value tolerated (with Equal).", max_length=63),
        "effect": string("NoSchedule, PreferNoSchedule or NoExecute; empty for all effects."),
        "tolerationSeconds": integer("With NoExecute, how long the pod stays bound after the taint appears.",
                                     format="int64"),
    }, preserve_unknown=True, rules=[
        rule("has(self.key) && size(self.key) > 0",
             "spec.podTemplate.tolerations: every toleration needs a key (an empty key with operator Exists "
             "tolerates every taint)"),
        rule(f"!has(self.key) || !(self.key in {_cel_list(protected)})",
             f"spec.podTemplate.tolerations must not tolerate {listing(protected, 'or')}: they keep pods off "
             "nodes for the cluster's own safety"),
    ])


def pod_template() -> Schema:
    return obj("Scheduling fields copied to every episode pod (only these four).", {
        "nodeSelector": obj("Node labels an episode pod requires.", values=string()),
        "tolerations": array(
            (f"Tolerations of the episode pods (core/v1 Toleration), at most {d.MAX_TOLERATIONS}. The "
             "operator adds NoExecute tolerations of 30 s for unreachable and not-ready nodes. Refused, "
             "since the operator cannot tell who submitted the batch: a toleration without a key (with "
             "operator Exists it tolerates every taint), and any toleration of the taints that keep pods "
             f"off nodes for the cluster's own safety: {', '.join(d.PROTECTED_TAINTS)}."),
            _toleration(), max_items=d.MAX_TOLERATIONS),
        "affinity": obj("Node and pod affinity of the episode pods (core/v1 Affinity).", preserve_unknown=True),
        "priorityClassName": string(
            ("PriorityClass of the episode pods. Default none. It must exist (else the batch stalls with "
             f"PriorityClassNotFound) and be of the user range: {d.SYSTEM_PRIORITY_PREFIX}* names are "
             f"refused, and a class whose value is above {d.MAX_USER_PRIORITY} stalls the batch with "
             "PriorityClassNotAllowed, both before anything is created."),
            max_length=253, rules=[
                rule(f"!self.startsWith('{d.SYSTEM_PRIORITY_PREFIX}')",
                     "spec.podTemplate.priorityClassName must not be a system PriorityClass "
                     f"({d.SYSTEM_PRIORITY_PREFIX}* is reserved for the cluster's critical pods)"),
            ]),
    }, default={})
