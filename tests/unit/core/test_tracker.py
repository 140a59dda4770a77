"""Counting rules of one batch: each index once, infrastructure retries, restarts."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import naming
from rolloutbatch.core.model import EpisodeResult, PodFacts
from rolloutbatch.core.job_facts import JobFacts, job_facts
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.vocabulary import NOT_DELIVERED_EXIT


def pod(index: int, uid: str | None = None, phase: str = "Running", **kw) -> PodFacts:
    base = dict(name=f"rb-x-{index}-{uid or 'a'}", namespace="rb-x", uid=uid or f"uid-{index}", index=index,
                created=100.0, phase=phase, node="devnode-1", image_id="img", exit_code=None, restart_count=0,
                terminated_reason=None, pod_reason=None, pod_message=None, disrupted=False, deleting=False,
                ready=phase == "Running", started_at=None, finished_at=None, waiting_reason=None,
                waiting_message=None, owner_uid=JOB_UID)
    base.update(kw)
    return PodFacts(**base)


JOB_UID = "job-uid"


def tracker(episodes: int, retries: int, **kw) -> BatchTracker:
    """A tracker of a batch whose Job (rb-x in rb-x) is known, as after provisioning."""
    t = BatchTracker(episodes, retries, namespace="rb-x", job_name="rb-x", **kw)
    t.expect_job(JOB_UID)
    return t


def result(index: int, outcome: str = "succeeded", reward: float | None = 1.0) -> EpisodeResult:
    return EpisodeResult(index=index, pod=f"p{index}", node="n", image_id="i", outcome=outcome,
                         reason=None if outcome == "succeeded" else "NonZeroExit", message="", reward=reward,
                         pod_created=100.0, ready_at=101.0, reward_at=102.0, pod_to_ready_seconds=1.0)


def test_terminal_pod_is_read_once():
    t = tracker(2, 2)
    t.observe_pod(pod(0))
    assert t.running == 1 and t.take_reads() == []
    done = pod(0, phase="Succeeded", exit_code=0)
    t.observe_pod(done)
    t.observe_pod(done)  # the same snapshot again (a resync) queues nothing new
    reads = t.take_reads()
    assert [f.uid for f in reads] == ["uid-0"]
    t.observe_pod(done)  # while the read is in flight
    assert t.take_reads() == [] and t.busy
    t.record(result(0), "uid-0")
    t.observe_pod(done)  # after the verdict
    assert t.take_reads() == [] and not t.busy
    assert len(t.results) == 1 and not t.complete


def test_infrastructure_failure_is_a_retry_until_retries_run_out():
    t = tracker(1, 1)
    t.observe_pod(pod(0, uid="a", phase="Failed", disrupted=True))
    assert t.retried == 1 and not t.results and t.take_reads() == []
    t.observe_pod(pod(0, uid="b", phase="Failed", disrupted=True))
    assert t.retried == 1
    # lost, not failed: nothing the agent did (core.outcomes)
    assert t.results[0].outcome == "lost" and t.results[0].reason == "InfrastructureFailure"
    assert t.complete


def test_retries_count_infrastructure_failures_not_pods_seen():
    """backoffLimitPerIndex counts an index's failures: a second, healthy pod of the index (the
    Job may run more than one) does not use up its retry, and its verdict is the index's."""
    t = tracker(1, 1)
    t.observe_pod(pod(0, uid="a"))
    t.observe_pod(pod(0, uid="b"))
    t.observe_pod(pod(0, uid="a", phase="Failed", disrupted=True))
    assert t.retried == 1 and 0 not in t.results
    t.observe_pod(pod(0, uid="b", phase="Succeeded", exit_code=0))
    (facts,) = t.take_reads()
    t.record(result(0), facts.uid)
    assert t.results[0].outcome == "succeeded" and t.results[0].attempts == 2


def test_used_up_retries_say_the_failures_and_the_row_the_pods_seen():
    t = tracker(1, 1)
    t.observe_pod(pod(0, uid="a"))
    for uid in ("b", "c"):
        t.observe_pod(pod(0, uid=uid, phase="Failed", disrupted=True))
    lost = t.results[0]
    assert (lost.reason, lost.attempts) == ("InfrastructureFailure", 3)
    assert "every one of 2 attempts" in lost.message


