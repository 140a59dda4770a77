"""The in-memory state of one batch: what each pod did, which logs to read, what is final.

The tracker is fed facts (pod snapshots from the watch, log-read outcomes, the Job's state) and
answers questions (which pods need their log read, how many episodes are running, is the batch
complete). It performs no I/O, so every rule about counting is unit-tested here:

- Each episode *index* is counted once. An index is final when a pod of it ended with a verdict,
  or when its infrastructure retries are used up.
- A pod that failed for infrastructure reasons (evicted, preempted, node lost: the Job's
  ``podFailurePolicy`` counts these against ``backoffLimitPerIndex``) is a retry, not a failure,
  while the index has retries left.
- Results restored from the results ConfigMap after an operator restart are final: pods of those
  indexes are ignored, so no log is read twice and no episode counted twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from rolloutbatch.core.model import EpisodeResult, PodFacts, Summary
from rolloutbatch.core.stats import summarize
from rolloutbatch.core.verdict import INFRASTRUCTURE_EXHAUSTED, is_infrastructure_failure, is_terminal, judge_episode


@dataclasses.dataclass(frozen=True)
class JobFacts:
    """What the operator needs to know of its Job."""

    uid: str
    created: float | None
    finished: bool = False
    failed: bool = False
    reason: str | None = None
    message: str | None = None


def job_facts(job: Mapping) -> JobFacts:
    """Read a Job dict (API JSON) into :class:`JobFacts`."""
    from rolloutbatch.core.verdict import parse_time  # one timestamp parser for the whole core

    meta, status = job.get("metadata", {}), job.get("status") or {}
    finished = failed = False
    reason = message = None
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            finished = True
        elif cond.get("type") == "Failed":
            finished = failed = True
            reason, message = cond.get("reason"), cond.get("message")
    return JobFacts(uid=meta.get("uid", ""), created=parse_time(meta.get("creationTimestamp")),
                    finished=finished, failed=failed, reason=reason, message=message)


class BatchTracker:
    """Counts episodes of one batch exactly once, across pod retries and operator restarts."""

    def __init__(self, episodes: int, infrastructure_retries: int) -> None:
        self.episodes = episodes
        self.retries = infrastructure_retries
        self.results: dict[int, EpisodeResult] = {}
        self.retried = 0
        self.job: JobFacts | None = None
        self.job_finished_seen_at: float | None = None
        self._attempts: dict[int, set[str]] = {}
        self._live: dict[str, PodFacts] = {}        # uid -> newest facts of pods still running
        self._to_read: dict[str, PodFacts] = {}     # uid -> terminal pods whose log is wanted
        self._reading: dict[str, PodFacts] = {}     # uid -> log read in flight
        self._done_uids: set[str] = set()           # pods fully accounted for
        self._ready: set[int] = set()
        self.version = 0                            # bumped on every change: "status is dirty"

    # -- restoring -------------------------------------------------------------------------
    def restore(self, results: Mapping[int, EpisodeResult], retried: int = 0) -> None:
        """Adopt results persisted before a restart; their indexes are final."""
        for index, result in results.items():
            if 0 <= index < self.episodes:
                self.results[index] = result
                self._ready.add(index) if result.ready_at is not None else None
        self.retried = max(self.retried, retried)
        self.version += 1

    # -- feeding ---------------------------------------------------------------------------
    def observe_pod(self, facts: PodFacts) -> None:
        """Take the newest snapshot of one of the batch's pods."""
        index, uid = facts.index, facts.uid
        if index is None or not 0 <= index < self.episodes or uid in self._done_uids:
            return
        if index in self.results:
            self._forget(uid)
            self._done_uids.add(uid)  # a stale attempt of an index that is already final
            return
        attempts = self._attempts.setdefault(index, set())
        attempts.add(uid)
        if facts.ready and index not in self._ready:
            self._ready.add(index)
        if uid in self._reading:
            self._reading[uid] = facts
            return
        if is_infrastructure_failure(facts):
            self._forget(uid)
            self._done_uids.add(uid)
            if len(attempts) <= self.retries:
                self.retried += 1
            else:
                self.results[index] = judge_episode(facts, None, log_error=INFRASTRUCTURE_EXHAUSTED,
                                                    attempts=len(attempts))
            self.version += 1
            return
        if is_terminal(facts):
            self._live.pop(uid, None)
            self._to_read[uid] = facts
        else:
            self._live[uid] = facts
        self.version += 1

    def pod_deleted(self, facts: PodFacts) -> None:
        """The pod object is gone. Unless it was final, what it knew is lost with it."""
        self.observe_pod(facts)
        uid = facts.uid
        if uid in self._done_uids or uid in self._reading or facts.index is None:
            return
        self._live.pop(uid, None)
        # A terminal pod waiting for its read keeps its place: the read will fail and say so.

    def take_reads(self, limit: int | None = None) -> list[PodFacts]:
        """Hand out terminal pods whose log should be read now (each pod once)."""
        taken = []
        for uid in list(self._to_read)[:limit]:
            facts = self._to_read.pop(uid)
            self._reading[uid] = facts
            taken.append(facts)
        return taken

    def record(self, result: EpisodeResult, uid: str) -> None:
        """The verdict of a pod whose log was read (or could not be)."""
        self._reading.pop(uid, None)
        self._done_uids.add(uid)
        if result.index not in self.results:
            attempts = len(self._attempts.get(result.index, ())) or 1
            self.results[result.index] = dataclasses.replace(result, attempts=attempts)
            self.version += 1

    def observe_job(self, job: JobFacts, now: float) -> None:
        if self.job != job:
            if job.finished and not (self.job and self.job.finished):
                self.job_finished_seen_at = now
            self.job = job
            self.version += 1

    def give_up_missing(self, reason: str, message: str) -> list[int]:
        """Mark every index without a result as lost (the Job ended without them)."""
        missing = [i for i in range(self.episodes) if i not in self.results]
        for index in missing:
            self.results[index] = EpisodeResult(
                index=index, pod="", node=None, image_id=None, outcome="lost", reason=reason,
                message=message, reward=None, pod_created=None, ready_at=None, reward_at=None,
                pod_to_ready_seconds=None, attempts=len(self._attempts.get(index, ())),
            )
        if missing:
            self.version += 1
        return missing

    def _forget(self, uid: str) -> None:
        self._live.pop(uid, None)
        self._to_read.pop(uid, None)

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
    def running(self) -> int:
        return sum(1 for f in self._live.values() if f.phase == "Running")

    @property
    def ready(self) -> int:
        return len(self._ready)

    def waiting(self) -> Iterable[PodFacts]:
        """Live pods whose container is not running, with the node's reason (e.g. ErrImagePull)."""
        return (f for f in self._live.values() if f.waiting_reason)

    def summary(self, origin: float | None) -> Summary:
        return summarize(self.results.values(), episodes=self.episodes, origin=origin, retried=self.retried)

    def outcome_counts(self) -> dict[str, int]:
        counts = {"succeeded": 0, "failed": 0, "lost": 0}
        for result in self.results.values():
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        return counts
