"""Kubernetes' own rules, as the API server applies them: ConfigMap keys, DNS names, qualified
names and label values, and resource quantities (parsed to and formatted from base units).

Pure: the spec checks (``core.spec``), the manifest builders and admission use them to refuse a
spec before the API server would refuse one of its children.

``parse_quantity`` is the one quantity parser of the repository. A maintained library's would be preferred, but the only one around is the ``kubernetes``
client's ``kubernetes.utils.parse_quantity``: the runtime does not depend on that package (tests
do), and it accepts "NaN", "Infinity" and any exponent. This one follows apimachinery's grammar
(k8s.io/apimachinery/pkg/api/resource, ``ParseQuantity``).
"""

from __future__ import annotations

import re
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
    """Shortest readable form: milli for fractions, binary suffixes for large whole numbers."""
    value = Decimal(str(value))
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    whole = int(value)
    for suffix in ("Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if whole >= unit and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)
