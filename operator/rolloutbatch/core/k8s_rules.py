"""Kubernetes' own rules, as the API server applies them: ConfigMap keys, DNS names, qualified
names and label values, resource quantities (parsed to and formatted from base units), and what
a pod requests and charges to a ResourceQuota.

Pure: the spec checks (``core.spec``), the manifest builders and admission use them to refuse a
spec before the API server would refuse one of its children.

``parse_quantity`` is the one quantity parser of the repository. A maintained library's would be preferred, but the only one around is the ``kubernetes``
client's ``kubernetes.utils.parse_quantity``: the runtime does not depend on that package (tests
do), and it accepts "NaN", "Infinity" and any exponent. This one follows apimachinery's grammar
(k8s.io/apimachinery/pkg/api/resource, ``ParseQuantity``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, localcontext
from typing import Any

_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_CONFIGMAP_KEY_LENGTH = 253
# What the API server takes in one Secret's (or ConfigMap's) data, its values' bytes summed
# (core.MaxSecretSize, checked by ValidateSecret and ValidateConfigMap).
MAX_SECRET_BYTES = 1 << 20
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_DNS_LABEL_LENGTH = 63   # a namespace's name, a LocalQueue's: a DNS-1123 label
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SUFFIX = {"": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# <sign><digits>[.<digits>] then one of: a decimal exponent (e3, E-2), a suffix, nothing.
# "1E" is exa, "1E3" a thousand, as in apimachinery.
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)")
# The largest magnitude a Quantity holds; the API server caps bigger ones silently, we refuse them.
MAX_QUANTITY = Decimal(2**63 - 1)
MAX_EXPONENT = 99   # far beyond both ends (nano resolution, 2^63): anything more is a typo



def check_configmap_key(key: object) -> str | None:
    """Why ``key`` cannot be a ConfigMap key (the API server's rule), or None when it can:
    letters, digits, '-', '_' and '.', at most 253 characters, not '.' or '..' and not starting
    with '..' (the kubelet's own '..data' links live there)."""
    if not isinstance(key, str) or not _CONFIGMAP_KEY.fullmatch(key):
        return "only letters, digits, '-', '_' and '.' are allowed"
    if len(key) > MAX_CONFIGMAP_KEY_LENGTH:
        return f"at most {MAX_CONFIGMAP_KEY_LENGTH} characters"
    if key in (".", "..") or key.startswith(".."):
        return "must not be '.' or '..' nor start with '..'"
    return None


def is_dns_label(text: object) -> bool:
    return isinstance(text, str) and len(text) <= MAX_DNS_LABEL_LENGTH and bool(_DNS_LABEL.fullmatch(text))


class InvalidName(ValueError):
    """A name given to a call that names no object (a namespace here, any object in the SDK's
    ``sdk.ops.object_name``): refused before any call."""


def check_namespace_name(value: object) -> str:
    """``value`` when it can name a namespace (a DNS-1123 label), else InvalidName. A namespace is a
    part of every API path the operator and the SDK build: ``..`` or a ``/`` there would name
    another object than the one meant."""
    if not is_dns_label(value):
        raise InvalidName(f"{value!r} is not a namespace name (a DNS-1123 label: lowercase letters, digits "
                         f"and '-', at most {MAX_DNS_LABEL_LENGTH} characters)"[:300])
    assert isinstance(value, str)
    return value


def is_dns_subdomain(text: object) -> bool:
    return isinstance(text, str) and len(text) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(text))


def is_qualified_name(text: object) -> bool:
    """A label key or resource name: ``[prefix/]name``, prefix a DNS subdomain, name <= 63."""
    if not isinstance(text, str):
        return False
    prefix, slash, name = text.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(_NAME_PART.fullmatch(name))


def is_label_value(text: object) -> bool:
    return isinstance(text, str) and len(text) <= 63 and bool(_LABEL_VALUE.fullmatch(text))


def parse_quantity(text: object) -> Decimal:
    """A Kubernetes quantity ("500m", "128Mi", "1.5", "1e3", or an int or finite float) as an exact
    Decimal in base units; ValueError for anything else, at most 2^63-1 in magnitude."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float, Decimal)):
        raise ValueError(f"not a quantity (a string such as '500m' or '1Gi'): {text!r}"[:200])
    match = _QUANTITY.fullmatch(str(text).strip())
    if not match:
        raise ValueError(f"not a quantity (such as '500m', '1Gi' or '1e3'): {text!r}"[:200])
    number, exponent, suffix = match.groups()
    # Refused before any arithmetic, so a huge exponent or a long digit string cannot overflow.
    digits = (exponent or "").lstrip("+-").lstrip("0") or "0"
    scale = int(digits) if len(digits) <= 3 else MAX_EXPONENT + 1
    if exponent and exponent.startswith("-"):
        scale = -scale
    mantissa = Decimal(number)
    if abs(scale) > MAX_EXPONENT:
        raise ValueError(f"quantity {text!r}: the exponent is out of range (-{MAX_EXPONENT}..{MAX_EXPONENT})"[:200])
    if mantissa and mantissa.adjusted() + scale > 19:
        raise ValueError(f"quantity {text!r} is larger than Kubernetes' maximum (2^63-1)"[:200])
    with localcontext() as ctx:
        ctx.prec = 64   # exact for 2^63 at nano resolution
        value = mantissa.scaleb(scale) if exponent else mantissa * _SUFFIX[suffix or ""]
    if abs(value) > MAX_QUANTITY:
        raise ValueError(f"quantity {text!r} is larger than Kubernetes' maximum (2^63-1)"[:200])
    return value


def format_quantity(value: float | Decimal) -> str:
    """Shortest readable form: milli for fractions, binary suffixes for large whole numbers; a
    fraction finer than a milli exactly as it is (a quota written 4m for 4.5m would refuse the
    pod it was made to hold), so what is written never parses back smaller."""
    value = Decimal(str(value))
    if value != value.to_integral_value():
        millis = value * 1000
        return f"{int(millis)}m" if millis == millis.to_integral_value() else f"{value.normalize():f}"
    whole = int(value)
    for suffix in ("Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if whole >= unit and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


# -- what a pod requests, and what a ResourceQuota charges it ------------------------------------
def admitted(pod: Mapping, overhead: Mapping[str, str] | None) -> dict:
    """A pod spec as admitted: the RuntimeClass admission plugin sets ``overhead`` from the
    RuntimeClass's ``overhead.podFixed``."""
    return {**pod, "overhead": dict(overhead)} if overhead else dict(pod)


def container_amounts(container: Mapping) -> dict[str, dict[str, Decimal]]:
    """A container's requests and limits as the API server stores them: a request it lacks is its
    limit (SetDefaults_Pod copies each limit without a request)."""
    resources = container.get("resources") or {}
    limits = {r: parse_quantity(q) for r, q in (resources.get("limits") or {}).items()}
    requests = {**limits, **{r: parse_quantity(q) for r, q in (resources.get("requests") or {}).items()}}
    return {"requests": requests, "limits": limits}


def pod_amounts(pod: Mapping) -> dict[str, dict[str, Decimal]]:
    """A pod's effective requests and limits, as the scheduler and the quota evaluator count them
    (component-helpers resource.PodRequests/PodLimits): the regular containers summed (they run
    together), the largest init container where it is more (they run one at a time, first), then
    the overhead: added to every request, and to a limit the pod sets."""
    out: dict[str, dict[str, Decimal]] = {}
    for kind in ("requests", "limits"):
        total: dict[str, Decimal] = {}
        for container in pod.get("containers") or []:
            for resource, amount in container_amounts(container)[kind].items():
                total[resource] = total.get(resource, Decimal(0)) + amount
        for container in pod.get("initContainers") or []:
            for resource, amount in container_amounts(container)[kind].items():
                total[resource] = max(total.get(resource, Decimal(0)), amount)
        for resource, amount in (pod.get("overhead") or {}).items():
            if kind == "requests" or resource in total:
                total[resource] = total.get(resource, Decimal(0)) + parse_quantity(amount)
        out[kind] = total
    return out


QUOTA_NATIVE = ("cpu", "memory", "ephemeral-storage")
# A quota on one of these admits no pod with a container that does not set it (the quota
# evaluator's Constraints, kept "for backward compatibility"): "must specify requests.memory".
QUOTA_REQUIRED = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")


def _compute_usage(amounts: Mapping[str, Mapping[str, Decimal]]) -> dict[str, Decimal]:
    """The quota evaluator's podComputeUsageHelper: bare cpu/memory/ephemeral-storage and
    ``requests.*`` are the requests, ``limits.*`` the native limits; hugepages and extended
    resources are charged as requests only."""
    usage: dict[str, Decimal] = {}
    for resource, amount in amounts.get("requests", {}).items():
        if resource in QUOTA_NATIVE or resource.startswith("hugepages-"):
            usage[resource] = usage[f"requests.{resource}"] = amount
        elif "/" in resource and not resource.startswith("kubernetes.io/"):
            usage[f"requests.{resource}"] = amount
    for resource, amount in amounts.get("limits", {}).items():
        if resource in QUOTA_NATIVE:
            usage[f"limits.{resource}"] = amount
    return usage


def quota_usage(pod: Mapping) -> dict[str, Decimal]:
    """What one pod charges to a ResourceQuota that matches it (the pod evaluator's Usage)."""
    return {"pods": Decimal(1), "count/pods": Decimal(1), **_compute_usage(pod_amounts(pod))}


def quota_charges_pods(resource: str) -> bool:
    """Whether a ResourceQuota's ``hard`` entry is one a pod can be charged (``requests.storage``
    is persistent volume claims')."""
    return (resource in ("pods", "count/pods") or resource in QUOTA_NATIVE
            or resource.startswith(("requests.", "limits.", "hugepages-")) and resource != "requests.storage")


def unset_by_containers(pod: Mapping, required: set[str]) -> dict[str, list[str]]:
    """Resource -> the containers (init containers too) that do not set it, of the ``required``
    ones among :data:`QUOTA_REQUIRED`: the quota admission refuses such a pod."""
    wanted = sorted(required.intersection(QUOTA_REQUIRED))
    missing: dict[str, list[str]] = {}
    for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        has = _compute_usage(container_amounts(container))
        for resource in wanted:
            if resource not in has:
                missing.setdefault(resource, []).append(str(container.get("name")))
    return missing


def best_effort(pod: Mapping) -> bool:
    """The pod's QoS class is BestEffort: no container (init containers too) has a cpu or memory
    request or limit above zero. As qos.GetPodQOS (pkg/apis/core/v1/helper/qos), the quota
    evaluator's isBestEffort, counts them: a request of "0" is none."""
    return not any(amount > 0 for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
                   for kind in container_amounts(c).values()
                   for resource, amount in kind.items() if resource in ("cpu", "memory"))


def guaranteed(container: Mapping) -> bool:
    """The container counts as Guaranteed in its pod's QoS class (qos.GetPodQOS): cpu and memory
    limits, each request (a missing one is its limit) equal to its limit. A pod is Guaranteed only
    when every container is."""
    amounts = container_amounts(container)
    return all(key in amounts["limits"] and amounts["requests"][key] == amounts["limits"][key]
               for key in ("cpu", "memory"))


def terminating(pod: Mapping) -> bool:
    """The pod has an ``activeDeadlineSeconds`` (at least 0): a ResourceQuota scoped
    ``Terminating`` charges it, one scoped ``NotTerminating`` never does (the quota evaluator's
    isTerminating, pkg/quota/v1/evaluator/core/pods.go)."""
    deadline = pod.get("activeDeadlineSeconds")
    return isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0


def cross_namespace_affinity(pod: Mapping) -> bool:
    """Some pod affinity or anti-affinity term of the pod (required or preferred) lists
    ``namespaces`` or has a ``namespaceSelector``, even ``{}``: a ResourceQuota scoped
    ``CrossNamespacePodAffinity`` charges it (the quota evaluator's usesCrossNamespacePodAffinity)."""
    affinity = pod.get("affinity")
    if not isinstance(affinity, Mapping):
        return False
    terms: list = []
    for kind in ("podAffinity", "podAntiAffinity"):
        both = affinity.get(kind) or {}
        terms += list(both.get(_REQUIRED) or [])
        terms += [w.get("podAffinityTerm") for w in both.get(_PREFERRED) or [] if isinstance(w, Mapping)]
    return any(isinstance(t, Mapping) and (bool(t.get("namespaces")) or t.get("namespaceSelector") is not None)
               for t in terms)


# -- a container's requests and limits, as the API server validates them --------------------------
# pkg/apis/core/validation: validateContainerResourceName and ValidateResourceRequirements, which
# refuse such a container in every pod (and a Job's or a pool's pod template) whatever the cluster.
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"
NATIVE_PREFIX = "kubernetes.io/"        # Kubernetes' own namespace (IsPrefixedNativeResource: "contains")


def is_extended_resource(name: str) -> bool:
    """A resource offered by a device plugin or an admin (``example.com/gpu``): domain-qualified,
    not in kubernetes.io/, and still a qualified name as a quota's ``requests.<name>``
    (IsExtendedResourceName)."""
    return ("/" in name and NATIVE_PREFIX not in name and not name.startswith("requests.")
            and is_qualified_name(f"requests.{name}"))


def hugepage_size(name: str) -> Decimal | None:
    """The page size of ``hugepages-<size>`` (a positive whole number of bytes), else None."""
    try:
        size = parse_quantity(name[len(HUGEPAGES_PREFIX):]) if name.startswith(HUGEPAGES_PREFIX) else None
    except ValueError:
        return None
    return size if size is not None and size > 0 and size == size.to_integral_value() else None


def container_resource_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a container's resource, or None."""
    if not isinstance(name, str) or not is_qualified_name(name):
        return "is not a valid resource name"
    if "/" not in name:
        if name in STANDARD_CONTAINER_RESOURCES:
            return None
        if name.startswith(HUGEPAGES_PREFIX):
            return None if hugepage_size(name) is not None else "is not hugepages-<page size> (e.g. hugepages-2Mi)"
        return (f"must be {', '.join(STANDARD_CONTAINER_RESOURCES)}, hugepages-<size> or a domain-qualified "
                "extended resource (e.g. example.com/gpu)")
    if NATIVE_PREFIX in name:
        # The API server takes it, but nothing can offer it: the kubelet registers a device
        # plugin's resource only under a name of its own domain (IsExtendedResourceName), and
        # Kubernetes defines no container resource of its own namespace: every pod would wait,
        # unschedulable, for ever.
        return (f"is in Kubernetes' own namespace ({NATIVE_PREFIX}), where no node offers a container resource: "
                "an extended resource is named under its vendor's domain (e.g. nvidia.com/gpu)")
    if not is_extended_resource(name):
        return "does not follow the extended resource name standard (<domain>/<name>, not requests.*)"
    return None


def container_resources_problem(requests: Mapping[str, Decimal],
                                limits: Mapping[str, Decimal]) -> tuple[str, str] | None:
    """(``requests.<name>`` or ``limits.<name>`` or ``""``, why) for requests and limits (names
    already checked) that the API server refuses in a container, or None. A resource that is not
    overcommitable (an extended one, hugepages) needs a limit, and its request must equal it; a
    request never exceeds its limit; an extended resource is counted in whole units; hugepages
    come in whole pages and with a cpu or memory request or limit beside them."""
    for kind, entries in (("limits", limits), ("requests", requests)):
        for name, amount in entries.items():
            if is_extended_resource(name) and amount != amount.to_integral_value():
                return f"{kind}.{name}", f"must be a whole number, got {format_quantity(amount)}"
            page = hugepage_size(name)
            if page is not None and amount % page:
                return f"{kind}.{name}", f"must be a whole number of {format_quantity(page)} pages"
    for name, request in requests.items():
        limit = limits.get(name)
        overcommitable = ("/" not in name or NATIVE_PREFIX in name) and not name.startswith(HUGEPAGES_PREFIX)
        if limit is None and not overcommitable:
            return f"limits.{name}", (f"must be set: a request of {name} needs a limit, equal to it (leave the "
                                      "request out and it takes the limit's value)")
        if limit is not None and not overcommitable and request != limit:
            return f"requests.{name}", f"must equal the limit ({format_quantity(limit)}): {name} is not overcommitable"
        if limit is not None and request > limit:
            return f"requests.{name}", f"must not exceed the limit ({format_quantity(limit)})"
    names = {*requests, *limits}
    if any(n.startswith(HUGEPAGES_PREFIX) for n in names) and not names & {"cpu", "memory"}:
        return "", "hugepages need a cpu or memory request or limit beside them"
    return None


def labels_problem(labels: object, at: str) -> tuple[str, str] | None:
    """(field, why) for a map of label keys to values the API server refuses (ValidateLabels: a
    nodeSelector, a label selector's matchLabels), or None; ``at`` is the map's own field."""
    if not isinstance(labels, Mapping):
        return at, "must be a map of label keys to values"
    for key, value in labels.items():
        if not is_qualified_name(key):
            return at, f"{key!r} is not a valid label key"[:200]
        if not is_label_value(value):
            return f"{at}[{key}]", f"{value!r} is not a valid label value (a string of at most 63 characters)"[:200]
    return None


# Operator -> how many values it takes: "some" (at least one), "none", "one".
LABEL_SELECTOR_OPERATORS = {"In": "some", "NotIn": "some", "Exists": "none", "DoesNotExist": "none"}
_ARITY = {"some": "must list values with In or NotIn", "none": "must be empty with Exists or DoesNotExist",
          "one": "must hold one value with Gt or Lt"}


def _requirement_problem(req: object, where: str, operators: Mapping[str, str],
                         label_values: bool) -> tuple[str, str] | None:
    """A {key, operator, values} requirement: an operator of ``operators`` with as many values as
    it takes, a label key, and with ``label_values`` each value a label value."""
    if not isinstance(req, Mapping):
        return where, "must be an object"
    values, problem = _items(req.get("values"), f"{where}.values")
    if problem:
        return problem
    operator = req.get("operator")
    arity = operators.get(operator) if isinstance(operator, str) else None
    if arity is None:
        return f"{where}.operator", f"must be one of {', '.join(operators)}"
    if (arity, bool(values)) in (("some", False), ("none", True)) or arity == "one" and len(values) != 1:
        return f"{where}.values", _ARITY[arity]
    if not is_qualified_name(req.get("key")):
        return f"{where}.key", "must be a label key"
    for i, value in enumerate(values if label_values else ()):
        if not is_label_value(value):
            return f"{where}.values[{i}]", f"{value!r} is not a valid label value (a string of at most 63 characters)"[:200]
    return None


def label_selector_problem(selector: object, at: str) -> tuple[str, str] | None:
    """(field, why) for a LabelSelector the API server refuses when it creates a pod, or None
    (apimachinery's ValidateLabelSelector, as validatePodAffinityTerm applies it to labelSelector
    and namespaceSelector): matchLabels valid labels, each expression an operator of
    ``LABEL_SELECTOR_OPERATORS`` with values for In and NotIn only, a label key, label values."""
    if selector is None:
        return None
    if not isinstance(selector, Mapping):
        return at, "must be an object {matchLabels, matchExpressions}"
    if selector.get("matchLabels") is not None and (problem := labels_problem(selector["matchLabels"],
                                                                               f"{at}.matchLabels")):
        return problem
    return _expressions_problem(selector, at, LABEL_SELECTOR_OPERATORS, True)


# -- a pod's affinity, as the API server validates it (validateAffinity) ---------------------------
# Only rules every pod is refused for; the rest is left to it. A node selector's values are not
# label values (Gt and Lt take integers), as in validateNodeSelectorRequirement.
NODE_SELECTOR_OPERATORS = {**LABEL_SELECTOR_OPERATORS, "Gt": "one", "Lt": "one"}
NODE_FIELD_KEYS = ("metadata.name",)   # the one node field a selector may name
_REQUIRED, _PREFERRED = "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"


def _items(value: object, at: str) -> tuple[list, tuple[str, str] | None]:
    """A list field (absent or null: empty), or the problem of its type."""
    if value is None:
        return [], None
    if not isinstance(value, list):
        return [], (at, "must be a list")
    return value, None


def _expressions_problem(holder: Mapping, at: str, operators: Mapping, label_values: bool) -> tuple[str, str] | None:
    """The problem of ``holder``'s matchExpressions (a list of requirements), or None."""
    expressions, problem = _items(holder.get("matchExpressions"), f"{at}.matchExpressions")
    if problem:
        return problem
    for i, req in enumerate(expressions):
        if problem := _requirement_problem(req, f"{at}.matchExpressions[{i}]", operators, label_values):
            return problem
    return None


def _node_term(term: object, at: str) -> tuple[str, str] | None:
    if not isinstance(term, Mapping):
        return at, "must be an object"
    if problem := _expressions_problem(term, at, NODE_SELECTOR_OPERATORS, False):
        return problem
    fields, problem = _items(term.get("matchFields"), f"{at}.matchFields")
    if problem:
        return problem
    for i, req in enumerate(fields):
        where = f"{at}.matchFields[{i}]"
        if not isinstance(req, Mapping):
            return where, "must be an object"
        if req.get("key") not in NODE_FIELD_KEYS:
            return f"{where}.key", f"must be {', '.join(NODE_FIELD_KEYS)}"
        if req.get("operator") not in ("In", "NotIn"):
            return f"{where}.operator", "must be In or NotIn"
        if not isinstance(req.get("values"), list) or len(req["values"]) != 1:
            return f"{where}.values", "must hold one node name"
    return None


def _weighted(item: object, at: str, inner: str) -> tuple[Mapping, tuple[str, str] | None]:
    if not isinstance(item, Mapping):
        return {}, (at, "must be an object")
    weight = item.get("weight")
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        return {}, (f"{at}.weight", "must be an integer in 1..100")
    return item.get(inner) or {}, None


def _pod_term(term: object, at: str) -> tuple[str, str] | None:
    if not isinstance(term, Mapping):
        return at, "must be an object"
    key = term.get("topologyKey")
    if not key:
        return f"{at}.topologyKey", "is required (e.g. kubernetes.io/hostname)"
    if not is_qualified_name(key):
        return f"{at}.topologyKey", "must be a label key"
    for selector in ("labelSelector", "namespaceSelector"):
        if problem := label_selector_problem(term.get(selector), f"{at}.{selector}"):
            return problem
    return None


def affinity_problem(affinity: Mapping) -> tuple[str, str] | None:
    """(path under affinity, why) for an affinity the API server refuses in every pod, or None: a
    required node affinity without a term, a node selector requirement whose operator and values
    disagree, a node field other than metadata.name, a preference's weight outside 1..100, a pod
    (anti-)affinity term without a topology key or with a label or namespace selector the API
    server refuses (``label_selector_problem``)."""
    node = affinity.get("nodeAffinity") or {}
    required = node.get(_REQUIRED)
    if required is not None:
        if not isinstance(required, Mapping):
            return f"nodeAffinity.{_REQUIRED}", "must be an object"
        terms, problem = _items(required.get("nodeSelectorTerms"), f"nodeAffinity.{_REQUIRED}.nodeSelectorTerms")
        if problem:
            return problem
        if not terms:
            return f"nodeAffinity.{_REQUIRED}.nodeSelectorTerms", "must hold at least one term (none matches no node)"
        for i, term in enumerate(terms):
            if problem := _node_term(term, f"nodeAffinity.{_REQUIRED}.nodeSelectorTerms[{i}]"):
                return problem
    if problem := _each_term(node.get(_PREFERRED), f"nodeAffinity.{_PREFERRED}", _node_term, "preference"):
        return problem
    for kind in ("podAffinity", "podAntiAffinity"):
        pod = affinity.get(kind) or {}
        if problem := _each_term(pod.get(_REQUIRED), f"{kind}.{_REQUIRED}", _pod_term):
            return problem
        if problem := _each_term(pod.get(_PREFERRED), f"{kind}.{_PREFERRED}", _pod_term, "podAffinityTerm"):
            return problem
    return None


def _each_term(value: Any, at: str, check: Callable[[Any, str], tuple[str, str] | None],
               weighted: str | None = None) -> tuple[str, str] | None:
    """The first problem of a list of terms, each checked by ``check``; with ``weighted``, each item
    is a weight and the term under that key."""
    items, problem = _items(value, at)
    if problem:
        return problem
    for i, item in enumerate(items):
        where = f"{at}[{i}]"
        if weighted is None:
            term, problem = item, None
        else:
            term, problem = _weighted(item, where, weighted)
            where = f"{where}.{weighted}"
        if problem or (problem := check(term, where)):
            return problem
    return None
