"""What the operator reads of a pod (core.model.PodFacts, from the API object as it is): its
phase as it settled, its containers' states and exit codes, the agent launcher's record, the
claim and hand-over annotations of a pooled pod, its deadlines and times (RFC 3339, to unix
seconds). core.verdict judges an episode from these facts; the tracker, the pools and the SDK's
sessions read a pod through them too.

Pure.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Mapping

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import AgentFacts, PodFacts
from rolloutbatch.core.naming import (AGENT_CONTAINER, ANNOTATION_CLAIMED_AT, ANNOTATION_DELIVERED_AT,
                                     ANNOTATION_VERIFIER_DELIVERED_AT, CONTAINER_NAME, INPUTS_CONTAINER,
                                     POOLED_ANNOTATION, VERIFIER_CONTAINER, VERIFIER_FILES_CONTAINER)
from rolloutbatch.core.pool_spec import task_mount_path_in

POD_SUCCEEDED, POD_FAILED = v.PodPhase.SUCCEEDED, v.PodPhase.FAILED
_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")
_INDEX = re.compile(r"[0-9]{1,9}")   # fullmatch: `$` would take "3\n"




def parse_time(value: object) -> float | None:
    """RFC 3339 timestamp (as the API writes them) to Unix seconds; None if absent or odd."""
    if not isinstance(value, str):
        return None
    match = _TIME.match(value.strip())
    if not match:
        return None
    y, mo, d, h, mi, s = (int(match.group(i)) for i in range(1, 7))
    ts = float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))
    if match.group(7):
        ts += float(match.group(7))
    zone = match.group(8)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        ts -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return ts


def completion_index(meta: Mapping) -> int | None:
    """The completion index: decimal digits only (never negative, never '1_0' or ' 3')."""
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        value = source.get(v.COMPLETION_INDEX_KEY)
        if value is not None:
            return int(value) if isinstance(value, str) and _INDEX.fullmatch(value) else None
    return None


def _agent_facts(statuses: list) -> AgentFacts | None:
    agent = next((c for c in statuses if c.get("name") == AGENT_CONTAINER), None)
    if agent is None:
        return None
    state = agent.get("state") or {}
    terminated = state.get("terminated")
    if terminated is not None:
        code = terminated.get("exitCode")
        return AgentFacts(state="terminated", exit_code=code if type(code) is int else None,
                          message=terminated.get("message") if isinstance(terminated.get("message"), str) else None,
                          finished_at=parse_time(terminated.get("finishedAt")))
    return AgentFacts(state="running" if state.get("running") else "waiting")


def _inputs_error(inits: list, phase: object) -> str | None:
    """Why the inputs init container did not copy the episode's input: it exited non-zero (or the
    runtime could not start it), or the pod failed before it finished. None once it exited 0,
    or when the pod has none. Nothing of the agent had run (it starts after), so the verdict is
    never the agent's."""
    inputs = next((c for c in inits if isinstance(c, Mapping) and c.get("name") == INPUTS_CONTAINER), None)
    if inputs is None:
        return None
    state = inputs.get("state") or {}
    terminated = state.get("terminated")
    if isinstance(terminated, Mapping):
        code = terminated.get("exitCode")
        if code == 0:
            return None
        message = terminated.get("message")
        said = f": {message.strip()}" if isinstance(message, str) and message.strip() else ""
        return (f"the inputs init container, which copies the episode's input, exited with code {code} "
                f"({terminated.get('reason') or 'Error'}){said}")[:1000]
    if phase != v.PodPhase.FAILED:
        return None
    waiting = state.get("waiting") or {}
    how = "running" if state.get("running") else f"waiting: {waiting.get('reason') or 'not started'}"
    return f"the pod failed before its inputs init container copied the episode's input ({how})"


