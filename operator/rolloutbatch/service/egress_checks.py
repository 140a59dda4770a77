"""What the cluster says about a batch's declared egress, read when the batch starts.

The rules are ``core.egress``'s; this module does the reads (``kube.resources``) and decides
what an unreadable answer means. Neither read may end a batch on a guess:

- **The Service CIDR** (``refuse_service_ips``): the ServiceCIDR objects (networking.k8s.io/v1,
  Kubernetes 1.33+) listed when the spec has an ipBlock, or, when they cannot be read (an older
  cluster, no RBAC), ``--service-cidr``; with neither the check is skipped and the log says so.
  An ipBlock inside it stalls the batch (InvalidSpec) before anything is created.
- **Peers that select nothing** (``empty_peers``): each selector peer's namespaces and one pod
  not ended are asked for; the answer is a warning, never a refusal. A read that fails skips that
  peer (logged): the warning is a hint, and no hint is better than a wrong one.
"""

from __future__ import annotations

import logging

from rolloutbatch.core import egress, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.model import BatchRef, BatchSpec, SpecError
from rolloutbatch.kube.storage import Storage
from rolloutbatch.kube.errors import KubeError
from rolloutbatch.service import policy



def _has_ip_blocks(spec: BatchSpec) -> bool:
    return any("ipBlock" in (peer or {}) for rule in spec.egress for peer in rule.get("to") or ())


async def service_cidrs(storage: Storage, fallback: tuple[str, ...], log: logging.Logger) -> tuple[str, ...]:
    """The cluster's Service CIDRs: read from its ServiceCIDR objects, else ``fallback``."""
    try:
        found = tuple(await storage.service_cidrs())
    except KubeError as exc:
        if policy.is_transient(exc):
            raise
        found, why = (), f"{exc.status}: {exc}"
    else:
        why = "no ServiceCIDR object lists one"
    if found:
        return found
    if fallback:
        log.info("Service CIDR from --service-cidr %s (the ServiceCIDR API: %s)", ", ".join(fallback), why)
        return fallback
    log.info("Service CIDR unknown (the ServiceCIDR API: %s; no --service-cidr): ipBlocks are not checked "
             "against it", why)
    return ()


async def refuse_service_ips(storage: Storage, spec: BatchSpec, fallback: tuple[str, ...], log: logging.Logger) -> None:
    """Stalled(InvalidSpec) when an ipBlock of the declared egress holds only ClusterIPs."""
    if not _has_ip_blocks(spec):
        return
    cidrs = await service_cidrs(storage, fallback, log)
    try:
        egress.check_service_ips(spec.egress, cidrs)
    except SpecError as exc:
        raise Stalled(v.STALL_INVALID_SPEC, str(exc)) from None


async def empty_peers(storage: Storage, ref: BatchRef, spec: BatchSpec, log: logging.Logger) -> list[str]:
    """A message per selector peer of the declared egress that selects no pod now."""
    messages = []
    dedicated = spec.isolation_namespace == v.ISOLATION_DEDICATED
    for probe in egress.peer_probes(spec.egress):
        if probe.namespaces is None and dedicated:
            # The sandbox holds only the episodes: no read can change the answer.
            messages.append(egress.empty_peer_message(probe, sandbox=naming.sandbox_namespace(ref)))
            continue
        try:
            if probe.namespaces is None:
                names = [ref.namespace]
            else:
                names = await storage.namespace_names(probe.namespaces, egress.MAX_PROBED_NAMESPACES + 1)
                if len(names) > egress.MAX_PROBED_NAMESPACES:
                    continue
            for name in names:
                if await storage.has_live_pod(name, probe.pods):
                    break
            else:
                messages.append(egress.empty_peer_message(probe, namespaces=names))
        except KubeError as exc:
            log.info("Not checking whether %s selects a pod (%s)", probe.where, exc)
    return messages
