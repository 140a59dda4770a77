"""Kubernetes resource quantities (pure)."""
from __future__ import annotations

from decimal import Decimal, ROUND_CEILING

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}


def parse_quantity(value: str | int | float) -> Decimal:
    """'100m' -> 0.1, '64Gi' -> 68719476736, '1e3' -> 1000."""
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    s = str(value).strip()
    if not s:
        raise ValueError("empty quantity")
    for suffix, mult in _BINARY.items():
        if s.endswith(suffix):
            return Decimal(s[: -len(suffix)]) * mult
    if s[-1] in "numkMGTPE":
        return Decimal(s[:-1]) * _DECIMAL[s[-1]]
    return Decimal(s)  # plain number or exponent form


def ceil_div(value: Decimal, divisor: Decimal) -> int:
    """Resource value expressed in units of divisor, rounded up (as the kubelet does)."""
    return int((value / divisor).to_integral_value(rounding=ROUND_CEILING))