def test_a_pod_its_node_refused_is_retried_not_read():
    """A kubelet's admission refusal (OutOfcpu while it still counts a finished pod's
    resources) has no container and no log: retried as the Job retries it, never a log read
    that fails (LogUnavailable), and the replacement's result is the index's."""
    t = tracker(1, 1)
    t.observe_pod(pod(0, uid="a", phase="Failed", pod_reason="OutOfcpu", containers_reported=False))
    assert t.retried == 1 and not t.results and t.take_reads() == []
    t.observe_pod(pod(0, uid="b", phase="Succeeded", exit_code=0))
    (facts,) = t.take_reads()
    assert facts.uid == "b"
    t.record(result(0), facts.uid)
    assert t.results[0].outcome == "succeeded" and t.complete


def test_each_index_counted_once_across_attempts():
    t = tracker(1, 3)
    t.observe_pod(pod(0, uid="a", phase="Failed", disrupted=True))
    t.observe_pod(pod(0, uid="b", phase="Succeeded", exit_code=0))
    (facts,) = t.take_reads()
    t.record(result(0), facts.uid)
    assert t.results[0].attempts == 2
    t.observe_pod(pod(0, uid="c", phase="Failed", exit_code=1))  # a stray later pod
    assert t.take_reads() == [] and [r.outcome for r in t.results.values()] == ["succeeded"]


def test_restored_results_are_final():
    t = tracker(3, 2)
    t.restore({0: result(0), 1: result(1, "failed", None)}, retried=4)
    assert t.retried == 4 and t.ready == 2
    t.observe_pod(pod(0, phase="Succeeded", exit_code=0))
    t.observe_pod(pod(2, phase="Succeeded", exit_code=0))
    assert [f.index for f in t.take_reads()] == [2]


def test_a_retry_is_counted_once_across_a_restart():
    """The Job keeps its evicted pods: after a restart the watch brings back one whose retry the
    restored count holds already. It is not counted (nor reported) again; a new one is."""
    evicted = pod(0, uid="a", phase="Failed", disrupted=True)
    before = tracker(2, 2)
    before.observe_pod(evicted)
    seen = []
    after = tracker(2, 2, listener=seen.append)
    after.restore({}, retried=before.retried)
    after.observe_pod(evicted)
    assert (after.retried, seen) == (1, [])
    after.observe_pod(pod(0, uid="b", phase="Failed", disrupted=True))
    assert after.retried == 2 and [(t.kind, t.index) for t in seen] == [("retried", 0)]


def test_after_a_restart_a_new_retry_counts_beside_those_of_restored_episodes():
    """Index 0 was retried, then succeeded (its row restored: 2 attempts); index 1 was retried
    and is still open: retriedEpisodes 2. Index 1's old pod adds nothing, its next eviction one."""
    seen = []
    t = tracker(2, 3, listener=seen.append)
    t.restore({0: dataclasses.replace(result(0), attempts=2)}, retried=2)
    t.observe_pod(pod(1, uid="c", phase="Failed", disrupted=True))
    assert (t.retried, seen) == (2, [])
    t.observe_pod(pod(1, uid="d", phase="Failed", disrupted=True))
    assert t.retried == 3 and [(c.kind, c.index) for c in seen] == [("retried", 1)]


def test_a_pod_gone_before_it_ended_is_no_attempt_nor_a_retry_after_a_restart():
    """Index 0's first pod was deleted while Pending (no retry counted), its second succeeded;
    index 1 was retried once and is still open: retriedEpisodes 1. The restored row says 1
    attempt, so the restart takes no retry for the pod that went, and index 1's failed pod the
    watch brings back counts nothing again (it made 2)."""
    before = tracker(2, 2)
    before.observe_pod(pod(0, uid="a", phase="Pending"))
    before.pod_deleted(pod(0, uid="a", phase="Pending"))
    before.observe_pod(pod(0, uid="b", phase="Succeeded", exit_code=0))
    (read,) = before.take_reads()
    before.record(result(0), read.uid)
    evicted = pod(1, uid="c", phase="Failed", disrupted=True)
    before.observe_pod(evicted)
    assert before.retried == 1 and before.results[0].attempts == 1
    seen = []
    after = tracker(2, 2, listener=seen.append)
    after.restore({0: before.results[0]}, retried=before.retried)
    after.observe_pod(evicted)
    assert (after.retried, seen) == (1, [])