def pod_facts(pod: Mapping) -> PodFacts:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    container = next((c for c in statuses if c.get("name") in (CONTAINER_NAME, VERIFIER_CONTAINER)),
                     statuses[0] if statuses else {})
    state = container.get("state") or {}
    terminated, waiting = state.get("terminated") or {}, state.get("waiting") or {}
    inits = status.get("initContainerStatuses") or []
    for init in inits:   # an agent image the node cannot run blocks the whole pod
        init_waiting = (init.get("state") or {}).get("waiting") or {}
        if init_waiting.get("reason") in v.IMAGE_WAITING_REASONS:
            waiting = init_waiting
    message = terminated.get("message")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    disruption = conditions.get("DisruptionTarget") or {}
    episode = next((c for c in statuses if c.get("name") in (CONTAINER_NAME, AGENT_CONTAINER)), {})
    verifier = next((c for c in statuses if c.get("name") == VERIFIER_CONTAINER), {})
    writer = next((c for c in statuses if c.get("name") == VERIFIER_FILES_CONTAINER), {})
    return PodFacts(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), uid=meta.get("uid", ""),
        index=completion_index(meta), created=_created(meta),
        phase=settled_phase(meta, spec, status), node=spec.get("nodeName"), image_id=container.get("imageID") or None,
        exit_code=terminated.get("exitCode"), restart_count=int(container.get("restartCount") or 0),
        terminated_reason=terminated.get("reason"), pod_reason=status.get("reason") or disruption.get("reason"),
        pod_message=status.get("message") or disruption.get("message"),
        disrupted=disruption.get("status") == v.CONDITION_TRUE, deleting=bool(meta.get("deletionTimestamp")),
        ready=(conditions.get("Ready") or {}).get("status") == v.CONDITION_TRUE or bool(state.get("running"))
        or bool(terminated),
        started_at=parse_time(terminated.get("startedAt") or (state.get("running") or {}).get("startedAt")),
        finished_at=parse_time(terminated.get("finishedAt")),
        waiting_reason=waiting.get("reason"), waiting_message=waiting.get("message"),
        termination_message=message if isinstance(message, str) else None, agent=_agent_facts([*inits, *statuses]),
        owner_uid=controller_uid(meta), unschedulable=_unschedulable(conditions.get("PodScheduled") or {}),
        scheduling_gates=_gates(spec), containers_reported=bool(statuses or inits),
        delete_requested_at=_delete_requested_at(meta), own_deadline_at=_own_deadline_at(spec, status),
        active_deadline_seconds=spec.get("activeDeadlineSeconds") if type(spec.get("activeDeadlineSeconds")) is int
        else None,
        pooled=_annotation(meta, POOLED_ANNOTATION) == "true",
        container_started=episode.get("started") is True,
        delivered_at=annotation_seconds(meta, ANNOTATION_DELIVERED_AT),
        claimed_at=annotation_seconds(meta, ANNOTATION_CLAIMED_AT),
        verifier_started=verifier.get("started") is True,
        verifier_delivered_at=annotation_seconds(meta, ANNOTATION_VERIFIER_DELIVERED_AT),
        has_files_writer=any(isinstance(c, Mapping) and c.get("name") == VERIFIER_FILES_CONTAINER
                             for c in spec.get("containers") or []),
        files_writer_started=writer.get("started") is True,
        files_writer_exit=_exit_code(writer),
        inputs_error=_inputs_error(inits, status.get("phase")),
        init_containers=tuple(str(c.get("name")) for c in spec.get("initContainers") or [] if isinstance(c, Mapping)),
        task_mount_path=task_mount_path_in(spec) if _annotation(meta, POOLED_ANNOTATION) == "true" else None,
        agent_oom_killed=agent_init_oom_killed(status),
    )


def settled_phase(meta: Mapping, spec: Mapping, status: Mapping) -> str:
    """The pod's phase, or Succeeded as soon as every container of a pool's pod or of a pod with a
    verifier has exited 0 under restartPolicy Never. The kubelet writes that phase only once it has
    torn the pod's sandbox down (kubernetes/kubernetes#108366), seconds later on a busy node
    (twenty pooled episodes that end together are torn down one after another), yet nothing can
    change the outcome then: no container runs again.

    Only where every container's PID 1 is one of the operator's launchers (core.pool_delivery,
    core.launchers): a shell that has no TERM handler while its phase runs, so a kill by the
    kubelet (the pod's deadline, an eviction, a node's shutdown) ends it with 137 or
    NOT_DELIVERED_EXIT, never 0. A Job's pod without a verifier runs the submitter's command as PID
    1, which may answer TERM with 0; and until the phase is terminal the kubelet withholds the
    reason (DeadlineExceeded, Evicted) and its DisruptionTarget too: such a pod keeps the phase
    the API gives, as does any pod being deleted or disrupted.

    And Failed as soon as a Job's pod with a verifier shows its agent init container OOMKilled:
    the kubelet fails such a pod without starting the rest (kuberuntime's isInitContainerFailed),
    but it was seen still Pending until its deadline (the episode's time and the verifier's):
    its verdict (:func:`judge_verified`) is known, and its index need not wait for it."""
    phase = status.get("phase") or v.PodPhase.PENDING
    if spec.get("restartPolicy") != v.RestartPolicy.NEVER or meta.get("deletionTimestamp"):
        return phase
    if phase == v.PodPhase.PENDING and agent_init_oom_killed(status):
        return v.PodPhase.FAILED
    if phase != v.PodPhase.RUNNING:
        return phase
    if any(c.get("type") == "DisruptionTarget" and c.get("status") == v.CONDITION_TRUE
           for c in status.get("conditions") or [] if isinstance(c, Mapping)):
        return phase
    names = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    if _annotation(meta, POOLED_ANNOTATION) != "true" and VERIFIER_CONTAINER not in names:
        return phase
    ended = {c.get("name"): _exit_code(c) for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)}
    return v.PodPhase.SUCCEEDED if names and all(ended.get(name) == 0 for name in names) else phase


