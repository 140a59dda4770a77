"""Can the cluster serve this spec? Pure checks done before anything is created.

Answers become ``Stalled`` conditions with a reason (docs/design.md §5.6) instead of Jobs that
never start: a quota that cannot hold the pods a batch or a pool charges to it, the RuntimeClass overhead that must
be added to every pod's resources, a PriorityClass of the system range, inputs by reference that
are missing, not opted in or malformed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from rolloutbatch.core import defaults as d
from rolloutbatch.core import manifests, pool_children, pools, strictjson
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.k8s_rules import (admitted, best_effort, cross_namespace_affinity, format_quantity,
                                         parse_quantity, pod_amounts, quota_charges_pods, quota_usage, terminating,
                                         unset_by_containers)
from rolloutbatch.core.manifests import TERMINATING_SLACK, batch_pods
from rolloutbatch.core.model import BatchRef, BatchSpec, Stalled  # noqa: F401 (Stalled: re-exported)
from rolloutbatch.core.naming import AGENT_CONTAINER, CONTAINER_NAME, INPUTS_OPT_IN, LABEL_INPUTS, VERIFIER_CONTAINER
from rolloutbatch.core.pool_spec import PoolRef, PoolSpec
from rolloutbatch.core.defaults import MAX_USER_PRIORITY


def runtime_overhead(runtime_class: Mapping) -> dict[str, str] | None:
    """The pod overhead a RuntimeClass adds (``overhead.podFixed``), if any."""
    fixed = (runtime_class.get("overhead") or {}).get("podFixed")
    return dict(fixed) if fixed else None


# Placeholders: what a pod is made of does not depend on whose it is.
_BATCH = BatchRef(namespace="footprint", name="footprint", uid="0" * 36)
_POOL = PoolRef(name="footprint", namespace="footprint", uid="0" * 36)


def episode_pod(spec: BatchSpec | PoolSpec, overhead: Mapping[str, str] | None,
                template: PoolSpec | None = None) -> dict:
    """The pod spec the operator makes for the spec's episodes, as the API server admits it (the
    RuntimeClass overhead set): a batch's Job template (with spec.verifier the agent is an init
    container, the verifier the one container), or a pool's warm pod (core.pool_children.pod_spec: agent,
    verifier and the verifier's files writer are containers running at once; no deadline until it
    is claimed), or with
    ``template`` (its pool's spec) a pooled batch's cold pod: the pool's pod with the batch's
    deadline, as its claimed pods get one. Built, not described, so that what quotas and the
    scheduler are asked about is what runs."""
    if isinstance(spec, PoolSpec):
        return admitted(pool_children.pod_spec(_POOL, spec), overhead)
    job = pools.batch_pooled_job(_BATCH, spec, _POOL, template) if template else manifests.job(_BATCH, spec, None)
    return admitted(job["spec"]["template"]["spec"], overhead)


def pod_resources(spec: BatchSpec | PoolSpec, overhead: Mapping[str, str] | None) -> dict[str, dict[str, Decimal]]:
    """Requests and limits of one episode pod as Kubernetes counts them (k8s_rules.pod_amounts):
    its requests are what the scheduler reserves (a limit standing in for a missing request)."""
    return pod_amounts(episode_pod(spec, overhead))


def fits_an_empty_node(requests: Mapping[str, Decimal], allocatables: Sequence[Mapping[str, str]]) -> bool:
    """Whether some node could hold one episode pod if it ran nothing else. False means the
    scheduler will never place it, however long the batch waits (a 1 Ei memory request); True
    means it may be waiting for room, which a busy cluster frees."""
    def fits(allocatable: Mapping[str, str]) -> bool:
        for resource, amount in requests.items():
            try:
                have = parse_quantity(str(allocatable.get(resource, "0")))
            except ValueError:
                return True    # a node's figure we cannot read: never conclude "impossible" from it
            if have < amount:
                return False
        return True
    return any(fits(a) for a in allocatables)


def pod_footprint(spec: BatchSpec | PoolSpec, overhead: Mapping[str, str] | None) -> dict[str, float]:
    """What one episode pod charges to a ResourceQuota (k8s_rules.quota_usage).
    ``spec``: a batch's, or a pool's (core.pool_spec.PoolSpec)."""
    return {resource: float(amount) for resource, amount in quota_usage(episode_pod(spec, overhead)).items()}


def _in_scope(scope: object, operator: object, values: object, pod: Mapping) -> bool:
    """Whether the pod is in one scope of a ResourceQuota, as Kubernetes' quota evaluator decides
    it (pkg/quota/v1/evaluator/core/pods.go, podMatchesScopeFunc): Terminating from the pod's
    ``activeDeadlineSeconds`` (a Job's pods have one, a pool's warm pod none), BestEffort from its
    QoS, CrossNamespacePodAffinity from its affinity terms; only a PriorityClass scope reads the
    operator (the API server refuses any but Exists for the others), as a label selector on the
    class: for a pod without one, as for an object without the label, DoesNotExist and NotIn
    hold, In and Exists do not (the cluster's ``globalDefault`` class, which the API server would
    give it, is not read: §11). A scope this does not know (a newer Kubernetes') is taken to
    match: a stall rather than an escape."""
    if scope in ("Terminating", "NotTerminating"):
        return terminating(pod) == (scope == "Terminating")
    if scope in ("BestEffort", "NotBestEffort"):
        return best_effort(pod) == (scope == "BestEffort")
    if scope == "CrossNamespacePodAffinity":
        return cross_namespace_affinity(pod)
    if scope == "VolumeAttributesClass":
        return False   # persistent volume claims only
    if scope == "PriorityClass":
        name = str(pod.get("priorityClassName") or "")
        listed = values if isinstance(values, list) else []
        return {"Exists": name != "", "DoesNotExist": name == "", "In": name != "" and name in listed,
                "NotIn": name == "" or name not in listed}.get(str(operator), True)
    return True


def _applies(quota: Mapping, pod: Mapping) -> bool:
    body = quota.get("spec") or {}
    wanted = [(s, "Exists", None) for s in body.get("scopes") or []]
    wanted += [(e.get("scopeName"), e.get("operator"), e.get("values"))
               for e in ((body.get("scopeSelector") or {}).get("matchExpressions") or []) if isinstance(e, Mapping)]
    return all(_in_scope(s, o, vals, pod) for s, o, vals in wanted)


def quota_applies(quota: Mapping, spec: BatchSpec | PoolSpec, overhead: Mapping[str, str] | None) -> bool:
    """Whether ``quota`` charges the spec's pods (its ``scopes`` and ``scopeSelector``, all of them)."""
    return _applies(quota, episode_pod(spec, overhead))


def _hard(quota: Mapping) -> Mapping:
    return (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}


def _bounded(quota: Mapping, footprint: Mapping[str, Decimal]) -> list[tuple[str, Decimal]]:
    """(resource, what the quota leaves of it) for each resource it bounds that the pods charge:
    exact quantities, as the quota admission compares them (three pods of 100m fill 300m; as
    floats they need 0.30000000000000004)."""
    used = (quota.get("status") or {}).get("used") or {}
    return [(resource, parse_quantity(str(limit)) - parse_quantity(str(used.get(resource, "0"))))
            for resource, limit in _hard(quota).items() if resource in footprint]


def quotas_bound(quotas: Sequence[Mapping], spec: BatchSpec | PoolSpec, overhead: Mapping[str, str] | None) -> bool:
    """Whether some ResourceQuota that charges the spec's pods bounds anything a pod can be
    charged (k8s_rules.quota_charges_pods), whether or not these pods name it: a Dedicated sandbox
    then carries the bound in a ResourceQuota of its own (core.manifests.resource_quota), which
    holds its pods' count and every resource they charge to the batch's own total."""
    pod = episode_pod(spec, overhead)
    return any(_applies(q, pod) and any(quota_charges_pods(str(r)) for r in _hard(q)) for q in quotas)


_FIELDS = {CONTAINER_NAME: "spec.resources", AGENT_CONTAINER: "spec.resources",
           VERIFIER_CONTAINER: "spec.verifier.resources"}


def _unset_message(name: str, missing: Mapping[str, Sequence[str]], spec: BatchSpec | PoolSpec) -> str:
    """Why the API server would refuse the pods in the namespace of quota ``name``, and what to set."""
    resource, containers = sorted(missing.items())[0]
    kind, _, bare = resource.rpartition(".")
    kind = kind or "requests"   # a bare cpu/memory quota means requests
    whose = "the RolloutPool's " if isinstance(spec, PoolSpec) else ""
    fields = sorted({f"{whose}{_FIELDS.get(c, 'spec.resources')}.{kind}.{bare}" for c in containers})
    hint = " (or its limit, which the API server copies to a missing request)" if kind == "requests" else ""
    return (f"ResourceQuota {name} bounds {resource}: the API server admits no pod there with a container that "
            f"does not set it (\"must specify {resource}\"), and the episode pod's {', '.join(containers)} does not: "
            f"set {' and '.join(fields)}{hint}")[:1000]


def check_quota_fits(quotas: Sequence[Mapping], spec: BatchSpec | PoolSpec, overhead: Mapping[str, str] | None,
                     pods: int = 1, what: str = "one episode pod", template: PoolSpec | None = None) -> str | None:
    """A message when some ResourceQuota (of those that charge the pods: :func:`quota_applies`)
    cannot hold ``pods`` of the spec's pods (``what`` names them; ``template``: a pooled batch's
    pool's spec, :func:`episode_pod`), or bounds cpu or memory that a container of the pod does
    not set (the quota admission refuses such a pod, however roomy the quota), else None."""
    pod = episode_pod(spec, overhead, template)
    footprint = quota_usage(pod)
    for quota in quotas:
        if not _applies(quota, pod):
            continue
        name = quota.get("metadata", {}).get("name", "?")
        missing = unset_by_containers(pod, {str(r) for r in _hard(quota)})
        if missing:
            return _unset_message(name, missing, template or spec)
        for resource, free in _bounded(quota, footprint):
            need = footprint[resource] * pods
            if need > free:
                return (f"ResourceQuota {name} leaves {format_quantity(free)} of {resource}, "
                        f"{what} needs {format_quantity(need)}")
    return None


def check_quota_outside(quotas: Sequence[Mapping], spec: BatchSpec, overhead: Mapping[str, str] | None,
                        template: PoolSpec | None = None) -> str | None:
    """The namespace's quotas against a batch whose pods run outside it (a Dedicated sandbox, its
    pool's namespace), where none of them reaches: everything it may hold at once
    (:func:`batch_pods`) must fit what they leave. ``template``: its pool's spec, when its pods are
    the pool's (:func:`episode_pod`)."""
    pods = batch_pods(spec)
    return check_quota_fits(quotas, spec, overhead, pods,
                            f"this batch's {pods} pods (spec.parallelism {spec.parallelism} + {TERMINATING_SLACK} "
                            "terminating, run outside the namespace)", template)


def check_priority_class(priority_class: Mapping) -> str | None:
    """A message when the live PriorityClass is above the user range (the cluster's critical
    pods' range, whatever its name), else None. Its value is not revealed."""
    value = priority_class.get("value")
    name = (priority_class.get("metadata") or {}).get("name", "?")
    if isinstance(value, bool) or not isinstance(value, int):
        return f"PriorityClass {name!r} has no integer value"[:200]
    if value > MAX_USER_PRIORITY:
        return (f"PriorityClass {name!r} is in the system range (value above {MAX_USER_PRIORITY}), reserved for "
                "the cluster's critical pods: use a PriorityClass of the user range")[:300]
    return None


def opted_in(configmap: Mapping) -> bool:
    """Whether a ConfigMap may be read as spec.inputsFrom (its writer labelled it so)."""
    labels = (configmap.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and labels.get(LABEL_INPUTS) == INPUTS_OPT_IN


def not_opted_in_message(name: str) -> str:
    """The one answer for a missing and for a not-opted-in ConfigMap: it reveals neither its
    content nor whether it exists."""
    return (f"ConfigMap {name} of spec.inputsFrom does not exist or is not labelled {LABEL_INPUTS}={INPUTS_OPT_IN}: "
            "only ConfigMaps opted in with that label (by someone who may write them) are read as inputs")[:400]


def input_shards(configmaps: Sequence[Mapping | None], names: Sequence[str], count: int) -> list[dict[str, str]]:
    """The data of each spec.inputsFrom ConfigMap, checked: together they hold exactly the keys
    ``input-0.json`` .. ``input-<count-1>.json``, each a JSON object. Raises Stalled otherwise,
    before anything is created. Every ConfigMap must be opted in (``opted_in``) before anything
    of any of them is looked at: the submitter may have no right to read them, and a message
    naming a key would hand their content out."""
    import re

    configmaps = list(configmaps)
    for name, cm in zip(names, configmaps):
        if cm is None or not opted_in(cm):
            raise Stalled(v.STALL_INPUTS_MISSING, not_opted_in_message(name))
    key = re.compile(r"^input-(0|[1-9][0-9]*)\.json$")
    seen: dict[int, str] = {}
    shards = []
    for name, cm in zip(names, configmaps):
        if cm.get("binaryData"):
            raise Stalled(v.STALL_INPUTS_INVALID, f"ConfigMap {name}: inputs must be in data, not binaryData")
        data = dict(cm.get("data") or {})
        for k, value in data.items():
            match = key.match(k)
            if not match or int(match.group(1)) >= count:
                raise Stalled(v.STALL_INPUTS_INVALID, f"ConfigMap {name}: key {k!r}"[:200]
                              + f" is not input-<g>.json with g < {count}")
            g = int(match.group(1))
            if g in seen:
                raise Stalled(v.STALL_INPUTS_INVALID, f"input {g} is in both {seen[g]} and {name}")
            too_deep = Stalled(v.STALL_INPUTS_INVALID, f"ConfigMap {name}: {k} nests objects or arrays more than "
                                                       f"{d.MAX_JSON_DEPTH} levels deep")   # as an inline input
            try:
                # no episode may be handed a number that is not finite (1e999, NaN, 10**400)
                parsed = strictjson.loads(value)
            except RecursionError:
                raise too_deep from None
            except ValueError as exc:
                raise Stalled(v.STALL_INPUTS_INVALID, f"ConfigMap {name}: {k} is not JSON: {exc}"[:300]) from None
            if not isinstance(parsed, dict):
                raise Stalled(v.STALL_INPUTS_INVALID, f"ConfigMap {name}: {k} must be a JSON object")
            if strictjson.deeper_than(parsed, d.MAX_JSON_DEPTH):
                raise too_deep
            seen[g] = name
        shards.append(data)
    missing = [g for g in range(count) if g not in seen]
    if missing:
        raise Stalled(v.STALL_INPUTS_INVALID, f"spec.inputsFrom promises {count} inputs; missing "
                      + ", ".join(f"input-{g}.json" for g in missing[:5]) + (" ..." if len(missing) > 5 else ""))
    return shards


