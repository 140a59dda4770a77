"""Can the cluster serve this spec? Pure checks done before anything is created.

Answers become ``Stalled`` conditions with a reason (DESIGN section 6) instead of Jobs that
never start: a quota that cannot hold even one episode pod, or the RuntimeClass overhead that
must be added to every pod's resources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from rolloutbatch.core.model import BatchSpec
from rolloutbatch.core.spec import format_quantity, parse_quantity


class Stalled(Exception):
    """The batch cannot proceed; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def runtime_overhead(runtime_class: Mapping) -> dict[str, str] | None:
    """The pod overhead a RuntimeClass adds (``overhead.podFixed``), if any."""
    fixed = (runtime_class.get("overhead") or {}).get("podFixed")
    return dict(fixed) if fixed else None


def pod_resources(spec: BatchSpec, overhead: Mapping[str, str] | None) -> dict[str, dict[str, Decimal]]:
    """Requests and limits of one episode pod as the quota system counts them: the container's
    plus the RuntimeClass overhead (added by the RuntimeClass admission plugin)."""
    out: dict[str, dict[str, Decimal]] = {}
    for kind in ("requests", "limits"):
        for resource, value in sorted((spec.resources.get(kind) or {}).items()):
            amount = parse_quantity(str(value)) + parse_quantity(str((overhead or {}).get(resource, "0")))
            out.setdefault(kind, {})[resource] = amount
    return out


def pod_footprint(spec: BatchSpec, overhead: Mapping[str, str] | None) -> dict[str, float]:
    """What one episode pod charges to a ResourceQuota: requests/limits plus the overhead."""
    footprint: dict[str, float] = {"pods": 1.0, "count/pods": 1.0}
    for kind, amounts in pod_resources(spec, overhead).items():
        for resource, amount in amounts.items():
            footprint[f"{kind}.{resource}"] = float(amount)
            if kind == "requests":
                footprint[resource] = float(amount)  # bare "cpu"/"memory" in a quota mean requests
    return footprint


def check_quota_fits(quotas: Sequence[Mapping], spec: BatchSpec,
                     overhead: Mapping[str, str] | None) -> str | None:
    """Return a message when some ResourceQuota cannot hold even one episode pod, else None."""
    footprint = pod_footprint(spec, overhead)
    for quota in quotas:
        name = quota.get("metadata", {}).get("name", "?")
        hard = (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        for resource, limit in hard.items():
            need = footprint.get(resource)
            if need is None:
                continue
            free = float(parse_quantity(str(limit))) - float(parse_quantity(str(used.get(resource, "0"))))
            if need > free:
                return (f"ResourceQuota {name} leaves {format_quantity(free)} of {resource}, "
                        f"one episode pod needs {format_quantity(need)}")
    return None