def test_out_of_range_and_unindexed_pods_are_ignored():
    t = tracker(2, 0)
    t.observe_pod(pod(5, phase="Succeeded"))
    t.observe_pod(dataclasses.replace(pod(0, phase="Succeeded"), index=None))
    assert t.take_reads() == [] and t.version == 0


def test_give_up_missing_marks_lost():
    t = tracker(3, 0)
    t.record(result(0), "uid-0")
    assert t.give_up_missing("BatchTimeout", "the Job ran out of time") == [1, 2]
    assert t.results[2].outcome == "lost" and t.results[2].reason == "BatchTimeout"
    assert t.complete


def test_waiting_pods_are_reported():
    t = tracker(1, 0)
    t.observe_pod(pod(0, phase="Pending", ready=False, waiting_reason="ErrImagePull", waiting_message="no"))
    assert [f.waiting_reason for f in t._live.values()] == ["ErrImagePull"]


def test_job_facts_and_finish_time():
    job = {"metadata": {"uid": JOB_UID, "name": "rb-x", "namespace": "rb-x", "creationTimestamp": "2026-11-29T07:00:00Z"},
           "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                      "message": "too slow"}]}}
    facts = job_facts(job)
    assert facts.finished and facts.failed and facts.reason == "DeadlineExceeded"
    t = tracker(1, 0)
    t.observe_job(JobFacts(uid=JOB_UID, name="rb-x", namespace="rb-x", created=1.0), now=5.0)
    assert t.job_finished_seen_at is None
    t.observe_job(facts, now=9.0)
    assert t.job_finished_seen_at == 9.0
    t.observe_job(facts, now=20.0)
    assert t.job_finished_seen_at == 9.0


@pytest.mark.parametrize("annotation, began", [
    (None, 1796256000.0),                       # a Job's batch: its creation, to the second
    ("1796255999.25", 1796255999.25),           # a pooled batch: its first claim, before the Job
    ("1796256000.75", 1796256000.75),           # in the Job's own second (its creation is rounded down)
    ("1796256001.0", 1796256000.0),             # never after the creation's second
    ("nan", 1796256000.0), ("-3", 1796256000.0), ("soon", 1796256000.0), ("", 1796256000.0),
    ("1", 1796256000.0), ("1796252399.0", 1796256000.0),   # edited by hand: more than an hour before the Job
    ("1796252400.0", 1796252400.0),                          # an hour before (a restart between claims and Job)
])
def test_the_batchs_clock_starts_at_the_jobs_creation_or_its_first_claim(annotation, began):
    meta = {"uid": JOB_UID, "creationTimestamp": "2026-12-03T00:00:00Z"}
    if annotation is not None:
        meta["annotations"] = {naming.ANNOTATION_CLAIMS_BEGAN_AT: annotation}
    assert job_facts({"metadata": meta}).began_at == began
    assert job_facts({"metadata": {"uid": JOB_UID}}).began_at is None
    claims_only = {"uid": JOB_UID, "annotations": {naming.ANNOTATION_CLAIMS_BEGAN_AT: "1796255999.25"}}
    assert job_facts({"metadata": claims_only}).began_at == 1796255999.25


# -- one place of finality: retries, evictions, deadlines, ready counts ---------------------------
class Recorder:
    def __init__(self):
        self.changes = []

    def __call__(self, change):
        self.changes.append((change.kind, change.index, change.result.outcome if change.result else None))


def test_every_path_to_final_reports_once():
    seen = Recorder()
    t = tracker(4, 1, listener=seen)
    t.record(result(0), "uid-0")                                          # a log verdict
    t.record(result(0), "uid-0b")                                         # the same index again: no report
    t.observe_pod(pod(1, uid="a", phase="Failed", disrupted=True))        # retry
    t.observe_pod(pod(1, uid="b", phase="Failed", disrupted=True))        # retries used up -> final
    t.observe_job(JobFacts(uid=JOB_UID, name="rb-x", namespace="rb-x", created=1.0, finished=True, failed=True, reason="DeadlineExceeded"), 5.0)
    t.give_up_after_job_end()                                             # 2 and 3: batch timeout
    assert seen.changes == [("final", 0, "succeeded"), ("retried", 1, None), ("final", 1, "lost"),
                            ("final", 2, "lost"), ("final", 3, "lost")]
    assert t.results[2].reason == "BatchTimeout" and t.complete
    finals = [c for c in seen.changes if c[0] == "final"]
    assert len(finals) == len(t.results) and sum(1 for c in seen.changes if c[0] == "retried") == t.retried


def test_restore_reports_nothing_and_blocks_later_reports():
    seen = Recorder()
    t = tracker(2, 0, listener=seen)
    t.restore({0: result(0)})
    t.record(result(0), "uid-0")
    assert seen.changes == []


def test_an_evicted_pod_that_exits_zero_is_judged_not_retried():
    """The Job counts a Succeeded pod's index succeeded and makes no replacement."""
    t = tracker(1, 2)
    t.observe_pod(pod(0, phase="Running", disrupted=True, deleting=True))
    assert t.retried == 0
    t.observe_pod(pod(0, phase="Succeeded", exit_code=0, disrupted=True, deleting=True))
    assert t.retried == 0 and [f.index for f in t.take_reads()] == [0]


def test_job_end_reasons_are_documented():
    for job, reason in ((JobFacts(uid=JOB_UID, name="rb-x", namespace="rb-x", created=1.0, finished=True), "LogUnavailable"),
                        (JobFacts(uid=JOB_UID, name="rb-x", namespace="rb-x", created=1.0, finished=True, failed=True, reason="BackoffLimitExceeded"),
                         "JobFailed"),
                        (JobFacts(uid=JOB_UID, name="rb-x", namespace="rb-x", created=1.0, finished=True, failed=True, reason="DeadlineExceeded"),
                         "BatchTimeout")):
        t = tracker(1, 0)
        t.observe_job(job, 1.0)
        t.give_up_after_job_end()
        assert (t.results[0].outcome, t.results[0].reason) == ("lost", reason)


def test_job_deadline_is_read_from_start_time():
    facts = job_facts({"metadata": {"uid": "j"}, "spec": {"activeDeadlineSeconds": 60},
                       "status": {"startTime": "2026-11-29T07:00:00Z",
                                  "conditions": [{"type": "FailureTarget", "status": "True",
                                                  "reason": "DeadlineExceeded"}]}})
    assert facts.deadline_at == 1795935600.0 + 60 and facts.reason == "DeadlineExceeded" and not facts.finished


def test_ready_counts_ready_events_not_started_pods():
    t = tracker(3, 0)
    t.observe_pod(pod(0, phase="Running", ready=True))
    assert t.ready == 0                       # a started container has printed nothing we saw
    t.record(result(0), "uid-0")
    t.record(dataclasses.replace(result(1, "failed", None), ready_at=None), "uid-1")
    assert t.ready == 1
    restored = tracker(3, 0)
    restored.restore(dict(t.results))
    assert restored.ready == t.ready          # the same number after a restart


def test_unstartable_after_grace_only():
    t = tracker(2, 0)
    t.observe_pod(pod(0, phase="Pending", waiting_reason="ErrImageNeverPull", waiting_message="never"))
    t.observe_pod(pod(1, phase="Pending", waiting_reason="ContainerCreating"))
    assert t.unstartable(100.0, 20.0) is None
    assert t.unstartable(119.0, 20.0) is None
    assert t.unstartable(121.0, 20.0).index == 0
    t.observe_pod(pod(0, phase="Running"))    # it started after all: the clock restarts
    assert t.unstartable(200.0, 20.0) is None


def test_an_episode_evicted_over_its_own_storage_limit_is_judged_not_retried():
    t = tracker(1, 2)
    t.observe_pod(pod(0, phase="Failed", exit_code=137, disrupted=True, pod_reason="Evicted",
                      pod_message='Usage of EmptyDir volume "workspace" exceeds the limit "1Gi". '))
    assert t.retried == 0 and [f.index for f in t.take_reads()] == [0]


# -- only the batch's own children count -----------------------------------------------------
FORGERIES = {
    "another namespace": dict(namespace="elsewhere"),
    "no controller": dict(owner_uid=None),
    "another owner": dict(owner_uid="some-other-job"),
    "not the Job's name": dict(name="forged-0-abcde"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_pod_that_only_carries_the_label_is_not_an_episode(forgery):
    t = tracker(2, 1)
    forged = pod(0, uid="forged", phase="Succeeded", exit_code=0, **FORGERIES[forgery])
    t.observe_pod(forged)
    t.pod_deleted(forged)
    t.observe_pod(pod(1, uid="forged-infra", phase="Failed", disrupted=True, **FORGERIES[forgery]))
    assert t.take_reads() == [] and not t.results and t.retried == 0 and not t.seen_pods
    assert [f.uid for f in t.take_foreign()] == ["forged", "forged-infra"] and t.take_foreign() == []
    t.observe_pod(pod(0, uid="real", phase="Succeeded", exit_code=0))
    assert [f.uid for f in t.take_reads()] == ["real"]


def test_pods_seen_before_the_job_is_known_wait_for_it():
    t = BatchTracker(2, 0, namespace="rb-x", job_name="rb-x")
    t.observe_pod(pod(0, uid="real", phase="Succeeded", exit_code=0))
    t.observe_pod(pod(1, uid="forged", phase="Succeeded", exit_code=0, owner_uid="other"))
    t.observe_pod(pod(1, uid="elsewhere", phase="Succeeded", exit_code=0, namespace="x"))
    assert t.take_reads() == [] and [f.uid for f in t.take_foreign()] == ["elsewhere"]
    t.expect_job(JOB_UID)
    t.expect_job("a-later-namesake")   # the first Job known stays the batch's
    assert [f.uid for f in t.take_reads()] == ["real"] and [f.uid for f in t.take_foreign()] == ["forged"]


def test_a_job_that_is_not_the_batchs_own_changes_nothing():
    t = tracker(1, 0)
    for forged in (JobFacts(uid="other", created=1.0, finished=True, failed=True, name="rb-x", namespace="rb-x"),
                   JobFacts(uid=JOB_UID, created=1.0, finished=True, name="rb-x", namespace="elsewhere"),
                   JobFacts(uid=JOB_UID, created=1.0, finished=True, name="forged", namespace="rb-x")):
        assert not t.owns_job(forged)
        t.observe_job(forged, now=5.0)
    assert t.job is None and t.job_finished_seen_at is None
    unknown = BatchTracker(1, 0, namespace="rb-x", job_name="rb-x")
    assert not unknown.owns_job(JobFacts(uid=JOB_UID, created=1.0, name="rb-x", namespace="rb-x"))


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(sorted(FORGERIES)), st.booleans()), max_size=30))
def test_no_mix_of_forged_pods_finalizes_or_retries_anything(events):
    t = tracker(4, 2)
    for n, (index, forgery, deleted) in enumerate(events):
        facts = pod(index, uid=f"f{n}", phase="Failed" if n % 2 else "Succeeded", exit_code=0,
                    disrupted=bool(n % 2), **FORGERIES[forgery])
        t.pod_deleted(facts) if deleted else t.observe_pod(facts)
    assert not t.results and not t.retried and not t.take_reads() and t.running == 0


