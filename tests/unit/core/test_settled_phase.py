"""An episode is judged once its containers have ended, not once the kubelet says so.

The kubelet writes a terminal phase only after it has torn the pod's sandbox down
(kubernetes/kubernetes#108366): twenty pooled episodes ending together were Succeeded in the API
between 1.5 and 9 s after their one container had exited 0. ``pod_facts`` reads such a pod as
Succeeded at once when the operator's launchers are every container's PID 1 (a pool's pod, a pod
with a verifier); every other pod keeps the phase the API gives.
"""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.verdict import is_terminal, judge_episode
from rolloutbatch.core.pod_reading import parse_time, pod_facts

CREATED = "2026-11-29T07:00:00Z"
T0 = parse_time(CREATED)
JOB_UID = "job-uid"


def ended(name: str, code: int) -> dict:
    return {"name": name, "restartCount": 0, "imageID": "img@sha256:1",
            "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     "startedAt": CREATED, "finishedAt": "2026-11-29T07:00:05Z"}}}


def running(name: str) -> dict:
    return {"name": name, "restartCount": 0, "imageID": "img@sha256:1",
            "state": {"running": {"startedAt": CREATED}}}


def pod(statuses: list[dict], *, names: tuple[str, ...] = ("episode",), phase: str = "Running",
        restart_policy: str | None = "Never", deleting: bool = False, conditions: list[dict] | None = None,
        pooled: bool = True) -> dict:
    """A pool's pod (``pooled``), else a Job's; claimed at CREATED when pooled."""
    annotations = {"batch.kubernetes.io/job-completion-index": "3"}
    if pooled:
        annotations.update({naming.POOLED_ANNOTATION: "true", naming.ANNOTATION_CLAIMED_AT: str(T0)})
    meta = {"name": "rb-1-3-abc", "namespace": "rb-1", "uid": "u1", "creationTimestamp": CREATED,
            "annotations": annotations,
            "ownerReferences": [{"controller": True, "uid": JOB_UID, "kind": "Job", "name": "rb-1"}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T07:00:06Z"
    spec = {"nodeName": "devnode-1", "containers": [{"name": n} for n in names]}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return {"metadata": meta, "spec": spec,
            "status": {"phase": phase, "containerStatuses": statuses, "conditions": conditions or []}}


def test_a_running_pod_whose_only_container_exited_zero_is_succeeded():
    facts = pod_facts(pod([ended("episode", 0)]))
    assert facts.phase == v.PodPhase.SUCCEEDED and is_terminal(facts)


def test_it_is_judged_from_its_log_as_a_succeeded_pod_is():
    log = parse_log(b"\n".join(json.dumps(e).encode() for e in (
        {"event": "ready", "at": T0 + 1, "episode_id": "rb-1-3-abc"},
        {"event": "reward", "at": T0 + 2, "episode_id": "rb-1-3-abc", "reward": 1})))
    result = judge_episode(pod_facts(pod([ended("episode", 0)])), log)
    assert (result.outcome, result.reward) == ("succeeded", 1)


def test_a_pod_with_a_container_still_running_keeps_its_phase():
    facts = pod_facts(pod([ended("agent", 0), running("verifier")], names=("agent", "verifier")))
    assert facts.phase == v.PodPhase.RUNNING and not is_terminal(facts)


def test_a_container_not_yet_reported_keeps_the_phase():
    facts = pod_facts(pod([ended("agent", 0)], names=("agent", "verifier-files", "verifier")))
    assert facts.phase == v.PodPhase.RUNNING


def test_a_non_zero_exit_waits_for_the_kubelets_word():
    # it may be the kill of an eviction or a deadline, which only the final status tells
    facts = pod_facts(pod([ended("episode", 137)]))
    assert facts.phase == v.PodPhase.RUNNING and not is_terminal(facts)


def test_a_pod_being_deleted_or_disrupted_keeps_its_phase():
    disrupted = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    assert pod_facts(pod([ended("episode", 0)], deleting=True)).phase == v.PodPhase.RUNNING
    assert pod_facts(pod([ended("episode", 0)], conditions=disrupted)).phase == v.PodPhase.RUNNING


def test_only_restart_policy_never_settles():
    # under OnFailure or Always (or a policy not stated) an ended container may run again
    for policy in ("OnFailure", "Always", None):
        assert pod_facts(pod([ended("episode", 0)], restart_policy=policy)).phase == v.PodPhase.RUNNING


def test_a_jobs_pod_without_a_verifier_keeps_its_phase():
    # its PID 1 is the submitter's command, which may answer the kubelet's TERM (its deadline, an
    # eviction) with 0; the kubelet says which only with the terminal phase
    assert pod_facts(pod([ended("episode", 0)], pooled=False)).phase == v.PodPhase.RUNNING


def test_a_jobs_pod_with_a_verifier_settles():
    # the verifier's container runs under core.launchers (its agent is an init container)
    facts = pod_facts(pod([ended("verifier", 0)], names=("verifier",), pooled=False))
    assert facts.phase == v.PodPhase.SUCCEEDED


def test_a_phase_the_api_gives_is_never_changed_but_running():
    for phase in ("Pending", "Failed", "Succeeded", "Unknown"):
        assert pod_facts(pod([ended("episode", 0)], phase=phase)).phase == phase


@given(st.lists(st.tuples(st.sampled_from(["agent", "verifier-files", "verifier", "episode"]),
                          st.one_of(st.none(), st.integers(-1, 255))), max_size=4, unique_by=lambda t: t[0]),
       st.lists(st.sampled_from(["agent", "verifier-files", "verifier", "episode"]), max_size=4, unique=True))
def test_succeeded_exactly_when_every_declared_container_exited_zero(reported, declared):
    statuses = [ended(name, code) if code is not None else running(name) for name, code in reported]
    facts = pod_facts(pod(statuses, names=tuple(declared)))
    codes = dict(reported)
    settled = bool(declared) and all(codes.get(name, "absent") == 0 for name in declared)
    assert facts.phase == (v.PodPhase.SUCCEEDED if settled else v.PodPhase.RUNNING)


def test_the_tracker_hands_it_out_to_be_read_and_the_later_terminal_snapshot_changes_nothing():
    tracker = BatchTracker(5, 1, namespace="rb-1", job_name="rb-1")
    tracker.expect_job(JOB_UID)
    tracker.observe_pod(pod_facts(pod([running("episode")])))
    assert tracker.take_reads() == []
    early = pod_facts(pod([ended("episode", 0)]))
    tracker.observe_pod(early)
    assert [f.uid for f in tracker.take_reads()] == ["u1"]
    log = parse_log(b"\n".join(json.dumps(e).encode() for e in (
        {"event": "ready", "at": T0 + 1, "episode_id": "rb-1-3-abc"},
        {"event": "reward", "at": T0 + 2, "episode_id": "rb-1-3-abc", "reward": 1})))
    tracker.record(judge_episode(early, log), "u1")
    tracker.observe_pod(pod_facts(pod([ended("episode", 0)], phase="Succeeded")))
    assert tracker.take_reads() == [] and tracker.results[3].outcome == "succeeded"
    assert tracker.running == 0
