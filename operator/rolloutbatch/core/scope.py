"""Where the operator may act: the whole cluster (the default install) or listed namespaces only.

``rolloutbatch operator --watch-namespace NS`` (repeatable; the Helm chart's ``watchNamespaces``,
``manifests/namespaced``) runs the least-privilege install: kopf serves batches in those
namespaces only, the Pod and Job watches are per namespace, and the ServiceAccount holds Roles
there and nothing cluster-wide (docs/design.md §8.4). What that costs, defined here once:

- **Dedicated isolation is refused** before anything is created (``ClusterRightsRequired``):
  its sandbox is a namespace the operator would create and delete. Shared runs as usual.
- **Nothing outside the listed namespaces is looked for**: the deletion plan's sandbox namespace
  and the Job in it are skipped (such a batch never made them, and even a read would be refused).
- **Cluster-scoped reads may be refused**, each answered without a guess that ends a batch on
  its own (:data:`DEGRADED`): an unreadable RuntimeClass is not checked (a missing one then shows
  as ``PodsNotCreated`` with the Job controller's words), an unreadable PriorityClass refuses the
  batch (its value is what keeps the cluster's critical range out of a submitter's reach), and
  unreadable Nodes, ServiceCIDRs and peer namespaces skip their checks as they already do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.k8s_rules import check_namespace_name
from rolloutbatch.core.model import BatchSpec

# What the namespaced install does without cluster-wide rights, logged once at startup.
DEGRADED = (
    "isolation.namespace Dedicated is refused (ClusterRightsRequired): the operator creates no namespace",
    "spec.poolRef is refused (ClusterRightsRequired): a RolloutPool's pods live in a namespace of their own",
    "spec.runtimeClassName is checked only where RuntimeClasses may be read; a missing one then stalls "
    "the batch as PodsNotCreated with the Job controller's message",
    "spec.podTemplate.priorityClassName is refused (ClusterRightsRequired) unless PriorityClasses may be read",
    "Unschedulable needs the nodes' allocatable: unreadable, a batch the scheduler cannot place waits "
    "for its activeDeadlineSeconds",
    "egress ipBlocks are checked against the Service CIDR only with --service-cidr or a readable ServiceCIDR API; "
    "peers in namespaces that cannot be listed are not probed",
)


def parse_namespaces(values: Iterable[str]) -> tuple[str, ...]:
    """The ``--watch-namespace`` values, checked and in order, each once. Raises ValueError."""
    names: list[str] = []
    for value in values:
        check_namespace_name(value)
        if value not in names:
            names.append(value)
    return tuple(names)


@dataclass(frozen=True)
class Scope:
    """``namespaces`` empty: cluster-wide (the default install)."""

    namespaces: tuple[str, ...] = ()

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    def reaches(self, namespace: str | None) -> bool:
        """Whether the operator acts in ``namespace`` (None: a cluster-scoped object)."""
        return self.clusterwide or namespace in self.namespaces

    def watch_paths(self, api_prefix: str, plural: str) -> tuple[str, ...]:
        """The list+watch paths of a namespaced kind: one for the cluster, or one per namespace
        (``/api/v1`` + ``pods`` -> ``/api/v1/namespaces/NS/pods``)."""
        if self.clusterwide:
            return (f"{api_prefix}/{plural}",)
        return tuple(f"{api_prefix}/namespaces/{ns}/{plural}" for ns in self.namespaces)

    def refuse(self, spec: BatchSpec) -> None:
        """Stalled(ClusterRightsRequired) for a spec this install cannot run, before anything exists."""
        if not self.clusterwide and spec.pool_name:
            raise Stalled(v.STALL_CLUSTER_RIGHTS, POOLS_REFUSED_MESSAGE)
        if not self.clusterwide and spec.isolation_namespace == v.ISOLATION_DEDICATED:
            raise Stalled(v.STALL_CLUSTER_RIGHTS, dedicated_refused_message(self.namespaces))

    def describe(self) -> str:
        return "the whole cluster" if self.clusterwide else "namespaces " + ", ".join(self.namespaces)


CLUSTERWIDE = Scope()
# A pool lives in a namespace of its own (core.pools), which a namespaced install may not create.
POOLS_REFUSED_MESSAGE = ("warm pools need the cluster-wide install: a RolloutPool's pods live in a namespace of "
                         "their own, which a namespaced operator may not create or watch")


def dedicated_refused_message(namespaces: Iterable[str]) -> str:
    return ("isolation.namespace Dedicated needs a sandbox namespace the operator creates, and this operator "
            f"watches only {', '.join(namespaces)} without cluster-wide rights: set spec.isolation.namespace: "
            "Shared, or use the cluster-wide install")[:1000]


def priority_class_unreadable_message(name: str) -> str:
    return (f"spec.podTemplate.priorityClassName {name!r}: this operator watches listed namespaces only and may not "
            "read PriorityClasses, so it cannot check that the class is outside the cluster's critical range: "
            "leave priorityClassName out, grant it get on priorityclasses, or use the cluster-wide install")[:1000]