# -- a pooled batch: the Job controller's cold pod for a claimed index ---------------------------
def pooled_pod(index: int, uid: str, phase: str = "Running", *, claimed: bool = False, delivered: bool = False,
               **kw) -> PodFacts:
    return pod(index, uid=uid, phase=phase, pooled=True, container_started=phase == "Running",
               claimed_at=101.0 if claimed else None, delivered_at=102.0 if delivered else None, **kw)


DUPLICATE_ENDS = {   # how the Job controller's deletion of a cold pod for a claimed index ends it
    "during its prepare (a shell as PID 1 killed)": dict(phase="Failed", exit_code=137, deleting=True),
    "while it waited (the launcher's trap)": dict(phase="Failed", exit_code=NOT_DELIVERED_EXIT, deleting=True),
    "before it started": dict(phase="Pending", deleting=True),
}


@pytest.mark.parametrize("end", sorted(DUPLICATE_ENDS))
@pytest.mark.parametrize("cold_seen_first", [False, True])
def test_a_cold_pod_of_a_claimed_index_is_no_attempt_of_it(end, cold_seen_first):
    """Its end is neither judged (a 137 read as the episode's failure would take the index's
    verdict from the claimed pod) nor a retry (with retries 0, the index would be lost)."""
    t = tracker(2, 0, pooled=True)
    warm = pooled_pod(0, "warm", claimed=True, delivered=True)
    cold = pooled_pod(0, "cold")
    for facts in ([cold, warm] if cold_seen_first else [warm, cold]):
        t.observe_pod(facts)
    ended = dataclasses.replace(cold, **DUPLICATE_ENDS[end])
    t.observe_pod(ended)
    t.pod_deleted(ended)
    assert t.take_reads() == [] and t.retried == 0 and not t.results
    assert [f.uid for f in t.live_pods()] == ["warm"]
    t.observe_pod(dataclasses.replace(warm, phase="Succeeded", exit_code=0))
    assert [f.uid for f in t.take_reads()] == ["warm"]
    t.record(result(0), "warm")
    assert t.results[0].outcome == "succeeded" and t.results[0].attempts == 1


