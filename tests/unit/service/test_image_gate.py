"""service.image_gate: each pod of the batch's own Job patched once, a changed pod tried again only
with its next snapshot, transient errors retried, a refusal kept for the reconciler's policy."""
import asyncio
import copy
import logging

import jsonpatch

from rolloutbatch.core import manifests, naming
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.verdict import pod_facts
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Forbidden, Invalid, Unavailable
from rolloutbatch.service.image_gate import REFUSALS_BEFORE_WARNING, ImageGate
from tests.unit.core.factories import MINIMAL, REF

SPEC = parse_spec({**MINIMAL, "episodes": 4, "samplesPerInput": 2, "inputImages": ["a:1", "b:1"]})
NS = naming.child_namespace(REF, SPEC)
JOB_UID = "job-uid"


def make_pod(index: int, owner: str = JOB_UID) -> dict:
    template = copy.deepcopy(manifests.job(REF, SPEC, None)["spec"]["template"])
    return {"metadata": {"name": f"{naming.job_name(REF)}-{index}-x", "namespace": NS, "uid": f"u{index}-{owner}",
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                         "ownerReferences": [{"uid": owner, "controller": True, "kind": "Job"}]},
            "spec": template["spec"], "status": {"phase": "Pending"}}


class Pods:
    """Stands in for the storage layer's pods: a JSON patch is applied with its tests, as the API does."""

    def __init__(self, *pods: dict) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.patches: list[str] = []
        self.fail_with: list[Exception] = []
        self.read_fails_with: list[Exception] = []

    async def call(self, fn, *args):
        if fn is resources.get_or_none and self.read_fails_with:
            raise self.read_fails_with.pop(0)
        if fn is resources.get_or_none:
            kind, name, namespace = args
            assert kind == "Pod" and namespace == NS
            return copy.deepcopy(self.pods.get(name))
        assert fn is resources.patch_pod
        namespace, name, ops = args
        assert namespace == NS
        self.patches.append(name)
        if self.fail_with:
            raise self.fail_with.pop(0)
        try:
            self.pods[name] = jsonpatch.apply_patch(self.pods[name], ops)
        except jsonpatch.JsonPatchTestFailed as exc:
            raise Invalid(str(exc), status=422) from None
        return True


def tracker_with(*pods: dict) -> BatchTracker:
    tracker = BatchTracker(SPEC.episodes, 2, namespace=NS, job_name=naming.job_name(REF))
    tracker.expect_job(JOB_UID)
    for pod in pods:
        tracker.observe_pod(pod_facts(pod))
    return tracker


def run_rounds(gate: ImageGate, tracker: BatchTracker, rounds: int = 3, pause: float = 0) -> None:
    async def go():
        for _ in range(rounds):
            gate.round(tracker)
            for _ in range(4):
                await asyncio.sleep(0)
            await asyncio.sleep(pause)
    asyncio.run(go())


def gate_of(pods: Pods, events: list | None = None, give_up_after: float = 600) -> ImageGate:
    return ImageGate(pods.call, SPEC, lambda *e: (events if events is not None else []).append(e),
                     logging.getLogger("t"), give_up_after)


def test_each_own_pod_gets_its_input_image_once_and_a_foreign_pod_none():
    own = [make_pod(i) for i in range(4)]
    foreign = make_pod(1, owner="someone-else")
    foreign["metadata"]["name"] += "-forged"
    pods = Pods(*own, foreign)
    gate, tracker = gate_of(pods), tracker_with(*own, foreign)
    run_rounds(gate, tracker)
    assert sorted(pods.patches) == sorted(p["metadata"]["name"] for p in own)
    for i, pod in enumerate(own):
        live = pods.pods[pod["metadata"]["name"]]
        assert live["spec"]["containers"][0]["image"] == ["a:1", "b:1"][i // 2]
        assert "schedulingGates" not in live["spec"]
    assert pods.pods[foreign["metadata"]["name"]]["spec"]["schedulingGates"] == [{"name": naming.IMAGE_GATE}]
    # a later snapshot still showing the gate (the watch lags the patch) is not patched again
    for pod in own:
        tracker.observe_pod(pod_facts({**pod, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}}))
    run_rounds(gate, tracker)
    assert len(pods.patches) == 4 and gate.error is None


