"""spec.podTemplate: the scheduling fields a batch's pods (and a pool's) may carry, in the
shapes the API server accepts, and none that asks for what is the cluster's own: no blanket or
protected toleration, no system PriorityClass (docs/design.md §8.1).

Pure; each check raises core.model.SpecError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping

from rolloutbatch.core import defaults as d
from rolloutbatch.core.defaults import MAX_TOLERATIONS, SYSTEM_PRIORITY_PREFIX
from rolloutbatch.core.k8s_rules import (affinity_problem, is_dns_subdomain, is_label_value, is_qualified_name,
                                         labels_problem)
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec_fields import only_declared
from rolloutbatch.core.strictjson import deeper_than

TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS = ("", "Equal", "Exists")
TAINT_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
AFFINITY_FIELDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
# The submitter may hold rights on RolloutBatches only, and the operator cannot tell who submitted
# a batch: the pod template may ask for nothing of the cluster's own (docs/design.md §8.1). The CRD
# refuses the same taints (core.defaults.PROTECTED_TAINTS, with why each is protected).
PROTECTED_TAINT_KEYS = frozenset(d.PROTECTED_TAINTS)

def _toleration(item: object, i: int) -> dict:
    """One toleration as the API server validates it (ValidateTolerations' rules)."""
    field_name = f"spec.podTemplate.tolerations[{i}]"
    if not isinstance(item, Mapping):
        raise SpecError(field_name, f"must be an object, got {type(item).__name__}")
    unknown = set(item) - set(TOLERATION_FIELDS)
    if unknown:
        raise SpecError(field_name, f"unsupported fields: {', '.join(sorted(map(str, unknown)))}"[:200])
    key, operator = item.get("key") or "", item.get("operator") or ""
    value, effect = item.get("value") or "", item.get("effect") or ""
    if key and not is_qualified_name(key):
        raise SpecError(f"{field_name}.key", f"{key!r} is not a valid label key"[:200])
    if operator not in TOLERATION_OPERATORS:
        raise SpecError(f"{field_name}.operator", f"must be Equal or Exists, got {operator!r}"[:200])
    if not key and operator != "Exists":
        raise SpecError(f"{field_name}.operator", "must be Exists when the key is empty")
    if not key:
        raise SpecError(f"{field_name}.key", "must name a taint: an empty key with operator Exists tolerates "
                                             "every taint, also those that keep pods off the control plane and "
                                             "off cordoned or failing nodes")
    if key in PROTECTED_TAINT_KEYS:
        raise SpecError(f"{field_name}.key", f"{key} keeps pods off nodes for the cluster's own safety and cannot "
                                             f"be tolerated (refused: {', '.join(sorted(PROTECTED_TAINT_KEYS))}; "
                                             "the operator itself tolerates not-ready and unreachable nodes briefly)")
    if operator == "Exists" and value:
        raise SpecError(f"{field_name}.value", "must be empty when the operator is Exists")
    if not is_label_value(value):
        raise SpecError(f"{field_name}.value", f"{value!r} is not a valid label value"[:200])
    if effect not in TAINT_EFFECTS:
        raise SpecError(f"{field_name}.effect", f"must be one of {', '.join(TAINT_EFFECTS[1:])}, got {effect!r}"[:200])
    seconds = item.get("tolerationSeconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise SpecError(f"{field_name}.tolerationSeconds", f"must be an integer, got {seconds!r}"[:200])
        if effect != "NoExecute":
            raise SpecError(f"{field_name}.tolerationSeconds", "is only allowed with the effect NoExecute")
    return dict(item)


def checked_pod_template(template: Mapping) -> dict:
    """The podTemplate fields the Job's pods get (see core.manifests.job), in the shapes the API
    server accepts; absent or null fields are left out."""
    only_declared(template, "podTemplate")
    checked: dict = {}
    selector = template.get("nodeSelector")
    if selector is not None:
        if found := labels_problem(selector, "spec.podTemplate.nodeSelector"):
            raise SpecError(*found)
        checked["nodeSelector"] = dict(selector)
    tolerations = template.get("tolerations")
    if tolerations is not None:
        if isinstance(tolerations, (str, bytes)) or not isinstance(tolerations, (list, tuple)):
            raise SpecError("spec.podTemplate.tolerations", "must be a list of tolerations")
        if len(tolerations) > MAX_TOLERATIONS:
            raise SpecError("spec.podTemplate.tolerations", f"at most {MAX_TOLERATIONS} tolerations, "
                                                            f"got {len(tolerations)}")
        checked["tolerations"] = [_toleration(item, i) for i, item in enumerate(tolerations)]
    affinity = template.get("affinity")
    if affinity is not None:
        if not isinstance(affinity, Mapping):
            raise SpecError("spec.podTemplate.affinity", f"must be an object, got {type(affinity).__name__}")
        if deeper_than(affinity, d.MAX_JSON_DEPTH):
            raise SpecError("spec.podTemplate.affinity", f"nests more than {d.MAX_JSON_DEPTH} levels deep")
        for key, value in affinity.items():
            if key not in AFFINITY_FIELDS:
                raise SpecError("spec.podTemplate.affinity", f"unsupported field {key!r}; "
                                                             f"allowed: {', '.join(AFFINITY_FIELDS)}"[:200])
            if value is not None and not isinstance(value, Mapping):
                raise SpecError(f"spec.podTemplate.affinity.{key}", "must be an object")
        # What the API server refuses in every pod (a pool's pods have no dry run to say it);
        # the rest of the terms it checks itself.
        found = affinity_problem(affinity)
        if found:
            raise SpecError(f"spec.podTemplate.affinity.{found[0]}"[:300], found[1][:300])
        checked["affinity"] = dict(affinity)
    priority = template.get("priorityClassName")
    if priority:   # "" is no class, to a Pod as to a pool (core.pool_spec)
        if not is_dns_subdomain(priority):
            raise SpecError("spec.podTemplate.priorityClassName",
                            f"must be a PriorityClass name (lowercase DNS subdomain), got {priority!r}"[:200])
        if priority.startswith(SYSTEM_PRIORITY_PREFIX):
            raise SpecError("spec.podTemplate.priorityClassName",
                            f"{priority!r} is a system PriorityClass ({SYSTEM_PRIORITY_PREFIX}* is reserved for "
                            "the cluster's critical pods): use a PriorityClass of the user range"[:300])
        checked["priorityClassName"] = priority
    return checked
