"""Kills by the kubelet itself are never read early (core.pod_reading.settled_phase).

The kubelet withholds more than the terminal phase while a pod's containers could still run
(pkg/kubelet/status/status_manager.go mergePodStatus, kubernetes#108366): it also keeps the old
status.reason / message (DeadlineExceeded, Evicted, Shutdown) and does not send its own
DisruptionTarget condition until the phase is terminal. A pod the kubelet kills for its own
activeDeadlineSeconds, or evicts (node pressure, graceful node shutdown), whose PID 1 answers
SIGTERM with exit 0 (a Go/Node/Python program with a graceful-shutdown handler, `trap 'exit 0'
TERM`: a Job pod without a verifier runs the user's command as PID 1), is published first as
Running, every container terminated with exit code 0, no reason, no DisruptionTarget, no
deletionTimestamp. Only the later snapshot says Failed/DeadlineExceeded or Failed/Evicted +
DisruptionTarget: such a pod is judged from that one (a hostile review found both cases judged
from the first when every pod settled early).
"""
from __future__ import annotations

import json

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.core.pod_reading import parse_time, pod_facts

from tests.unit.core.test_settled_phase import CREATED, JOB_UID, T0, ended
from tests.unit.core.test_settled_phase import pod as any_pod

DEADLINE = 60   # the pod's activeDeadlineSeconds (episodeTimeoutSeconds of a Job pod without a verifier)


def pod(*args, **kw) -> dict:
    """A Job's pod without a verifier: its PID 1 is the submitter's command."""
    return any_pod(*args, pooled=False, **kw)


def _log(*events: dict) -> object:
    return parse_log(b"\n".join(json.dumps(e).encode() for e in events))


def _ended_at(name: str, code: int, finished: float) -> dict:
    status = ended(name, code)
    status["state"]["terminated"]["finishedAt"] = \
        f"2026-11-29T07:{int(finished - T0) // 60:02d}:{int(finished - T0) % 60:02d}Z"
    return status


def _with_deadline(p: dict) -> dict:
    p["spec"]["activeDeadlineSeconds"] = DEADLINE
    p["status"]["startTime"] = CREATED
    return p


def _tracker() -> BatchTracker:
    tracker = BatchTracker(5, 1, namespace="rb-1", job_name="rb-1")
    tracker.expect_job(JOB_UID)
    return tracker


def test_a_pod_ended_by_its_own_deadline_is_not_read_as_succeeded():
    # TERM at the deadline (T0+60), the handler prints its late reward and exits 0 within the grace period
    early = _with_deadline(pod([_ended_at("episode", 0, T0 + 62)]))
    assert parse_time(early["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]) == T0 + 62
    facts = pod_facts(early)
    assert facts.own_deadline_at is not None and facts.finished_at >= facts.own_deadline_at
    assert facts.phase == v.PodPhase.RUNNING, "its end may be the deadline's kill: only the kubelet's word tells"


def test_the_tracker_judges_a_deadline_kill_a_success_where_the_kubelet_says_timeout():
    log = _log({"event": "ready", "at": T0 + 1, "episode_id": "rb-1-3-abc"},
               {"event": "reward", "at": T0 + 61, "episode_id": "rb-1-3-abc", "reward": 1})   # after its time
    early = pod_facts(_with_deadline(pod([_ended_at("episode", 0, T0 + 62)])))
    final_pod = _with_deadline(pod([_ended_at("episode", 0, T0 + 62)], phase="Failed"))
    final_pod["status"].update(reason="DeadlineExceeded", message="Pod was active on the node longer than the "
                                                                  "specified deadline")
    final = pod_facts(final_pod)
    # what the operator said before the change (it waited for this snapshot): Timeout, not graded
    assert judge_episode(final, log).reason == v.EP_TIMEOUT
    tracker = _tracker()
    tracker.observe_pod(early)
    for facts in tracker.take_reads():
        tracker.record(judge_episode(facts, log), facts.uid)
    tracker.observe_pod(final)
    for facts in tracker.take_reads():
        tracker.record(judge_episode(facts, log), facts.uid)
    assert tracker.results[3].reason == v.EP_TIMEOUT, \
        f"an episode past episodeTimeoutSeconds was graded {tracker.results[3].outcome} (reward 1)"


def test_a_kubelet_eviction_is_an_infrastructure_retry_not_the_agents_failure():
    # node-pressure (soft) eviction or graceful node shutdown: TERM, the program exits 0 before its reward;
    # the kubelet publishes Evicted + DisruptionTarget only with the terminal phase
    log = _log({"event": "ready", "at": T0 + 1, "episode_id": "rb-1-3-abc"})
    early = pod_facts(pod([ended("episode", 0)]))
    final_pod = pod([ended("episode", 0)], phase="Failed",
                    conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}])
    final_pod["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    final = pod_facts(final_pod)
    tracker = _tracker()
    tracker.observe_pod(early)
    for facts in tracker.take_reads():
        tracker.record(judge_episode(facts, log), facts.uid)
    tracker.observe_pod(final)
    # the Job's podFailurePolicy Counts it and makes a replacement pod for index 3; the operator should too
    assert 3 not in tracker.results and tracker.retried == 1, \
        (f"judged {tracker.results[3].outcome}/{tracker.results[3].reason} (the agent's failure) "
         f"and retried={tracker.retried}, while the Job retries the index")