def test_a_cold_pod_seen_before_the_claimed_pod_leaves_the_claimed_pods_retry():
    """The watch brought the Job controller's cold pod of a claimed index first: it is no failure
    of the index, so the claimed pod's eviction is its one retry, not its end."""
    t = tracker(1, 1, pooled=True)
    cold = pooled_pod(0, "cold")
    warm = pooled_pod(0, "warm", claimed=True, delivered=True)
    t.observe_pod(cold)
    t.observe_pod(warm)
    t.observe_pod(dataclasses.replace(warm, phase="Failed", disrupted=True, ready=False))
    assert (t.retried, t.results.get(0)) == (1, None)


def test_a_claimed_pod_held_before_its_adoption_stops_holding_its_index_once_it_is_gone():
    """Claimed before the Job exists, a pod is held (no owner yet) until the Job adopts it; once
    adopted and evicted, no stale held snapshot of it may shadow the replacement."""
    t = BatchTracker(1, 1, namespace="rb-x", job_name="rb-x", pooled=True)
    orphan = pooled_pod(0, "warm", claimed=True, owner_uid=None)
    t.observe_pod(orphan)
    t.expect_job(JOB_UID)
    assert [f.uid for f in t.claimed_orphans()] == ["warm"]
    adopted = dataclasses.replace(orphan, owner_uid=JOB_UID)
    t.observe_pod(adopted)
    assert t.claimed_orphans() == []
    t.observe_pod(dataclasses.replace(adopted, phase="Failed", exit_code=NOT_DELIVERED_EXIT, deleting=True))
    assert t.retried == 1
    cold = pooled_pod(0, "cold")
    t.observe_pod(cold)
    t.observe_pod(dataclasses.replace(cold, phase="Failed", exit_code=NOT_DELIVERED_EXIT, deleting=True))
    assert 0 in t.results and t.results[0].outcome == "lost"   # the retry, and it was the last one


