"""Status conditions that kstatus, Argo CD and ``kubectl wait`` all read the same way.

While a batch runs: Reconciling=True, Ready=False. Success: Ready=True, Succeeded=True.
Failure or a spec the cluster cannot serve: Stalled=True, Ready=False, Succeeded=False
(kstatus reads Ready=False alone as "in progress", so failure must say Stalled). The
``lastTransitionTime`` of a condition changes only when its status flips (docs/design.md §6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rolloutbatch.core.vocabulary import FAILED, SUCCEEDED, TERMINAL_PHASES as TERMINAL


def set_condition(conditions: Sequence[Mapping], type_: str, status: str, reason: str, message: str,
                  generation: int, now_iso: str) -> list[dict]:
    result, found = [], False
    for cond in conditions:
        if cond.get("type") != type_:
            result.append(dict(cond))
            continue
        found = True
        transition = cond.get("lastTransitionTime") if cond.get("status") == status else now_iso
        result.append({"type": type_, "status": status, "reason": reason, "message": message,
                       "observedGeneration": generation, "lastTransitionTime": transition or now_iso})
    if not found:
        result.append({"type": type_, "status": status, "reason": reason, "message": message,
                       "observedGeneration": generation, "lastTransitionTime": now_iso})
    return result


def conditions_for(phase: str, reason: str, message: str, generation: int, previous: Sequence[Mapping],
                   now_iso: str) -> list[dict]:
    if phase == SUCCEEDED:
        wanted = [("Ready", "True"), ("Succeeded", "True"), ("Reconciling", "False"), ("Stalled", "False")]
    elif phase == FAILED:
        wanted = [("Ready", "False"), ("Succeeded", "False"), ("Reconciling", "False"), ("Stalled", "True")]
    else:
        wanted = [("Ready", "False"), ("Reconciling", "True"), ("Stalled", "False")]
    conditions: list[dict] = [dict(c) for c in previous if c.get("type") in ("Ready", "Succeeded", "Reconciling", "Stalled")]
    for type_, status in wanted:
        conditions = set_condition(conditions, type_, status, reason, message, generation, now_iso)
    if phase not in TERMINAL:
        conditions = [c for c in conditions if c["type"] != "Succeeded"]
    order = {"Ready": 0, "Succeeded": 1, "Reconciling": 2, "Stalled": 3}
    return sorted(conditions, key=lambda c: order.get(c["type"], 9))
