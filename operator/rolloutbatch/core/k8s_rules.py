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
from collections.abc import Mapping
from decimal import Decimal, localcontext

_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_CONFIGMAP_KEY_LENGTH = 253
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
    """The pod's QoS class is BestEffort: no container sets a cpu or memory request or limit."""
    return not any(r in ("cpu", "memory") for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
                   for kind in container_amounts(c).values() for r in kind)