def test_after_a_restart_the_claimed_pod_holds_its_index_whatever_order_the_pods_came_in():
    t = BatchTracker(1, 0, namespace="rb-x", job_name="rb-x", pooled=True)
    t.observe_pod(pooled_pod(0, "cold", phase="Failed", exit_code=NOT_DELIVERED_EXIT))   # before the Job is known
    t.observe_pod(pooled_pod(0, "warm", claimed=True, delivered=True))
    t.expect_job(JOB_UID)
    assert t.retried == 0 and not t.results and [f.uid for f in t.live_pods()] == ["warm"]


def test_a_cold_pod_whose_log_is_read_when_its_index_turns_out_claimed_gives_no_verdict():
    t = tracker(1, 0, pooled=True)
    t.observe_pod(pooled_pod(0, "cold", phase="Failed", exit_code=137))
    assert [f.uid for f in t.take_reads()] == ["cold"]
    t.observe_pod(pooled_pod(0, "warm", claimed=True, delivered=True))
    t.record(dataclasses.replace(result(0, "failed"), pod="cold"), "cold")
    assert not t.results and not t.busy
    t.observe_pod(pooled_pod(0, "warm", phase="Succeeded", exit_code=0, claimed=True, delivered=True))
    t.take_reads()
    t.record(result(0), "warm")
    assert t.results[0].outcome == "succeeded"


