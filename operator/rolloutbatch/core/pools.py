"""Warm sandbox pools (``RolloutPool``): the pure half. docs/design.md §5.17.

A pool keeps ``size`` episode pods started, prepared and waiting in its own namespace
(``rp-<digest of its namespace and name>``). A batch with ``spec.poolRef`` claims them and gets
the rest cold. This module: the claim and the pooled Job;
``core.pool_spec`` is the pool's spec, ``core.pool_children`` its namespace, policies and warm
pod, ``core.pool_delivery`` how a pod gets its episode, ``core.pool_census`` the pool's status.

1. **Warm.** A pool pod runs ``core.pool_delivery.WARM_LAUNCHER`` (POSIX sh, PID 1 of the
   container): the pool's ``prepare`` command under a watchdog and the file ``warm`` (the
   startupProbe's signal: the pod is warm once its container is ``started``), then it blocks
   reading its stdin, holding no episode data.
2. **Claim.** The operator patches a warm pod into the batch (:func:`claim_patch`, with the pod's
   resourceVersion, so one pod is never claimed twice): the batch's uid, the completion-index
   annotation, the claim time, and an ``activeDeadlineSeconds`` that ends the episode's time from
   now. The claim changes no label: every label change of a pod makes the network-policy agents
   of every node recompute (kube-router resyncs its whole filter table on each node, Cilium
   allocates a new identity), and twenty of them at once took the CPU from the hand-overs they
   came with (bench/README.md). The batch's labels come in a second write (:func:`enrol_patch`),
   once the first wave was handed its episodes; until then a claimed pod still carries the warm
   labels, and :func:`claimed_by` is what says it is no longer the pool's.
   Then it creates the batch's Indexed Job with ``manualSelector``: the Job controller adopts
   matching orphan pods, as upstream documents for a Job that takes over another's pods, and reads
   their index from the annotation. Indexes without a claimed pod get cold pods from the Job's
   template, which is the same pool pod: every pod of a pooled batch gets its episode one way.
   With indexes past the first wave, each such pod is made gated (naming.CLAIM_GATE) and answered
   by a claim for its index or by lifting the gate (:func:`awaits_claim`, service.later_claims).
   If the Job controller saw the Job before the relabelled pods and made a cold pod for a claimed
   index too, it keeps one pod per index and deletes the others, the least advanced first, so the
   running warm pod stays, and until then the cold one is handed nothing (:func:`shadowed_by_claim`).
   The Job is created only once a list of the batch's pods shows every claim: such a list waits for
   the API server's watch cache, which feeds the Job controller's informer, so that is rare.
3. **Delivery.** The operator writes the episode script to the container's stdin through
   ``pods/attach``; the launcher reads it whole, checks and sources it and runs the command. The
   pod is its episode's alone, and its result is read from it as a Job pod's is (core.verdict):
   one verdict path. With ``spec.verifier``, a second container waits beside the episode's and
   is handed the verifier's phase once the agent's container has ended, after a third wrote the
   verifier's files (core.pool_children.pod_spec).

:data:`NOT_DELIVERED_EXIT` is the launcher's: the pod never ran an episode (its prepare failed,
the delivery was broken, or it was ended while it waited). The Job's ``podFailurePolicy`` counts
it as an infrastructure retry and the verdict as ``InfrastructureFailure`` (lost); an agent's own
exit with that code is reported as 1, so no agent can pass for a pod that never got its episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from rolloutbatch.core import launchers, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef, BatchSpec, PodFacts
from rolloutbatch.core.pool_children import (TEMPLATE_ANNOTATION, batch_pod_labels, claimed_by, episode_container,
                                             network_of, owned_by_pool, pod_spec)
from rolloutbatch.core.pool_spec import PoolRef, PoolSpec
from rolloutbatch.core.pod_reading import parse_time
from rolloutbatch.core.vocabulary import COMPLETION_INDEX_KEY, NOT_DELIVERED_EXIT

# A claimed (or cold) pod's deadline: the episode's time plus this, until its episode is handed
# over; then the episode's time plus HANDED_OVER_SLACK_SECONDS from the hand-over
# (:func:`tightened_deadline`). At 200 claims at once on this 2-core machine, the last hand-overs
# came over 30 s after their claims: with a 30 s slack they were too late, and evicted.
DELIVERY_SLACK_SECONDS = 120
# The agent's launcher enforces its time from the hand-over, with a verifier or without
# (core.pool_delivery): the deadline is the pod's outer bound. Without a verifier, little beyond
# the agent's time (its launcher's exit); with one, the slack is the verifier's hand-over's: the
# agent's end must be seen and its phase handed over before the verifier's own time no longer fits
# (a hand-over too late evicts the pod, an infrastructure retry).
HANDED_OVER_SLACK_SECONDS = 10
VERIFIED_HANDED_OVER_SLACK_SECONDS = 60


def pooled_job(ref: BatchRef, batch_episodes: int, parallelism: int, infrastructure_retries: int,
               active_deadline_seconds: int, episode_seconds: int, pool: PoolRef, spec: PoolSpec,
               claims_began: float | None = None, suspend: bool = False, later_claims: str | None = None) -> dict:
    """A pooled batch's Indexed Job, in the pool's namespace. ``manualSelector``: its selector is
    the batch's labels, which the claimed warm pods carry, so the Job controller adopts them; its
    template is the pool's pod (cold pods wait for their episode too). No ownerReference (it
    cannot cross namespaces): the batch's finalizer deletes it (core.children.deletion_plan).
    ``episode_seconds``: the episode's time, its verifier's included.

    ``podFailurePolicy`` (:func:`failure_rules`); a cold pod's deadline covers its prepare and its
    episode. ``claims_began``: when the batch's first claim was made (the batch's clock starts
    there: ``naming.ANNOTATION_CLAIMS_BEGAN_AT``). ``suspend``: made suspended, for a batch
    stopped before its Job was made (service.pool_claims.job_for_claims). ``later_claims``: the
    template digest of the warm pods its later indexes claim (:func:`claims_later`): past the first
    wave, its cold pods carry naming.CLAIM_GATE, each answered by a claim or ungated."""
    labels = batch_pod_labels(ref)
    annotations = {naming.ANNOTATION_CLAIMS_BEGAN_AT: f"{claims_began:.3f}"} if claims_began is not None else {}
    body = pod_spec(pool, spec, active_deadline_seconds=spec.prepare_timeout_seconds + episode_seconds
                    + DELIVERY_SLACK_SECONDS)
    if later_claims is not None and claims_later(batch_episodes, parallelism):
        annotations[naming.ANNOTATION_POOL_TEMPLATE] = later_claims
        body["schedulingGates"] = [{"name": naming.CLAIM_GATE}]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": naming.job_name(ref), "namespace": naming.pool_namespace(pool.namespace, pool.name),
                     "labels": {**naming.owner_labels(ref), naming.LABEL_POOL_UID: pool.uid},
                     **({"annotations": annotations} if annotations else {})},
        "spec": {
            **({"suspend": True} if suspend else {}),
            "completions": batch_episodes, "parallelism": parallelism, "completionMode": "Indexed",
            "backoffLimitPerIndex": infrastructure_retries, "activeDeadlineSeconds": active_deadline_seconds,
            "manualSelector": True, "selector": {"matchLabels": labels},
            "podFailurePolicy": {"rules": failure_rules(spec)},
            # its cold pods run under the network the batch was checked against (network_policies)
            "template": {"metadata": {"labels": {**labels, naming.LABEL_NETWORK: str(spec.network)},
                                      "annotations": {naming.POOLED_ANNOTATION: "true"}},
                         "spec": body},
        },
    }


def batch_pooled_job(ref: BatchRef, spec: BatchSpec, pool: PoolRef, definition: PoolSpec,
                     claims_began: float | None = None, suspend: bool = False, later_claims: str | None = None) -> dict:
    """:func:`pooled_job` of the batch of ``spec`` (``definition``: its pool's spec): the Job the
    batch gets, and the cold pod its namespace's quotas are checked against (core.admission)."""
    return pooled_job(ref, spec.episodes, spec.parallelism, spec.infrastructure_retries,
                      spec.active_deadline_seconds, batch_episode_seconds(spec), pool, definition,
                      claims_began, suspend, later_claims)


def claims_later(episodes: int, parallelism: int) -> bool:
    """Whether a pooled batch has indexes past its first wave (``min(parallelism, episodes)``,
    claimed before its Job): they claim as the Job makes their pods (service.later_claims)."""
    return episodes > parallelism


def awaits_claim(pod: PodFacts) -> bool:
    """A cold pod of a pooled Job that waits for the operator's answer (naming.CLAIM_GATE): a claim
    of a warm pod for its index (the Job controller then deletes it, unscheduled), or its gate
    lifted (:func:`ungate_patch`), when no warm pod is there."""
    return naming.CLAIM_GATE in pod.scheduling_gates and pod.index is not None and not pod.deleting \
        and pod.claimed_at is None


def ungate_patch(pod: PodFacts) -> list[dict]:
    """The JSON patch that lifts naming.CLAIM_GATE off a pod (:func:`awaits_claim`): the pod is
    scheduled and starts cold. Its ``test``s fail (422) on another pod of that name or gates
    changed since ``pod`` was read (the API lets gates only be removed)."""
    gates = [{"name": gate} for gate in pod.scheduling_gates]
    rest = [gate for gate in gates if gate["name"] != naming.CLAIM_GATE]
    return [{"op": "test", "path": "/metadata/uid", "value": pod.uid},
            {"op": "test", "path": "/spec/schedulingGates", "value": gates},
            {"op": "replace", "path": "/spec/schedulingGates", "value": rest} if rest
            else {"op": "remove", "path": "/spec/schedulingGates"}]


def is_stalled(pool: Mapping) -> bool:
    """The pool object's Stalled condition is True (core.pool_census): its pods cannot be made or
    started, and no warm pod comes until someone fixes it."""
    return stall_reason(pool.get("status") or {}) is not None


def stall_reason(status: Mapping) -> str | None:
    """The reason of a pool status's Stalled condition when it is True, else None."""
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == v.CONDITION_STALLED and c.get("status") == v.CONDITION_TRUE:
            return str(c.get("reason") or "")
    return None


def failure_rules(spec: PoolSpec) -> list[dict]:
    """A disruption is an infrastructure retry, as in core.manifests.job; so is
    :data:`NOT_DELIVERED_EXIT` of the episode's container (the pod never ran an episode); any
    other non-zero exit fails the index. With a verifier, the agent's container is judged first (a
    verifier told to stop because its agent never ran exits NOT_DELIVERED_EXIT too), then the
    verifier's: its NOT_DELIVERED_EXIT after an agent that ran says it was never handed its phase."""
    def on_exit(action: str, container: str, operator: str, value: int) -> dict:
        return {"action": action, "onExitCodes": {"containerName": container, "operator": operator, "values": [value]}}
    rules = [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": v.CONDITION_TRUE}]}]
    for container in (episode_container(spec), *((naming.VERIFIER_CONTAINER,) if spec.verifier else ())):
        rules += [on_exit("Count", container, "In", NOT_DELIVERED_EXIT), on_exit("FailIndex", container, "NotIn", 0)]
    return rules


def job_finished(job: Mapping) -> bool:
    """The Job controller says the Job ended (its Complete or Failed condition)."""
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == v.CONDITION_TRUE
               for c in (job.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping))


def job_stopped(job: Mapping) -> bool:
    """A stopped batch's Job with no pod left (service.stop suspends it and says so on it; a Job
    never finishes while suspended): it runs nothing on the pool's pods again, so it holds no pool's
    deletion. A Job suspended by anything else (Kueue) may run again, and holds it."""
    status, meta = job.get("status") or {}, job.get("metadata") or {}
    return ((job.get("spec") or {}).get("suspend") is True
            and (meta.get("annotations") or {}).get(naming.ANNOTATION_STOPPED) == "true"
            and not status.get("active") and not status.get("terminating"))


def unlabelled_jobs(jobs: Sequence[Mapping], pool_uid: str) -> list[Mapping]:
    """The pool's running Jobs whose cold pods come without naming.LABEL_NETWORK (made by an
    operator before the label; a running Job's template cannot be changed)."""
    return [j for j in jobs if owned_by_pool(j, pool_uid) and not job_finished(j)
            and network_of((j.get("spec") or {}).get("template") or {}) is None]


def episode_seconds(episode_timeout: int, verifier_timeout: int | None) -> int:
    """How long a claimed pod may run its episode: the agent's time, and the verifier's with the
    launchers' own work between them (core.manifests' slack)."""
    return episode_timeout + (verifier_timeout + launchers.VERIFIER_SLACK_SECONDS if verifier_timeout is not None else 0)


def batch_episode_seconds(spec: BatchSpec) -> int:
    """:func:`episode_seconds` of a batch's spec."""
    return episode_seconds(spec.episode_timeout_seconds, spec.verifier.timeout_seconds if spec.verifier else None)


def input_copies(ref: BatchRef, shards: Sequence[Mapping[str, str]], owner: Mapping) -> list[dict]:
    """A pooled batch's immutable copies of its spec.inputsFrom ConfigMaps (checked by
    core.admission.input_shards), in the batch's own namespace and owned by it, as a Shared
    sandbox keeps them: the garbage collector removes them with the batch, the user may change
    the originals mid-batch, and the operator reads each episode's input from them to hand it
    over (no pod mounts them)."""
    return [{"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
             "metadata": {"name": naming.inputs_shard_name(ref, j), "namespace": ref.namespace,
                          "labels": naming.owner_labels(ref), "ownerReferences": [dict(owner)]},
             "data": dict(data)} for j, data in enumerate(shards)]


# -- claims --------------------------------------------------------------------------------------
def claim_patch(pod: Mapping, batch: BatchRef, index: int, now: float, episode_seconds: int) -> dict:
    """A merge patch that claims a warm pod for ``batch`` as episode ``index``, changing no label
    (step 2 above). Carries the pod's resourceVersion: a pod claimed by someone else meanwhile
    refuses it (409)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    start = parse_time(status.get("startTime")) or now
    deadline = max(1, int(now - start) + 1 + episode_seconds + DELIVERY_SLACK_SECONDS)
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                         "annotations": {COMPLETION_INDEX_KEY: str(index), naming.ANNOTATION_CLAIMED_BY: batch.uid,
                                         naming.ANNOTATION_CLAIMED_AT: f"{now:.3f}"}},
            "spec": {"activeDeadlineSeconds": deadline}}


def enrol_patch(batch: BatchRef, index: int, record: HandOverRecord | None = None) -> dict:
    """A merge patch that moves a pod claimed for ``batch`` (:func:`claim_patch`) into it: the
    batch's labels, which its Job selects and the operator's watch routes by; with ``record``,
    its hand-over's record in the same write."""
    patch: dict = {"metadata": {"labels": {naming.LABEL_POOL_UID: None, naming.LABEL_POOL_NAME: None,
                                           **batch_pod_labels(batch), COMPLETION_INDEX_KEY: str(index)}}}
    if record is not None:
        patch["metadata"]["annotations"] = dict(record.annotations)
        if record.active_deadline_seconds is not None:
            patch["spec"] = {"activeDeadlineSeconds": record.active_deadline_seconds}
    return patch


def record_patch(annotations: Mapping[str, str], active_deadline_seconds: int | None = None) -> dict:
    """A merge patch that records a hand-over on its pod (``annotations``: its time) and lowers the
    pod's deadline to ``active_deadline_seconds`` when given (the API lets it be lowered only)."""
    patch: dict = {"metadata": {"annotations": dict(annotations)}}
    if active_deadline_seconds is not None:
        patch["spec"] = {"activeDeadlineSeconds": active_deadline_seconds}
    return patch


@dataclasses.dataclass(frozen=True)
class HandOverRecord:
    """A hand-over done and not yet written on its pod: where the pod is, the annotations that
    record it (its time), and the lowered deadline (None: unchanged). Held while the first wave is
    handed over, to go with the pod's enrolment (:func:`enrol_patch`), or written alone
    (:func:`record_patch`) when the enrolment did not take it."""
    namespace: str
    name: str
    annotations: Mapping[str, str]
    active_deadline_seconds: int | None = None


@dataclasses.dataclass(frozen=True)
class PoolPods:
    """One list of a pool's namespace (naming.MANAGED_SELECTOR) seen by a batch: the pool's pods
    it may claim, oldest first (:func:`claim_order`), and the batch's own, claimed (enrolled or not)
    or cold. One list, not two: a claim made between two lists (a predecessor's, at a failover)
    would be in neither, and its index claimed twice."""
    warm: list[Mapping]
    mine: list[Mapping]


def pool_pods(pods: Sequence[Mapping], pool: PoolRef, batch_uid: str, template: str | None = None) -> PoolPods:
    def label(p: Mapping, key: str) -> str | None:
        return ((p.get("metadata") or {}).get("labels") or {}).get(key)
    warm = [p for p in pods if label(p, naming.LABEL_POOL_UID) == pool.uid]
    mine = [p for p in pods if label(p, naming.LABEL_BATCH_UID) == batch_uid]
    return PoolPods(warm=claim_order(warm, template), mine=mine + unenrolled_claims(warm, batch_uid))


def unenrolled_claims(pods: Sequence[Mapping], batch_uid: str) -> list[Mapping]:
    """The pods claimed for the batch that still carry the warm labels (not being deleted)."""
    return [p for p in pods if claimed_by(p) == batch_uid and not (p.get("metadata") or {}).get("deletionTimestamp")
            and ((p.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_EPISODE_ROLE) == naming.ROLE_WARM]


def tightened_deadline(active_deadline_seconds: int | None, own_deadline_at: float | None, now: float,
                       episode_seconds: int, verified: bool = False) -> int | None:
    """The lower ``activeDeadlineSeconds`` that ends a pod just handed its episode (at ``now``)
    ``episode_seconds`` + the slack after a hand-over later (HANDED_OVER_SLACK_SECONDS, or with a
    verifier VERIFIED_HANDED_OVER_SLACK_SECONDS), or None when its deadline is no later than that
    (the API lets a deadline be lowered, never raised): the time a hand-over waited is not the
    agent's to spend."""
    if active_deadline_seconds is None or own_deadline_at is None:
        return None
    slack = VERIFIED_HANDED_OVER_SLACK_SECONDS if verified else HANDED_OVER_SLACK_SECONDS
    surplus = int(own_deadline_at - now - episode_seconds - slack)
    return active_deadline_seconds - surplus if surplus > 0 and active_deadline_seconds - surplus >= 1 else None


def is_warm(pod: Mapping) -> bool:
    """Every container started (its startupProbe saw ``warm``) and running, unclaimed, not being
    deleted, and its Ready condition, where written (the kubelet always does), True. The pods have no readinessProbe, so the kubelet
    says Ready with the containers' statuses; but when the pod's node stops reporting (NotReady)
    those stay as last reported and the node lifecycle controller turns Ready False (upstream:
    pkg/controller/nodelifecycle, MarkPodsNotReady). A claim of such a pod would hand it over
    through that node's kubelet and fail (an eviction: an infrastructure retry of the index), so
    it is not warm until Ready again, or evicted (its not-ready toleration: pod_spec)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or (meta.get("labels") or {}).get(naming.LABEL_EPISODE_ROLE) != naming.ROLE_WARM \
            or claimed_by(pod) is not None:
        return False
    if status.get("phase") != v.PodPhase.RUNNING:
        return False
    if any(isinstance(c, Mapping) and c.get("type") == v.CONDITION_READY and c.get("status") != v.CONDITION_TRUE
           for c in status.get("conditions") or []):
        return False
    statuses = [c for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)]
    return bool(statuses) and len(statuses) >= len((pod.get("spec") or {}).get("containers") or ()) \
        and all(c.get("started") is True and "running" in (c.get("state") or {}) for c in statuses)


def claim_order(pods: Sequence[Mapping], template: str | None = None) -> list[Mapping]:
    """Warm pods, oldest first (they have waited longest; a pool drains evenly across nodes). With
    ``template`` (template_digest), only pods made of it: a stale pod waits for the pool's next
    round to replace it, and a batch never gets a pod of a spec its pool no longer has (one
    without the verifier container the batch was checked against)."""
    warm = [p for p in pods if is_warm(p) and (template is None or (
        (p.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_ANNOTATION) == template)]
    return sorted(warm, key=oldest_first)


# The start of a pool's status.message while its deletion waits for batches on its pods (the
# handler writes it; the SDK's delete_pool quotes it when it gives up waiting).
DELETING_MESSAGE = "Deleting: "


def oldest_first(pod: Mapping) -> tuple[str, str]:
    """A sort key: by creation, then name (the API lists pods by name, which says nothing of age)."""
    meta = pod.get("metadata") or {}
    return meta.get("creationTimestamp") or "", meta.get("name") or ""


def shadowed_by_claim(pod: PodFacts, live: Sequence[PodFacts]) -> bool:
    """Whether ``pod`` is a cold pod of an index that another live pod of the batch holds (claimed
    from the pool, or handed its episode): it must not run a second episode of that index. The
    Job controller makes a pod for every index it sees none for, read from its informer, which
    may not have the claims yet; it deletes one of the two once it sees both (step 2 above)."""
    return shadowed(pod, held_indexes(live))


def held_indexes(live: Sequence[PodFacts]) -> dict[int, set[str]]:
    """Index -> the uids of the pods that hold it (claimed, or handed their episode; not being
    deleted): built once, each pod's question is then :func:`shadowed`'s lookup."""
    held: dict[int, set[str]] = {}
    for other in live:
        if other.index is not None and not other.deleting \
                and (other.claimed_at is not None or other.delivered_at is not None):
            held.setdefault(other.index, set()).add(other.uid)
    return held


def shadowed(pod: PodFacts, held: Mapping[int, set[str]]) -> bool:
    """:func:`shadowed_by_claim` with the holders of :func:`held_indexes`."""
    if pod.claimed_at is not None or pod.index is None:
        return False
    return bool(held.get(pod.index, set()) - {pod.uid})
