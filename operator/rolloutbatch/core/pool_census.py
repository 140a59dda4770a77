"""A RolloutPool's pods sorted, and the status they make (core.pools; docs/design.md §5.17).

Pure: :func:`census` sorts the pool's unclaimed pods (warm, starting, dead, stuck, stale),
:func:`pods_to_create` and :func:`pods_to_delete` say what a round of the pool's daemon
(service.pools) does about them, and :func:`pool_status` is what it writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pool_spec import PoolRef, PoolSpec
from rolloutbatch.core.pools import is_warm, oldest_first
from rolloutbatch.core.pool_children import TEMPLATE_ANNOTATION, claimed_by, network_of
from rolloutbatch.core.verdict import CLOCK_SKEW_TOLERANCE_SECONDS, INFRASTRUCTURE_REASONS, over_own_limits
from rolloutbatch.core.pod_reading import annotation_seconds, parse_time, pod_facts
from rolloutbatch.core.vocabulary import NOT_DELIVERED_EXIT

# While the episodes a pool gave out start, it starts no pods: a refill's pod starts (sandboxes,
# networks, the kubelets' and the API server's work) took the machine's CPU from them
# (bench/README.md, "What a claimed episode waits for"). It waits REFILL_HOLD_SECONDS after the
# newest claim or hand-over, and while a claimed pod still waits for its hand-over (a batch of
# hundreds is handed over for tens of seconds), never more than REFILL_HOLD_MAX_SECONDS in all.
REFILL_HOLD_SECONDS = 3.0
REFILL_HOLD_MAX_SECONDS = 20.0


# A claim is enrolled seconds after it was made (its batch's first wave handed over), or by the
# next operator after a crash: an ended claim still unenrolled this long after is an orphan (its
# batch gone) and no longer holds the pool's deletion.
UNENROLLED_HOLD_SECONDS = 300.0


def is_held(pod: Mapping, now: float) -> bool:
    """A pod of the pool's namespace that a batch holds now: claimed or cold, not ended; or claimed
    and not enrolled yet, ended or not (its batch has not seen it: its end is still to be judged,
    and the pool's deletion must not take it first), for UNENROLLED_HOLD_SECONDS after its claim. A
    claim time further ahead than clocks disagree (an edited annotation) is read as long past: it
    would hold the deletion for ever."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ended = (pod.get("status") or {}).get("phase") in (v.PodPhase.SUCCEEDED, v.PodPhase.FAILED)
    if claimed_by(pod) is not None and labels.get(naming.LABEL_EPISODE_ROLE) == naming.ROLE_WARM:
        claimed = annotation_seconds(meta, naming.ANNOTATION_CLAIMED_AT) or 0.0
        if claimed > now + CLOCK_SKEW_TOLERANCE_SECONDS:
            claimed = 0.0
        return not meta.get("deletionTimestamp") and (not ended or now - claimed < UNENROLLED_HOLD_SECONDS)
    return bool(labels.get(naming.LABEL_BATCH_UID) or claimed_by(pod) is not None) and not ended


def held_pods(pods: Sequence[Mapping], now: float) -> int:
    """How many pods of the pool's namespace batches hold now (:func:`is_held`)."""
    return sum(1 for p in pods if is_held(p, now))


def holding_batches(held: Sequence[Mapping], jobs: Sequence[Mapping]) -> list[str]:
    """The batches that hold a pool's deletion, each once, sorted: those of the ``held`` pods
    (:func:`is_held`) and of the running ``jobs``. A batch is known by its uid (its pods' and Job's
    batch-uid label, or the claimed-by annotation of a claim not enrolled yet, which carries no
    label), and said by its name where any of its objects carries it, else as ``uid <uid>``."""
    said: dict[str, str] = {}
    for obj in (*held, *jobs):
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        uid, name = labels.get(naming.LABEL_BATCH_UID) or claimed_by(obj), labels.get(naming.LABEL_BATCH_NAME)
        if uid is None:   # its batch's uid label edited away: counted by itself
            said[f"object {meta.get('uid') or meta.get('name')}"] = name or "?"
        else:
            said[uid] = name or said.get(uid) or f"uid {uid}"
    return sorted(said.values())


def held_elsewhere(pods: Sequence[Mapping], network: str, now: float) -> dict[str, int]:
    """The pods batches hold (:func:`is_held`) that were made under a network other than the
    pool's ``network`` now, counted by theirs: they keep it until they end (core.pool_children.network_policies)."""
    out: dict[str, int] = {}
    for pod in pods:
        theirs = network_of(pod)
        if theirs and theirs != network and is_held(pod, now):
            out[theirs] = out.get(theirs, 0) + 1
    return out


def refill_hold(pods: Sequence[Mapping], now: float, short_since: float | None = None) -> float:
    """Seconds the pool still waits before it creates pods (see REFILL_HOLD_SECONDS): after the
    newest claim or hand-over of a pod of its namespace, and while a claimed pod waits for its
    hand-over; never longer than REFILL_HOLD_MAX_SECONDS after ``short_since``, when the pool first
    found itself short, so batches that claim every second or two cannot hold it off for good.
    A time further ahead than clocks disagree (an edited annotation, kept on a finished pod) is
    not read: it would hold every round."""
    def seconds(meta: Mapping, key: str) -> float | None:
        t = annotation_seconds(meta, key)
        return t if t is not None and t <= now + CLOCK_SKEW_TOLERANCE_SECONDS else None

    ends = 0.0
    for pod in pods:
        meta = pod.get("metadata") or {}
        claimed, delivered = seconds(meta, naming.ANNOTATION_CLAIMED_AT), seconds(meta, naming.ANNOTATION_DELIVERED_AT)
        for t in (claimed, delivered):
            if t is not None:
                ends = max(ends, t + REFILL_HOLD_SECONDS)
        # its hand-over is still to come: looked at again in a second (not one claimed so long ago
        # that it is not coming: a pod left to its deadline would slow every later refill)
        if claimed is not None and delivered is None and claimed > now - REFILL_HOLD_MAX_SECONDS \
                and not meta.get("deletionTimestamp") \
                and (pod.get("status") or {}).get("phase") not in (v.PodPhase.SUCCEEDED, v.PodPhase.FAILED):
            ends = max(ends, now + 1.0)
    if short_since is not None:
        ends = min(ends, short_since + REFILL_HOLD_MAX_SECONDS)
    return max(0.0, ends - now)


@dataclasses.dataclass(frozen=True)
class PoolCensus:
    """The pool's pods, sorted by what the pool does with them."""
    warm: tuple[str, ...]            # names, ready to claim
    starting: tuple[str, ...]        # created, not warm yet, healthy so far
    dead: tuple[str, ...]            # ended or broken while unclaimed: delete and replace
    stuck: tuple[tuple[str, str, str], ...]   # (name, reason, message): the template cannot run
    stale: tuple[str, ...]           # warm or starting from an older template (template_digest)
    unplaced: tuple[tuple[str, str], ...] = ()   # (name, the scheduler's message): starting, not placed yet


def _waiting(pod: Mapping) -> tuple[str, str] | None:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in v.IMAGE_WAITING_REASONS:
            return v.PoolReason.IMAGE, str(waiting.get("message") or reason)[:500]
        if reason == "CreateContainerConfigError" or reason == "CreateContainerError":
            return v.PoolReason.PODS_NOT_CREATED, str(waiting.get("message") or reason)[:500]
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == v.CONDITION_FALSE \
                and cond.get("reason") == "Unschedulable":
            return v.PoolReason.UNSCHEDULABLE, str(cond.get("message") or "no node fits the pod")[:500]
    return None


def _disrupted(pod: Mapping) -> bool:
    """Ended by the node or the control plane (an eviction, a node's graceful shutdown: the
    kubelet's TERM, which a waiting launcher answers with NOT_DELIVERED_EXIT too): capacity lost,
    not a prepare that failed. Such a pod is replaced at once, not after the stuck back-off. Not an
    eviction for the pod's own storage limits: a prepare that fills its workspace fails that way,
    and replaced at once it would churn pods for ever."""
    facts = pod_facts(pod)
    return (facts.disrupted or facts.pod_reason in INFRASTRUCTURE_REASONS) and not over_own_limits(facts)


# A pod whose containers have not started this long after it was scheduled (a sandbox the node
# cannot make: a RuntimeClass handler the nodes lack, a CNI or a volume that fails) holds the pool
# Stalled, saying so: nothing else bounds ContainerCreating. It is kept, not replaced (the kubelet
# shows an image pull in progress the same way, and multi-GB task images take minutes), and the
# pool makes no more pods until it starts or the spec changes.
NOT_STARTED_SECONDS = 900


def census(pods: Sequence[Mapping], template: str, now: float | None = None) -> PoolCensus:
    """The pool's unclaimed pods sorted, each kind oldest first; ``template``: the digest of
    today's (template_digest); ``now`` (Unix seconds) bounds how long a pod may not start."""
    warm, starting, dead, stuck, stale = [], [], [], [], []
    unplaced: list[tuple[str, str]] = []
    for pod in sorted(pods, key=oldest_first):
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if (meta.get("labels") or {}).get(naming.LABEL_EPISODE_ROLE) != naming.ROLE_WARM or meta.get("deletionTimestamp") \
                or claimed_by(pod) is not None:   # a batch's, its labels not written yet
            continue
        name = meta.get("name", "")
        # A container that ended makes a warm pod dead even while another still runs (a pool
        # with a verifier: its pod stays Running with restartPolicy Never).
        if status.get("phase") in (v.PodPhase.SUCCEEDED, v.PodPhase.FAILED) or _exit_code(pod) is not None:
            dead.append(name)
            if (meta.get("annotations") or {}).get(TEMPLATE_ANNOTATION) != template:
                continue   # an older template's: replaced, and says nothing of today's
            if (start_error := _start_error(pod)) is not None and not _disrupted(pod):
                stuck.append((name, v.PoolReason.CANNOT_START, start_error))
            elif _exit_code(pod) == NOT_DELIVERED_EXIT and not _disrupted(pod):
                stuck.append((name, v.PoolReason.PREPARE_FAILED, _prepare_failure(pod)))
            elif (killed := _oom_killed(pod)) is not None and not _disrupted(pod) and not _was_ready(pod):
                # the kernel's KILL, which no launcher traps, before the pod was ever ready: its
                # prepare passed the limit, and every pod would (not churned). One killed once
                # ready (node memory pressure while it waited) is a warm pod that died: replaced.
                stuck.append((name, v.PoolReason.PREPARE_FAILED, killed))
            continue
        old = (meta.get("annotations") or {}).get(TEMPLATE_ANNOTATION) != template
        if is_warm(pod):
            (stale if old else warm).append(name)
            continue
        problem = _waiting(pod)
        if problem is not None and problem[0] == v.PoolReason.UNSCHEDULABLE and not old:
            # Kept pending, not replaced: a cluster autoscaler adds a node for a pending pod, and one
            # deleted and made again would start its wait over. Stuck once it waited this long.
            starting.append(name)
            unplaced.append((name, problem[1]))
            if now is not None and now - _unschedulable_since(pod, now) >= UNSCHEDULABLE_SECONDS:
                stuck.append((name, *problem))
        elif problem is not None:
            # an older template's broken pod is replaced, and says nothing of today's template
            # (a pool whose image was just fixed would wait out the stuck back-off)
            if not old:
                stuck.append((name, *problem))
            dead.append(name)
        elif old:
            stale.append(name)
        else:
            starting.append(name)
            # said, not deleted: an image still pulling looks the same, and may yet start
            if (slow := _not_started(pod, now)) is not None:
                stuck.append((name, *slow))
    return PoolCensus(tuple(warm), tuple(starting), tuple(dead), tuple(stuck), tuple(stale), tuple(unplaced))


# A pool pod the scheduler cannot place stalls the pool after this long (a batch's pods: the
# operator's --unschedulable-grace); until then the pool is filling, its message quoting the
# scheduler (a node may be on its way).
UNSCHEDULABLE_SECONDS = 120


def _unschedulable_since(pod: Mapping, now: float) -> float:
    """When the scheduler first said it cannot place the pod (its PodScheduled=False condition's
    transition; else the pod's creation; else now)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" \
                and cond.get("status") == v.CONDITION_FALSE:
            since = parse_time(cond.get("lastTransitionTime"))
            if since is not None:
                return since
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or now


def _not_started(pod: Mapping, now: float | None) -> tuple[str, str] | None:
    """A pod whose containers have not started NOT_STARTED_SECONDS after it was scheduled (else
    created; a running container is preparing, which its startupProbe bounds)."""
    scheduled = [parse_time(c.get("lastTransitionTime")) for c in (pod.get("status") or {}).get("conditions") or []
                 if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == v.CONDITION_TRUE]
    created = next((t for t in scheduled if t is not None), None) \
        or parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    if now is None or created is None or now - created < NOT_STARTED_SECONDS:
        return None
    statuses = [c for c in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(c, Mapping)]
    if any(c.get("started") or "running" in (c.get("state") or {}) for c in statuses):
        return None
    waiting = next(((c.get("state") or {}).get("waiting") or {} for c in statuses), {})
    why = str(waiting.get("reason") or (pod.get("status") or {}).get("phase") or v.PodPhase.PENDING)
    detail = f": {waiting['message']}" if waiting.get("message") else ""
    return v.PoolReason.CANNOT_START, (f"its containers have not started {int(now - created)}s after it was "
                                       f"scheduled ({why}{detail}); kubectl describe pod tells what the node says")[:500]


def _start_error(pod: Mapping) -> str | None:
    """The runtime's message when it could not start one of the pod's containers (an image without
    /bin/sh, which runs the launcher; a mount it cannot make): every pod of the template would
    end the same way, so it is the template's fault, not a pod's to replace at once."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (c.get("state") or {}).get("terminated") if isinstance(c, Mapping) else None
        if isinstance(terminated, Mapping) and terminated.get("reason") in v.START_ERROR_REASONS:
            return (f"container {c.get('name')} could not start ({terminated.get('reason')}): "
                    f"{terminated.get('message') or 'no message'}")[:500]
    return None


def _oom_killed(pod: Mapping) -> str | None:
    """The stall's message for a pod one of whose containers was killed for its memory."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (c.get("state") or {}).get("terminated") if isinstance(c, Mapping) else None
        if isinstance(terminated, Mapping) and terminated.get("reason") == v.OOM_KILLED_REASON:
            return (f"container {c.get('name')} was killed for using more memory than its limit (OOMKilled): "
                    f"raise resources.limits.memory, or make the prepare use less")[:500]
    return None


def _was_ready(pod: Mapping) -> bool:
    """The ended pod had been Ready (prepared, warm): its Ready condition last changed, to False,
    after its container started. A pod never Ready has had it False from before its containers
    started (the kubelet keeps a condition's transition time while its status stays the same)."""
    lost = next((parse_time(c.get("lastTransitionTime")) for c in (pod.get("status") or {}).get("conditions") or []
                 if isinstance(c, Mapping) and c.get("type") == v.CONDITION_READY and c.get("status") == v.CONDITION_FALSE), None)
    started = [parse_time(((c.get("state") or {}).get("terminated") or {}).get("startedAt"))
               for c in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(c, Mapping)]
    known = [t for t in started if t is not None]
    return lost is not None and bool(known) and lost > max(known)


def _exit_code(pod: Mapping) -> int | None:
    """The exit code of a container that ended (NOT_DELIVERED_EXIT first: a failed prepare)."""
    codes = [terminated["exitCode"] for c in (pod.get("status") or {}).get("containerStatuses") or []
             if isinstance(c, Mapping) and "exitCode" in (terminated := (c.get("state") or {}).get("terminated") or {})]
    return NOT_DELIVERED_EXIT if NOT_DELIVERED_EXIT in codes else (codes[0] if codes else None)


def _prepare_failure(pod: Mapping) -> str:
    """The stall's message for a pod whose prepare failed: what its launcher left as the termination
    message (a line saying how the prepare ended, then the end of its output; core.pool_delivery),
    printable, the output's last PREPARE_SAID_CHARS."""
    statuses = [c for c in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(c, Mapping)]
    said = next((str(ended.get("message") or "") for c in statuses
                 if (ended := (c.get("state") or {}).get("terminated") or {}).get("exitCode") == NOT_DELIVERED_EXIT), "")
    how, _, output = (_printable(part) for part in said.partition("\n"))
    if len(output) > PREPARE_SAID_CHARS:
        output = "..." + output[-PREPARE_SAID_CHARS:]
    said = " ".join(part for part in (how[:200], output) if part)
    return "the pool's prepare command failed or timed out" + (f" ({said})" if said else "")


def _printable(text: str) -> str:
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


PREPARE_SAID_CHARS = 300   # of the prepare's output quoted in the pool's condition and Event


def pods_to_create(spec: PoolSpec, found: PoolCensus) -> int:
    """New pods wanted: up to size warm-or-starting. While the template is stuck (its pods cannot
    run) none: a pool does not churn pods that fail the same way."""
    if found.stuck:
        return 0
    return max(0, spec.size - len(found.warm) - len(found.starting))


def pods_to_delete(spec: PoolSpec, found: PoolCensus) -> list[str]:
    """Dead pods, stale ones (an older template: replaced at once) and pods past size, starting ones
    first, then the newest warm ones (the oldest are claimed first anyway)."""
    extra = max(0, len(found.warm) + len(found.starting) - spec.size)
    surplus = list(found.starting[::-1][:extra])
    surplus += list(found.warm[::-1][:max(0, extra - len(surplus))])
    return [*found.dead, *found.stale, *surplus]


def pool_status(ref: PoolRef, spec: PoolSpec, found: PoolCensus, generation: int, claimed: int,
                now_iso: str, previous: Mapping | None = None, refill_held: bool = False,
                elsewhere: Mapping[str, int] | None = None) -> dict:
    """The status the pool's reconciler writes (``claimed``: held_pods; ``refill_held``: the round
    started no pods because of :func:`refill_hold`, which the message says so that a short pool
    with nothing starting is not a mystery; ``elsewhere``: :func:`held_elsewhere`, said so that a
    network changed under running batches is seen to apply to new pods only); conditions keep their transition time while
    unchanged. Never Ready while Stalled: a `kubectl wait --for=condition=Ready` must not pass on
    a pool whose pods cannot run. Reconciling=True while it fills: kstatus (Flux's health checks)
    reads a resource with neither Reconciling nor Stalled true as done, which a pool at 0/10 is not."""
    ready = len(found.warm) >= spec.size and not found.stuck
    if found.stuck:
        _, reason, message = found.stuck[0]
        summary = f"{len(found.warm)}/{spec.size} warm; pod {found.stuck[0][0]}: {message}"
    elif ready:
        reason, summary = v.PoolReason.WARM, f"{len(found.warm)}/{spec.size} warm"
    else:
        reason, summary = v.PoolReason.FILLING, f"{len(found.warm)}/{spec.size} warm, {len(found.starting)} starting"
        if found.unplaced:
            name, said = found.unplaced[0]
            summary += f"; {len(found.unplaced)} not placed yet (pod {name}: {said})"
        if refill_held:
            summary += (f"; the refill waits for the episodes just claimed to start "
                        f"(at most {REFILL_HOLD_MAX_SECONDS:g}s)")
    for network, count in sorted((elsewhere or {}).items()):
        summary += (f"; {count} pod(s) that batches hold keep the network {network} they were claimed under until "
                    f"they end (spec.network {spec.network} applies to the pods made since)")
    stalled = bool(found.stuck)
    return {
        "observedGeneration": generation, "sandboxNamespace": naming.pool_namespace(ref.namespace, ref.name),
        "readyPods": len(found.warm), "startingPods": len(found.starting), "claimedPods": claimed,
        "message": summary,
        "conditions": [
            _condition(previous, v.CONDITION_READY, v.CONDITION_TRUE if ready else v.CONDITION_FALSE, reason, summary,
                       now_iso, generation),
            _condition(previous, v.CONDITION_STALLED, v.CONDITION_TRUE if stalled else v.CONDITION_FALSE,
                       reason if stalled else v.PoolReason.WARM if ready else v.PoolReason.FILLING,
                       summary if stalled else "the pool's pods can run", now_iso, generation),
            _condition(previous, v.CONDITION_RECONCILING,
                       v.CONDITION_FALSE if ready or stalled else v.CONDITION_TRUE, reason, summary, now_iso,
                       generation),
        ],
    }


def stalled_status(ref: PoolRef, reason: str, message: str, generation: int, now_iso: str,
                   previous: Mapping | None = None) -> dict:
    """The status of a pool whose round could not run (an invalid spec, a refused object, no
    cluster rights): Ready=False, Stalled=True with ``reason``; the pod counts as last written
    (its pods are not listed then, and are not gone)."""
    last = previous or {}
    counts = {key: count if isinstance(count := last.get(key), int) and count >= 0 else 0
              for key in ("readyPods", "startingPods", "claimedPods")}
    return {
        "observedGeneration": generation, "sandboxNamespace": naming.pool_namespace(ref.namespace, ref.name),
        **counts, "message": message,
        "conditions": [_condition(previous, v.CONDITION_READY, v.CONDITION_FALSE, reason, message, now_iso, generation),
                       _condition(previous, v.CONDITION_STALLED, v.CONDITION_TRUE, reason, message, now_iso,
                                  generation),
                       _condition(previous, v.CONDITION_RECONCILING, v.CONDITION_FALSE, reason, message, now_iso,
                                  generation)],
    }


def deleting_status(ref: PoolRef, message: str, generation: int, now_iso: str,
                    previous: Mapping | None = None, claimed: int = 0) -> dict:
    """The status of a pool whose deletion waits for the batches on its pods (``claimed``: the pods
    they hold, held_pods): its warm pods are gone and none will be made (readyPods 0: `kubectl
    wait --for=condition=Ready` must not pass), Ready=False and Reconciling=True (the deletion goes
    on), Stalled=False, reason Deleting."""
    reason = v.PoolReason.DELETING
    return {
        "observedGeneration": generation, "sandboxNamespace": naming.pool_namespace(ref.namespace, ref.name),
        "readyPods": 0, "startingPods": 0, "claimedPods": claimed, "message": message,
        "conditions": [_condition(previous, v.CONDITION_READY, v.CONDITION_FALSE, reason, message, now_iso, generation),
                       _condition(previous, v.CONDITION_STALLED, v.CONDITION_FALSE, reason, message, now_iso,
                                  generation),
                       _condition(previous, v.CONDITION_RECONCILING, v.CONDITION_TRUE, reason, message, now_iso,
                                  generation)],
    }


def _condition(previous: Mapping | None, kind: str, status: str, why: str, message: str, now_iso: str,
               generation: int) -> dict:
    """One condition; its lastTransitionTime kept from ``previous`` while its status is unchanged."""
    before = next((c for c in (previous or {}).get("conditions") or []
                   if isinstance(c, Mapping) and c.get("type") == kind), {})
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    return {"type": kind, "status": status, "reason": str(why), "message": message,
            "lastTransitionTime": since or now_iso, "observedGeneration": generation}