def agent_init_oom_killed(status: Mapping) -> bool:
    """The runtime reported the pod's agent init container OOMKilled. Only a Job's pod with a
    verifier runs its agent as an init container; a pool's agent is a container beside its
    verifier, which the kubelet runs whatever the agent's end."""
    for c in status.get("initContainerStatuses") or []:
        if isinstance(c, Mapping) and c.get("name") == AGENT_CONTAINER:
            terminated = (c.get("state") or {}).get("terminated")
            return isinstance(terminated, Mapping) and terminated.get("reason") == v.OOM_KILLED_REASON
    return False


def _exit_code(status: Mapping) -> int | None:
    """A container's exit code once it has ended (None while it has not)."""
    code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
    return code if type(code) is int else None


def _annotation(meta: Mapping, key: str) -> str | None:
    value = (meta.get("annotations") or {}).get(key)
    return value if isinstance(value, str) else None


def annotation_seconds(meta: Mapping, key: str) -> float | None:
    """A time the operator wrote as an annotation (unix seconds); None when absent or not a
    positive finite number (an annotation edited by hand)."""
    text = _annotation(meta, key)
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _created(meta: Mapping) -> float:
    """When the episode began: a warm pod's claim (core.pools), else the pod's creation. A warm pod
    waited in its pool before; its episode's clock checks and startup times count from the claim.
    Only a pool's pod is read so: on any other, an annotation someone wrote moves no clock."""
    claimed = annotation_seconds(meta, ANNOTATION_CLAIMED_AT) if _annotation(meta, POOLED_ANNOTATION) == "true" else None
    return claimed or parse_time(meta.get("creationTimestamp")) or 0.0


def _delete_requested_at(meta: Mapping) -> float | None:
    """When the pod was deleted: the API sets deletionTimestamp to the request's time plus the grace period."""
    at, grace = parse_time(meta.get("deletionTimestamp")), meta.get("deletionGracePeriodSeconds")
    if at is None:
        return None
    return at - grace if type(grace) is int and grace >= 0 else at


def _own_deadline_at(spec: Mapping, status: Mapping) -> float | None:
    """When the kubelet ends the pod for its own activeDeadlineSeconds (counted from status.startTime)."""
    start, seconds = parse_time(status.get("startTime")), spec.get("activeDeadlineSeconds")
    return start + seconds if start is not None and type(seconds) is int else None


def _gates(spec: Mapping) -> tuple[str, ...]:
    gates = spec.get("schedulingGates")
    if not isinstance(gates, list):
        return ()
    return tuple(g["name"] for g in gates if isinstance(g, Mapping) and isinstance(g.get("name"), str))


def controller_uid(meta: Mapping) -> str | None:
    """The uid of an object's controller ownerReference, if it has one: for an episode pod, the
    Job that made it. A label can be written by anyone; this names the one owner the pod has."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and isinstance(ref.get("uid"), str):
            return ref["uid"]
    return None


def _unschedulable(scheduled: Mapping) -> str | None:
    if scheduled.get("status") == v.CONDITION_FALSE and scheduled.get("reason") == "Unschedulable":
        message = scheduled.get("message")
        return (message if isinstance(message, str) and message else "no node fits the pod")[:500]
    return None