def test_a_pooled_pod_never_handed_its_episode_that_ends_with_its_job_is_no_retry():
    """The Job's deadline passed (or it failed): its controller deletes the pods, a waiting or
    preparing launcher exits NOT_DELIVERED_EXIT, and no replacement follows: the index ends as the
    Job did (give_up_missing), not as an infrastructure failure."""
    for job in (JobFacts(uid=JOB_UID, created=100.0, name="rb-x", namespace="rb-x", deadline_at=200.0),
                JobFacts(uid=JOB_UID, created=100.0, name="rb-x", namespace="rb-x", finished=True, failed=True)):
        t = tracker(1, 0, pooled=True)
        t.observe_job(job, now=201.0)
        t.observe_pod(pooled_pod(0, "cold", phase="Failed", exit_code=NOT_DELIVERED_EXIT, finished_at=201.0))
        assert t.retried == 0 and not t.results
    # before the deadline it is an infrastructure retry as ever
    t = tracker(1, 1, pooled=True)
    t.observe_job(JobFacts(uid=JOB_UID, created=100.0, name="rb-x", namespace="rb-x", deadline_at=200.0), now=150.0)
    t.observe_pod(pooled_pod(0, "cold", phase="Failed", exit_code=NOT_DELIVERED_EXIT, finished_at=150.0))
    assert t.retried == 1


def test_a_cold_pod_is_the_retry_once_the_claimed_pod_is_gone_and_counts_when_handed_over():
    t = tracker(2, 1, pooled=True)
    warm = pooled_pod(0, "warm", claimed=True)
    t.observe_pod(warm)
    # its hand-over failed: evicted, an infrastructure retry of the index
    t.observe_pod(dataclasses.replace(warm, phase="Failed", exit_code=NOT_DELIVERED_EXIT, deleting=True))
    assert t.retried == 1
    cold = pooled_pod(0, "cold")
    t.observe_pod(cold)   # no holder now: the retry, handed over and judged as any attempt
    t.observe_pod(dataclasses.replace(cold, phase="Failed", exit_code=1, delivered_at=102.0))
    assert [f.uid for f in t.take_reads()] == ["cold"]
    # a cold pod that was handed its episode is an attempt even beside a claimed pod of its index
    t2 = tracker(1, 0, pooled=True)
    t2.observe_pod(pooled_pod(0, "warm", claimed=True))
    t2.observe_pod(pooled_pod(0, "cold", phase="Failed", exit_code=1, delivered=True))
    assert [f.uid for f in t2.take_reads()] == ["cold"]


# -- snapshots out of order (a resync list read while the watch is applied) --------------------------
def test_a_snapshot_older_than_the_pods_deletion_does_not_bring_it_back():
    """Kept live, it would count as running, keep its Unschedulable, and hold a stop for ever."""
    t = tracker(2, 0)
    pending = pod(0, uid="p", phase="Pending", ready=False, unschedulable="0/2 nodes are available")
    t.observe_pod(pending)
    t.pod_deleted(pending)
    t.observe_pod(pending)
    t.stop()
    t.observe_job(JobFacts(uid=JOB_UID, created=1.0, name="rb-x", namespace="rb-x", suspended=True, pods_left=0),
                  now=5.0)
    assert (t.live_pods(), t.unschedulable(), t.stop_settled()) == ([], [], True)


def test_a_pod_deleted_before_its_job_is_known_stays_deleted():
    t = BatchTracker(1, 0, namespace="rb-x", job_name="rb-x")
    running = pod(0, uid="p")
    t.pod_deleted(running)
    t.observe_pod(running)
    t.expect_job(JOB_UID)
    assert t.live_pods() == []


def test_an_ended_pod_is_not_live_again_by_an_older_snapshot():
    t = tracker(2, 0)
    done = pod(0, uid="p", phase="Succeeded", exit_code=0)
    t.observe_pod(done)
    t.observe_pod(pod(0, uid="p"))
    (facts,) = t.take_reads()
    t.observe_pod(pod(0, uid="p"))   # while its log is read
    assert t.live_pods() == []
    t.record(result(0), facts.uid)
    assert (t.running, t.live_pods(), t.results[0].outcome) == (0, [], "succeeded")


def test_a_snapshot_from_before_the_adoption_does_not_hold_the_index_against_the_retry():
    """A claimed pod, adopted then evicted (a retry): its owner-less snapshot from before the
    adoption, applied late, is not a claim again, so the Job's cold replacement is the retry."""
    from rolloutbatch.core.pools import held_indexes, shadowed
    t = BatchTracker(1, 2, namespace="rb-x", job_name="rb-x", pooled=True)
    orphan = pooled_pod(0, "warm", claimed=True, owner_uid=None)
    t.observe_pod(orphan)
    t.expect_job(JOB_UID)
    adopted = dataclasses.replace(orphan, owner_uid=JOB_UID, delivered_at=102.0)
    t.observe_pod(adopted)
    t.observe_pod(dataclasses.replace(adopted, phase="Failed", disrupted=True, ready=False))
    assert t.retried == 1 and 0 not in t.results
    t.observe_pod(orphan)
    assert t.claimed_orphans() == []
    cold = pooled_pod(0, "cold")
    t.observe_pod(cold)
    assert not shadowed(cold, held_indexes(t.index_holders()))
    t.observe_pod(dataclasses.replace(cold, phase="Failed", exit_code=NOT_DELIVERED_EXIT, ready=False))
    assert t.retried == 2


