"""Kubernetes resource quantities (pure). Parsing is rolloutbatch.core.k8s_rules.parse_quantity:
one parser for the operator and this node agent."""
from __future__ import annotations

from decimal import Decimal, ROUND_CEILING


def ceil_div(value: Decimal, divisor: Decimal) -> int:
    """Resource value expressed in units of divisor, rounded up (as the kubelet does)."""
    return int((value / divisor).to_integral_value(rounding=ROUND_CEILING))
