"""Status conditions that kstatus, Argo CD and ``kubectl wait`` all read the same way.

While a batch runs: Reconciling=True, Ready=False. Success: Ready=True, Succeeded=True.
Failure or a spec the cluster cannot serve: Stalled=True, Ready=False, Succeeded=False
(kstatus reads Ready=False alone as "in progress", so failure must say Stalled). Finished is
True once the batch ended either way (``kubectl wait --for=condition=Finished``: no single
condition of kstatus's says "done, whatever the outcome"). A batch stopped by spec.stop reads as
a failure does: it will never be Ready, so it must say Stalled (else kstatus, Flux and Argo CD
would wait for it forever); its phase and reason (Stopped) say it was the owner's decision. The
``lastTransitionTime`` of a condition changes only when its status flips (docs/design.md §6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rolloutbatch.core import vocabulary as v


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
    ready, succeeded, reconciling, stalled, finished = (v.CONDITION_READY, v.CONDITION_SUCCEEDED,
                                                        v.CONDITION_RECONCILING, v.CONDITION_STALLED,
                                                        v.CONDITION_FINISHED)
    true, false = v.CONDITION_TRUE, v.CONDITION_FALSE
    if phase == v.SUCCEEDED:
        wanted = [(ready, true), (succeeded, true), (reconciling, false), (stalled, false), (finished, true)]
    elif phase in (v.FAILED, v.STOPPED):
        wanted = [(ready, false), (succeeded, false), (reconciling, false), (stalled, true), (finished, true)]
    else:
        wanted = [(ready, false), (reconciling, true), (stalled, false), (finished, false)]
    conditions: list[dict] = [dict(c) for c in previous if c.get("type") in v.CONDITION_TYPES]
    for type_, status in wanted:
        conditions = set_condition(conditions, type_, status, reason, message, generation, now_iso)
    if phase not in v.TERMINAL_PHASES:
        conditions = [c for c in conditions if c["type"] != succeeded]
    order = {type_: n for n, type_ in enumerate(v.CONDITION_TYPES)}   # Ready, Succeeded, Reconciling, Stalled, Finished
    return sorted(conditions, key=lambda c: order.get(c["type"], 9))
