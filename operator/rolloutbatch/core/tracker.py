"""The in-memory state of one batch, and the one place where an episode index becomes final.

The tracker is fed facts (pod snapshots from the watch, log verdicts, the Job's state, the clock)
and answers questions (which pods need their log read, how many episodes run, is the batch
complete). It performs no I/O, so every counting rule is unit-tested here:

- Each episode *index* is counted once. An index becomes final in exactly one method,
  :meth:`BatchTracker._finalize`, whichever path got it there (a log verdict, infrastructure
  retries used up, the Job ending without it, the batch being stopped), and a retry is counted
  in exactly one, :meth:`BatchTracker._retry`. Each of those calls reports a :class:`Transition`
  to the listener, from which the reconciler derives metrics, Events and status (status
  and metrics once disagreed because an index became final in three places and metrics came
  from one).
- A pod that ended Failed for infrastructure reasons (evicted, preempted, node lost: the Job's
  ``podFailurePolicy`` counts these against ``backoffLimitPerIndex``) is a retry, not a failure,
  while the index has retries left. A pod that merely is being evicted is not one yet: if its
  program exits 0 the Job counts the index succeeded and makes no replacement.
- Results restored from the results ConfigMap after an operator restart are final: pods of those
  indexes are ignored, so no log is read twice and no episode counted twice. Restoring reports
  no transitions (the previous operator process reported them), and a failed pod whose retry the
  restored count holds is not counted again when the watch brings it back.
- Only the batch's own children count. The batch-UID label routes watch events here, but anyone
  who can create a pod or a Job can write that label. A pod is the batch's only when it lives in
  the batch's child namespace, bears its Job's name prefix and has that Job (by uid, learnt from
  the operator's own create or its status) as its controller; a Job only when it is that Job.
  Pods seen before the Job's uid is known (right after a restart) wait until it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.model import EpisodeResult, PodFacts, Summary
from rolloutbatch.core.pools import awaits_claim, shadowed_by_claim
from rolloutbatch.core.stats import RunningSummary
from rolloutbatch.core.stopping import NEVER_STARTED_MESSAGE, cut_off
from rolloutbatch.core.strictjson import finite
from rolloutbatch.core.verdict import (INFRASTRUCTURE_EXHAUSTED, is_infrastructure_failure, is_terminal, judge_episode, missing_reason, never_delivered, never_ran)


@dataclasses.dataclass(frozen=True)
class Transition:
    """One change the rest of the operator must hear of: an index became final, or a retry."""

    kind: str                       # "final" | "retried"
    index: int
    result: EpisodeResult | None = None


Listener = Callable[[Transition], None]


def _holds(facts: PodFacts) -> bool:
    """Claimed from the pool, or handed its episode: the pod holds its index."""
    return facts.claimed_at is not None or facts.delivered_at is not None


class BatchTracker:
    """Counts episodes of one batch exactly once, across pod retries and operator restarts."""

    def __init__(self, episodes: int, infrastructure_retries: int, listener: Listener | None = None, *,
                 namespace: str | None = None, job_name: str | None = None, pooled: bool = False) -> None:
        self.episodes = episodes
        self.namespace = namespace          # the child namespace: pods elsewhere are not ours
        self.job_name = job_name
        # spec.poolRef (core.pools): claimed warm pods are named by their pool, and are orphans
        # until the Job adopts them; such a pod is held, not refused, until it names its owner
        self.pooled = pooled
        self.job_uid: str | None = None     # the batch's Job, once known (expect_job)
        # pods seen before the Job's uid was known: uid -> (facts, deleted); bounded
        self._unverified: dict[str, tuple[PodFacts, bool]] = {}
        self._duplicates: set[str] = set()   # cold pods of claimed indexes (_duplicate): never attempts
        # pool pods this operator handed a phase (uid -> (agent's time, verifier's time)), before
        # the annotation that records it shows in a snapshot (the first wave's is written up to
        # seconds later): a pod that had its episode never passes for one that did not
        self._handed: dict[str, tuple[float | None, float | None]] = {}
        self._foreign: dict[str, PodFacts] = {}      # refused pods not yet reported (take_foreign)
        self._foreign_seen: set[str] = set()
        self._stuck_since: float | None = None     # unschedulable pods, nothing running, no progress
        self._stuck_progress = (0, 0)
        self.retries = infrastructure_retries
        self.results: dict[int, EpisodeResult] = {}
        self.retried = 0
        # Retries across a restart. Only their total is persisted (retriedEpisodes), not which pods
        # they were, and the Job keeps its failed pods, so the watch brings the ones already counted
        # back. The total is rebuilt instead: the retries of restored final indexes (estimated from
        # their rows: every pod seen but the last), plus every failed pod of an open index retried
        # in this process, never below what was persisted.
        self._retried_persisted = 0
        self._retried_of_restored = 0
        self._retried_uids: set[str] = set()
        self.job: JobFacts | None = None
        self.job_finished_seen_at: float | None = None
        self.listener = listener
        self._attempts: dict[int, set[str]] = {}
        # index -> its pods that failed for infrastructure reasons: what the Job's backoffLimitPerIndex
        # counts (failures, not pods: a cold duplicate or a concurrent pod of the index is no failure)
        self._failures: dict[int, set[str]] = {}
        self._live: dict[str, PodFacts] = {}        # uid -> newest facts of pods still running
        # uid -> a gated pod (core.pools.awaits_claim) of an index already final: the Job
        # controller's retry of an index it counts failed and this batch judged (a pod that ended
        # with NOT_DELIVERED_EXIT after its hand-over). Never an attempt; its gate is lifted
        # (service.later_claims), or it would hold one of the Job's parallelism for good
        self._gated_done: dict[str, PodFacts] = {}
        self._to_read: dict[str, PodFacts] = {}     # uid -> terminal pods whose log is wanted
        self._reading: dict[str, PodFacts] = {}     # uid -> log read in flight
        self._done_uids: set[str] = set()           # pods fully accounted for
        # Snapshots can come out of order (a resync list read while the watch is applied): a pod
        # deleted, or taken as the Job's, never comes back, nor is an ended pod live again.
        self._gone: set[str] = set()                # pods whose deletion was seen
        self._verified: set[str] = set()            # pods taken as the Job's
        self._serial = 0                            # counts snapshots taken (listing_mark)
        self._seen_at: dict[str, int] = {}          # uid -> serial of its newest snapshot taken
        self._waiting_since: dict[str, float] = {}  # uid -> when its container was first seen unstartable
        self.stopping = False                       # spec.stop: the pods that end now are the stop's (core.stopping)
        self.version = 0                            # bumped on every change: "status is dirty"
        self._running = RunningSummary(None)      # every result folded in once (core.stats)

    # -- the two state changes ---------------------------------------------------------------
    def _finalize(self, result: EpisodeResult) -> bool:
        """The only place an index becomes final. False when it already was (no double count)."""
        if result.index in self.results or not 0 <= result.index < self.episodes:
            return False
        self.results[result.index] = result
        self._running.add(result)
        self.version += 1
        if self.listener is not None:
            self.listener(Transition("final", result.index, result))
        return True

    def _retry(self, index: int, uid: str) -> None:
        """The only place a retry is counted: a pod's, once, also across restarts (see __init__).
        A retry the previous process already counted changes nothing and reports nothing."""
        self._retried_uids.add(uid)
        total = max(self._retried_persisted,
                    min(self._retried_of_restored, self._retried_persisted) + len(self._retried_uids))
        while self.retried < total:
            self.retried += 1
            self.version += 1
            if self.listener is not None:
                self.listener(Transition("retried", index))

    # -- restoring -------------------------------------------------------------------------
    def restore(self, results: Mapping[int, EpisodeResult], retried: int = 0) -> None:
        """Adopt results persisted before a restart; their indexes are final. ``retried``, the
        persisted count (the status's, the results document's: core.recorded_status), is bounded
        by what the batch allows: each index retried at most ``retries`` times, unless its rows
        say more."""
        for index, result in results.items():
            if 0 <= index < self.episodes and result.index == index and index not in self.results:
                self.results[index] = result
                self._running.add(result)
                self._retried_of_restored += max(0, result.attempts - 1)
        retried = min(retried, max(self.episodes * self.retries, self._retried_of_restored))
        self._retried_persisted = max(self._retried_persisted, retried)
        self.retried = max(self.retried, retried)
        self.version += 1

    # -- ownership -------------------------------------------------------------------------
    def _ours(self, facts: PodFacts) -> bool | None:
        """Whether a pod is one of the batch's episodes; None while the Job's uid is unknown."""
        if self.namespace is not None and facts.namespace != self.namespace:
            return False
        if self.job_name is not None and not self.pooled and not facts.name.startswith(f"{self.job_name}-"):
            return False
        if self.job_uid is None or (self.pooled and facts.owner_uid is None):
            return None
        return facts.owner_uid == self.job_uid

    def _held(self, facts: PodFacts, deleted: bool) -> bool:
        """True when the pod is not to be taken (now): foreign, or waiting for the Job's uid, or a
        stale snapshot of a pod accounted for, deleted, or adopted already."""
        uid = facts.uid
        if uid in self._done_uids or uid in self._gone:
            return True
        ours = self._ours(facts)
        if ours is None:
            held = self._unverified.get(uid)
            if uid in self._verified or (held is not None and held[1]):
                return True   # from before its adoption, or after its deletion
            if held is not None or len(self._unverified) < self._unverified_limit():
                self._unverified[uid] = (facts, deleted)
                self._taken(uid)
            return True
        if not ours:
            if facts.uid not in self._foreign_seen and len(self._foreign_seen) < v.MAX_POD_EVENTS:
                self._foreign_seen.add(facts.uid)
                self._foreign[facts.uid] = facts
            return True
        self._taken(uid)
        return False

    def _taken(self, uid: str) -> None:
        self._seen_at[uid] = self._serial
        self._serial += 1

    def _unverified_limit(self) -> int:
        return max(1000, 4 * self.episodes * (self.retries + 1))

    def expect_job(self, uid: str) -> None:
        """The batch's Job is known: the pods held until now are judged by it."""
        if self.job_uid is not None or not uid:
            return
        self.job_uid = uid
        held, self._unverified = self._unverified, {}
        # claimed and handed-over pods first: they hold their indexes against the cold pods the Job
        # controller made for them (_duplicate), whatever order the watch brought them in
        for facts, deleted in sorted(held.values(), key=lambda item: not _holds(item[0])):
            self.pod_deleted(facts) if deleted else self.observe_pod(facts)

    def owns_job(self, job: JobFacts) -> bool:
        if (self.namespace is not None and job.namespace != self.namespace) or \
                (self.job_name is not None and job.name != self.job_name):
            return False
        return self.job_uid is not None and job.uid == self.job_uid

    def take_foreign(self) -> list[PodFacts]:
        """Pods refused as not the batch's own since the last call (each reported once)."""
        found, self._foreign = list(self._foreign.values()), {}
        return found

    # -- feeding ---------------------------------------------------------------------------
    def handed_over(self, uid: str, at: float, *, verifier: bool = False) -> None:
        """A pool's pod was handed its episode (or, ``verifier``, its verifier phase) at ``at``,
        confirmed by its launcher: from now on it is a pod that had it, whatever its snapshots say
        before their annotation comes (core.verdict.never_delivered)."""
        agent_at, verifier_at = self._handed.get(uid, (None, None))
        self._handed[uid] = (agent_at, at) if verifier else (at, verifier_at)

    def _with_hand_overs(self, facts: PodFacts) -> PodFacts:
        handed = self._handed.get(facts.uid)
        if handed is None:
            return facts
        agent_at, verifier_at = handed
        return dataclasses.replace(
            facts, delivered_at=facts.delivered_at if facts.delivered_at is not None else agent_at,
            verifier_delivered_at=(facts.verifier_delivered_at if facts.verifier_delivered_at is not None
                                   else verifier_at))

    def observe_pod(self, facts: PodFacts) -> None:
        """Take the newest snapshot of one of the batch's pods (others are refused)."""
        facts = self._with_hand_overs(facts)
        if self._held(facts, False):
            return
        self._unverified.pop(facts.uid, None)   # verified now: a stale snapshot of it holds nothing
        index, uid = facts.index, facts.uid
        self._verified.add(uid)
        if index is None or not 0 <= index < self.episodes:
            return
        if not is_terminal(facts) and (uid in self._to_read or uid in self._reading):
            return   # an ended pod never runs again: an older snapshot, applied late
        if index in self.results:
            self._forget(uid)
            self._done_uids.add(uid)  # a stale attempt of an index that is already final
            if awaits_claim(facts) and uid not in self._gone:
                self._gated_done[uid] = facts
            else:
                self._gated_done.pop(uid, None)
            return
        attempts = self._attempts.setdefault(index, set())
        if self._duplicate(facts):
            # never handed an episode, its index held by a claimed pod: no attempt, and once it
            # ends (the Job controller deletes it) neither judged nor retried
            attempts.discard(uid)
            self._duplicates.add(uid)
            if is_infrastructure_failure(facts) or is_terminal(facts):
                self._forget(uid)
                self._done_uids.add(uid)
            else:
                self._live[uid] = facts   # the delivery rounds still see it (and hand it nothing)
            return
        attempts.add(uid)
        if uid in self._reading:
            self._reading[uid] = facts
            return
        if is_infrastructure_failure(facts):
            self._forget(uid)
            self._done_uids.add(uid)
            failures = self._failures.setdefault(index, set())
            failures.add(uid)
            if self.stopping:
                pass   # the suspended Job makes no replacement: the index is the stop's (stopped_rest)
            elif self._ended_by_job(facts):
                pass   # nor does a Job that ended: the index is its end's (give_up_missing)
            elif len(failures) <= self.retries:
                self._retry(index, uid)
            else:   # its message counts the failures; the row's attempts stay the pods seen
                lost = judge_episode(facts, None, log_error=INFRASTRUCTURE_EXHAUSTED, attempts=len(failures))
                self._finalize(dataclasses.replace(lost, attempts=len(attempts)))
            return
        if is_terminal(facts):
            self._live.pop(uid, None)
            self._waiting_since.pop(uid, None)
            self._to_read[uid] = facts
        else:
            self._live[uid] = facts
        self.version += 1

    def pod_deleted(self, facts: PodFacts) -> None:
        """The pod object is gone. Unless it was final, what it knew is lost with it."""
        self._gated_done.pop(facts.uid, None)
        facts = self._with_hand_overs(facts)
        if self._held(facts, True):
            return
        self.observe_pod(facts)
        self._gated_done.pop(facts.uid, None)   # its last snapshot may still show it gated
        uid = facts.uid
        self._gone.add(uid)   # any snapshot of it still to come is older
        if uid in self._done_uids or uid in self._reading or facts.index is None:
            return
        self._live.pop(uid, None)
        self._waiting_since.pop(uid, None)
        # A terminal pod waiting for its read keeps its place: the read will fail and say so.
        # One gone before anything of it ran (deleted while Pending) was no attempt: no retry was
        # counted for it, and a row's attempts beyond the first are taken for retries when it is
        # restored. One that ran stays an attempt.
        never_ran = facts.started_at is None and (facts.agent is None or facts.agent.state == "waiting")
        if never_ran and not is_terminal(facts) and not is_infrastructure_failure(facts):
            self._attempts.get(facts.index, set()).discard(uid)

    def listing_mark(self) -> int:
        """Taken before a list of the batch's pods is read: :meth:`observe_listed` is given it."""
        return self._serial

    def observe_listed(self, facts: PodFacts, mark: int) -> None:
        """A pod as a list that began at ``mark`` found it. Ignored when the watch brought a
        snapshot of it since: the list's may be older (PodFacts carries no resourceVersion to
        compare), and the watch delivers every later change of the pod in order, so it adds
        nothing. One the watch brought before the mark is older than the list (a quorum read)."""
        if self._seen_at.get(facts.uid, -1) < mark:
            self.observe_pod(facts)

    def take_reads(self, limit: int | None = None) -> list[PodFacts]:
        """Hand out terminal pods whose log should be read now (each pod once)."""
        taken = []
        for uid in list(self._to_read)[:limit]:
            facts = self._to_read.pop(uid)
            self._reading[uid] = facts
            taken.append(facts)
        return taken

    def record(self, result: EpisodeResult, uid: str) -> None:
        """The verdict of a pod whose log was read (or could not be); while the batch stops, a
        pod the stop deleted ends as the stop's (``core.stopping.cut_off``)."""
        facts = self._reading.pop(uid, None)
        self._done_uids.add(uid)
        if uid in self._duplicates or (facts is not None and self._duplicate(facts)):
            self._duplicates.add(uid)
            return   # ruled a duplicate while its log was read: the index is its claimed pod's
        attempts = len(self._attempts.get(result.index, ())) or 1
        if self.stopping:
            result = cut_off(result, facts)
        self._finalize(dataclasses.replace(result, attempts=attempts))

    def observe_job(self, job: JobFacts, now: float) -> None:
        """The batch's Job as last read; any other Job (a namesake, a forged label) is ignored."""
        if not self.owns_job(job):
            return
        if self.job != job:
            if job.finished and not (self.job and self.job.finished):
                self.job_finished_seen_at = now
            self.job = job
            self.version += 1

    def give_up_missing(self, reason: str, message: str) -> list[int]:
        """Mark every index without a result as lost (the Job ended without them, or the batch
        was stopped). Pods still queued or being read keep their index open: call this only
        when nothing is busy, or accept that their verdicts will be dropped."""
        missing = [i for i in range(self.episodes) if i not in self.results]
        for index in missing:
            self._finalize(never_ran(index, reason, message, attempts=len(self._attempts.get(index, ()))))
        return missing

    def stop(self) -> None:
        """spec.stop was seen: the Job is being suspended; no index is retried from now on."""
        if not self.stopping:
            self.stopping = True
            self.version += 1

    def stop_settled(self, job_gone: bool = False) -> bool:
        """The stop is done: no pod of the batch is left alive (by the watch and by the Job's own
        counts, unless the Job is gone) and no log read is pending, so every index still open
        never will end."""
        job = self.job
        job_done = job_gone or job is None or job.finished or (job.suspended and job.pods_left == 0)
        # claims the Job has not adopted yet (a Job made suspended for them just now counts none
        # of them): each is its episode's, ended or to be ended, not an index the stop cut off
        adopting = not job_gone and job is not None and bool(self.claimed_orphans())
        return self.stopping and job_done and not adopting and not self._live and not self.busy

    def stopped_rest(self) -> list[int]:
        """Every index without a result is the stop's: it never ran, or its pod left nothing."""
        return self.give_up_missing(v.EP_BATCH_STOPPED, NEVER_STARTED_MESSAGE)

    def give_up_after_job_end(self) -> list[int]:
        """The Job ended and the stragglers' grace passed: the rest of the indexes are lost,
        for the reason the Job gives (its deadline, or another failure)."""
        job = self.job or JobFacts(uid="", created=None)
        reason = missing_reason(job.failed, job.reason)
        message = {v.EP_BATCH_TIMEOUT: "the batch's activeDeadlineSeconds passed before this episode ended",
                   v.EP_JOB_FAILED: f"the Job failed ({job.reason or 'no reason given'})"
                                    + (f": {job.message}" if job.message else ""),
                   }.get(reason, "the Job ended before this episode reported a result")
        return self.give_up_missing(reason, message)

    def _duplicate(self, facts: PodFacts) -> bool:
        """A pooled batch's cold pod that was never handed an episode, of an index a claimed or
        handed-over pod holds (core.pools.shadowed_by_claim): the Job controller made it before
        its informer saw the claim. Its end (a deletion during its prepare, or NOT_DELIVERED_EXIT)
        is no attempt of the index: the claimed pod's verdict is the index's."""
        if not self.pooled or _holds(facts):
            return False
        return shadowed_by_claim(facts, self.index_holders())

    def index_holders(self) -> list[PodFacts]:
        """Every pod of the batch that may hold its index against a cold pod of the same index:
        live, ended and waiting for (or in) its log read, and claims not adopted yet. The
        delivery asks the same question: a claimed pod that ended is still its index's."""
        return [*self._live.values(), *self._to_read.values(), *self._reading.values(), *self.claimed_orphans()]

    def _ended_by_job(self, facts: PodFacts) -> bool:
        """A pooled pod that never got its episode and ended with its Job (the Job failed, or its
        deadline passed: the Job controller deletes its pods, and a launcher answers that TERM with
        NOT_DELIVERED_EXIT): no retry follows, and the index ends as the Job did."""
        job = self.job
        if not self.pooled or job is None or not never_delivered(facts):
            return False
        return job.finished or (job.deadline_at is not None and facts.finished_at is not None
                                and facts.finished_at >= job.deadline_at)

    def claimed_orphans(self) -> list[PodFacts]:
        """Pods claimed for the batch that its Job has not adopted yet (held until it has): each
        holds its index already (core.pools.shadowed_by_claim)."""
        return [facts for facts, deleted in self._unverified.values() if facts.claimed_at is not None and not deleted]

    def _forget(self, uid: str) -> None:
        self._live.pop(uid, None)
        self._to_read.pop(uid, None)
        self._waiting_since.pop(uid, None)

    # -- questions -------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """Every index has a final result."""
        return len(self.results) >= self.episodes

    @property
    def busy(self) -> bool:
        """Log reads are queued or in flight."""
        return bool(self._to_read or self._reading)

    @property
    def seen_pods(self) -> bool:
        """Some pod of the batch was seen (or some result is known)."""
        return bool(self._attempts or self.results)

    @property
    def running(self) -> int:
        return sum(1 for f in self._live.values() if f.phase == v.PodPhase.RUNNING)

    @property
    def ready(self) -> int:
        """Episodes whose ``ready`` event was seen: known from their verdict, so the number
        means the same before and after a restart."""
        return self._running.ready

    def unstartable(self, now: float, grace: float) -> PodFacts | None:
        """A live pod whose image the nodes cannot run for ``grace`` seconds, if any: the batch
        cannot make progress, so it stalls (ImagePullFailed) instead of waiting for its deadline."""
        found = None
        for uid, facts in self._live.items():
            if facts.waiting_reason in v.IMAGE_WAITING_REASONS:
                since = self._waiting_since.setdefault(uid, now)
                if found is None and now - since >= grace:
                    found = facts
            else:
                self._waiting_since.pop(uid, None)
        return found

    def live_pods(self) -> list[PodFacts]:
        """The newest facts of the batch's own pods that have not ended."""
        return list(self._live.values())

    def gated_after_the_end(self) -> list[PodFacts]:
        """Gated pods (core.pools.awaits_claim) of indexes already final: never episodes, to be
        ungated (they then end as a pod handed nothing ends, at their deadline)."""
        return list(self._gated_done.values())

    def unschedulable(self) -> list[PodFacts]:
        """Live pods the scheduler cannot place (PodScheduled False, Unschedulable)."""
        return [f for f in self._live.values() if f.unschedulable and f.phase == v.PodPhase.PENDING]

    def stuck_unschedulable(self, now: float, grace: float) -> PodFacts | None:
        """A pod the scheduler cannot place, once for ``grace`` seconds the batch has had such
        pods with none of its pods running and no episode becoming final: a cluster that is only
        busy runs some, a pod no node can ever hold (a 1 Ei memory limit) runs none."""
        pending = self.unschedulable()
        if not pending or self.running:
            self._stuck_since = None
            return None
        progress = (len(self.results), self.retried)
        if self._stuck_since is None or progress != self._stuck_progress:
            self._stuck_since, self._stuck_progress = now, progress
        return pending[0] if now - self._stuck_since >= grace else None

    def keep_waiting(self, now: float) -> None:
        """The pods are waiting for room, not for the impossible: another grace before asking again."""
        self._stuck_since = now

    def summary(self, origin: float | None) -> Summary:
        """The batch's summary; timings relative to ``origin`` (the Job's creation). Kept up to
        date as results become final, not recomputed over all of them (a cost that grew with the
        batch)."""
        if finite(origin) != self._running.origin:   # the origin became known: fold in again
            self._running = RunningSummary(origin)
            for result in self.results.values():
                self._running.add(result)
        return self._running.summary(episodes=self.episodes, retried=self.retried)