def test_a_listed_snapshot_gives_way_to_what_the_watch_brought_during_the_list():
    t = tracker(2, 0)
    listed = pod(0, uid="p", phase="Pending", ready=False, unschedulable="0/2 nodes are available")
    t.observe_pod(listed)            # the watch, before the list: the list is newer
    mark = t.listing_mark()
    t.observe_pod(pod(0, uid="p"))   # the watch, while the list is read
    t.observe_listed(listed, mark)
    assert (t.running, t.unschedulable()) == (1, [])
    later = t.listing_mark()
    t.observe_listed(pod(1, uid="q"), later)   # a pod only the list found
    t.observe_listed(pod(0, uid="p", phase="Succeeded", exit_code=0), later)
    assert [f.uid for f in t.live_pods()] == ["q"] and [f.uid for f in t.take_reads()] == ["p"]


# -- pods the scheduler cannot place ------------------------------------------------------------
def test_a_batch_whose_pods_no_node_can_hold_is_stuck_after_the_grace():
    t = tracker(2, 0)
    for i in range(2):
        t.observe_pod(pod(i, phase="Pending", ready=False, unschedulable="0/2 nodes are available: 2 Insufficient memory."))
    assert [f.index for f in t.unschedulable()] == [0, 1]
    assert t.stuck_unschedulable(100.0, 60) is None
    assert t.stuck_unschedulable(159.0, 60) is None
    assert t.stuck_unschedulable(160.0, 60).unschedulable.endswith("Insufficient memory.")


def test_a_busy_cluster_that_runs_some_episodes_is_not_stuck():
    t = tracker(3, 0)
    t.observe_pod(pod(0, phase="Pending", ready=False, unschedulable="0/2 nodes are available"))
    assert t.stuck_unschedulable(0.0, 60) is None
    t.observe_pod(pod(1))                                   # one runs: the cluster is only busy
    assert t.stuck_unschedulable(100.0, 60) is None
    t.observe_pod(pod(1, phase="Succeeded", exit_code=0))   # it ended: progress restarts the clock
    t.record(result(1), "uid-1")
    assert t.stuck_unschedulable(150.0, 60) is None
    assert t.stuck_unschedulable(209.0, 60) is None and t.stuck_unschedulable(210.0, 60) is not None
    t.observe_pod(pod(0, phase="Pending", ready=False))     # scheduled at last
    assert not t.unschedulable() and t.stuck_unschedulable(500.0, 60) is None


@pytest.mark.parametrize("known_by", ["annotation", "this operator's record"])
def test_a_pool_pod_handed_its_episode_that_exits_not_delivered_is_the_agents_failure(known_by):
    """Its launcher exits NOT_DELIVERED_EXIT only before the hand-over; after it, an exit so is
    what ran in the container (its user may ptrace PID 1 and make it exit so), and a retry would
    re-roll the attempt it failed. The first wave's annotation comes seconds later: the tracker's
    own record of the hand-over counts as much."""
    t = tracker(1, 1, pooled=True)
    warm = pooled_pod(0, "warm", claimed=True, delivered=known_by == "annotation")
    if known_by != "annotation":
        t.handed_over("warm", 102.0)
    t.observe_pod(warm)
    t.observe_pod(dataclasses.replace(warm, phase="Failed", exit_code=NOT_DELIVERED_EXIT))
    assert t.retried == 0 and [f.uid for f in t.take_reads()] == ["warm"]   # judged, not retried
    # one never handed its episode is still an infrastructure retry
    t = tracker(1, 1, pooled=True)
    cold = pooled_pod(0, "cold")
    t.observe_pod(cold)
    t.observe_pod(dataclasses.replace(cold, phase="Failed", exit_code=NOT_DELIVERED_EXIT))
    assert t.retried == 1 and not t.take_reads()