def test_a_pod_changed_meanwhile_is_tried_again_with_its_next_snapshot_only():
    pod = make_pod(0)
    seen = copy.deepcopy(pod)
    pod["metadata"]["uid"] = "recreated"        # the API's pod is not the one the snapshot shows
    pods, events = Pods(pod), []
    gate, tracker = gate_of(pods, events), tracker_with(seen)
    run_rounds(gate, tracker, rounds=5)
    assert pods.patches == [pod["metadata"]["name"]]           # no spinning on the same snapshot
    for n in range(REFUSALS_BEFORE_WARNING - 1):
        tracker.observe_pod(pod_facts({**seen, "status": {"phase": "Pending", "message": str(n)}}))
        run_rounds(gate, tracker)
    assert len(pods.patches) == REFUSALS_BEFORE_WARNING and gate.error is None
    assert [e[1] for e in events] == ["InputImageNotSet"]


def test_transient_errors_are_retried_and_a_refusal_is_kept_for_the_policy():
    pod = make_pod(0)
    pods = Pods(pod)
    pods.fail_with = [Unavailable("down", status=503)]
    gate, tracker = gate_of(pods), tracker_with(pod)
    run_rounds(gate, tracker, pause=0.3)     # the policy's first backoff is 0.5 s
    assert len(pods.patches) == 2 and "schedulingGates" not in pods.pods[pod["metadata"]["name"]]["spec"]
    other = make_pod(1)
    pods = Pods(other)
    pods.fail_with = [Forbidden("no", status=403)]
    gate = gate_of(pods)
    run_rounds(gate, tracker_with(other))
    assert isinstance(gate.error, Forbidden)


def test_nothing_is_patched_while_the_batch_stops_or_without_input_images():
    pod = make_pod(0)
    pods = Pods(pod)
    tracker = tracker_with(pod)
    tracker.stop()
    run_rounds(gate_of(pods), tracker)
    plain = parse_spec({**MINIMAL, "episodes": 4})
    run_rounds(ImageGate(pods.call, plain, lambda *e: None, logging.getLogger("t")), tracker_with(pod))
    assert pods.patches == []


def test_a_patch_the_cluster_refuses_is_told_from_a_changed_pod_and_ends_the_batch():
    """An admission policy on images answers 422 like a failed test; the pod, read again, is
    exactly as the patch expects: a refusal, not a race (it would otherwise wait gated forever)."""
    pod = make_pod(0)
    pods = Pods(pod)
    pods.fail_with = [Invalid("denied by image policy", status=422)]
    gate = gate_of(pods)
    run_rounds(gate, tracker_with(pod))
    assert isinstance(gate.error, Invalid) and "refused to set the image" in str(gate.error)
    assert "denied by image policy" in str(gate.error)


def test_transient_failures_past_the_give_up_time_end_the_batch():
    pod = make_pod(0)
    pods = Pods(pod)
    pods.fail_with = [Unavailable("webhook down", status=500)] * 3
    gate = gate_of(pods, give_up_after=0)
    run_rounds(gate, tracker_with(pod), rounds=3, pause=0.3)   # one backoff, then the policy gives up
    assert len(pods.patches) == 2 and isinstance(gate.error, Unavailable)


def test_a_pod_that_cannot_be_read_after_a_422_is_tried_again_not_left_gated():
    """The re-read that tells a refusal from a changed pod fails transiently: the patch is tried
    again after the backoff (it was left waiting for a snapshot that might never come)."""
    pod = make_pod(0)
    pods = Pods(pod)
    pods.fail_with = [Invalid("test failed", status=422)]
    pods.read_fails_with = [Unavailable("down", status=503)]
    gate = gate_of(pods)
    run_rounds(gate, tracker_with(pod), rounds=3, pause=0.3)
    assert len(pods.patches) == 2 and gate.error is None
    assert "schedulingGates" not in pods.pods[pod["metadata"]["name"]]["spec"]
