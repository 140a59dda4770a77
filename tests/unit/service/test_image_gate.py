"""service.image_gate: each pod of the batch's own Job patched once, a changed pod tried again only
with its next snapshot, transient errors retried, a refusal kept for the reconciler's policy."""
import asyncio
import copy
import logging

from rolloutbatch.core import manifests, naming
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube.errors import Forbidden, Invalid, Unavailable
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service.image_gate import REFUSALS_BEFORE_WARNING, ImageGate
from tests.support.memory_api import MemoryApi
from tests.unit.core.factories import MINIMAL, REF

SPEC = parse_spec({**MINIMAL, "episodes": 4, "samplesPerInput": 2, "inputImages": ["a:1", "b:1"]})
NS = naming.child_namespace(REF, SPEC)
JOB_UID = "job-uid"


def make_pod(index: int, owner: str = JOB_UID) -> dict:
    template = copy.deepcopy(manifests.job(REF, SPEC, None)["spec"]["template"])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{naming.job_name(REF)}-{index}-x", "namespace": NS, "uid": f"u{index}-{owner}",
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                         "ownerReferences": [{"uid": owner, "controller": True, "kind": "Job"}]},
            "spec": template["spec"], "status": {"phase": "Pending"}}


def cluster(*pods: dict) -> MemoryApi:
    """The sandbox namespace, the batch's Job (uid JOB_UID) and ``pods``, as the API holds them."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": naming.job_name(REF), "namespace": NS,
                                                                  "uid": JOB_UID}, "spec": {}})
    for pod in pods:
        api.put(copy.deepcopy(pod))
    return api


def patched(api: MemoryApi) -> list[str]:
    """The pods a patch was sent for (sent: refused or not), in order."""
    return [path.rsplit("/", 1)[1] for method, path in api.calls if method == "PATCH" and "/pods/" in path]


def live(api: MemoryApi, pod: dict) -> dict:
    return api.get_object("Pod", pod["metadata"]["name"], NS)


def tracker_with(*pods: dict) -> BatchTracker:
    tracker = BatchTracker(SPEC.episodes, 2, namespace=NS, job_name=naming.job_name(REF))
    tracker.expect_job(JOB_UID)
    for pod in pods:
        tracker.observe_pod(pod_facts(pod))
    return tracker


class CountedStorage(Storage):
    """The storage layer, counting its calls in flight: each runs in a worker thread, and a
    round is over once the calls it started were answered."""

    def __init__(self, api) -> None:
        super().__init__(api)
        self.in_flight = 0

    async def _run(self, operation, *args, **kwargs):
        self.in_flight += 1
        try:
            return await super()._run(operation, *args, **kwargs)
        finally:
            self.in_flight -= 1


async def settle(storage: CountedStorage) -> None:
    """Until the patches (and the reads after a 422) started so far have their answers."""
    while True:
        for _ in range(4):
            await asyncio.sleep(0)
        if not storage.in_flight:
            return
        await asyncio.sleep(0.001)


def run_rounds(gate: ImageGate, tracker: BatchTracker, rounds: int = 3, pause: float = 0) -> None:
    async def go():
        for _ in range(rounds):
            gate.round(tracker)
            await settle(gate.storage)
            await asyncio.sleep(pause)
    asyncio.run(go())


def gate_of(api: MemoryApi, events: list | None = None, give_up_after: float = 600, spec=SPEC) -> ImageGate:
    return ImageGate(CountedStorage(api), spec, lambda *e: (events if events is not None else []).append(e),
                     logging.getLogger("t"), give_up_after)


def test_each_own_pod_gets_its_input_image_once_and_a_foreign_pod_none():
    own = [make_pod(i) for i in range(4)]
    foreign = make_pod(1, owner="someone-else")
    foreign["metadata"]["name"] += "-forged"
    api = cluster(*own, foreign)
    gate, tracker = gate_of(api), tracker_with(*own, foreign)
    run_rounds(gate, tracker)
    assert sorted(patched(api)) == sorted(p["metadata"]["name"] for p in own)
    for i, pod in enumerate(own):
        assert live(api, pod)["spec"]["containers"][0]["image"] == ["a:1", "b:1"][i // 2]
        assert "schedulingGates" not in live(api, pod)["spec"]
    assert live(api, foreign)["spec"]["schedulingGates"] == [{"name": naming.IMAGE_GATE}]
    # a later snapshot still showing the gate (the watch lags the patch) is not patched again
    for pod in own:
        tracker.observe_pod(pod_facts({**pod, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}}))
    run_rounds(gate, tracker)
    assert len(patched(api)) == 4 and gate.error is None


def test_a_pod_changed_meanwhile_is_tried_again_with_its_next_snapshot_only():
    pod = make_pod(0)
    seen = copy.deepcopy(pod)
    pod["metadata"]["uid"] = "recreated"        # the API's pod is not the one the snapshot shows
    api, events = cluster(pod), []
    gate, tracker = gate_of(api, events), tracker_with(seen)
    run_rounds(gate, tracker, rounds=5)
    assert patched(api) == [pod["metadata"]["name"]]           # no spinning on the same snapshot
    for n in range(REFUSALS_BEFORE_WARNING - 1):
        tracker.observe_pod(pod_facts({**seen, "status": {"phase": "Pending", "message": str(n)}}))
        run_rounds(gate, tracker)
    assert len(patched(api)) == REFUSALS_BEFORE_WARNING and gate.error is None
    assert [e[1] for e in events] == ["InputImageNotSet"]
    # the recreated pod was never changed by a patch meant for the other one
    assert live(api, pod)["spec"]["schedulingGates"] == [{"name": naming.IMAGE_GATE}]


def test_transient_errors_are_retried_and_a_refusal_is_kept_for_the_policy():
    pod = make_pod(0)
    api = cluster(pod)
    api.fail("PATCH", "Pod", Unavailable("down", status=503))
    gate, tracker = gate_of(api), tracker_with(pod)
    run_rounds(gate, tracker, pause=0.3)     # the policy's first backoff is 0.5 s
    assert len(patched(api)) == 2 and "schedulingGates" not in live(api, pod)["spec"]
    other = make_pod(1)
    api = cluster(other)
    api.fail("PATCH", "Pod", Forbidden("no", status=403))
    gate = gate_of(api)
    run_rounds(gate, tracker_with(other))
    assert isinstance(gate.error, Forbidden)
    assert live(api, other)["spec"]["schedulingGates"] == [{"name": naming.IMAGE_GATE}]


def test_nothing_is_patched_while_the_batch_stops_or_without_input_images():
    pod = make_pod(0)
    api = cluster(pod)
    tracker = tracker_with(pod)
    tracker.stop()
    run_rounds(gate_of(api), tracker)
    plain = parse_spec({**MINIMAL, "episodes": 4})
    run_rounds(gate_of(api, spec=plain), tracker_with(pod))
    assert patched(api) == []


def test_a_patch_the_cluster_refuses_is_told_from_a_changed_pod_and_ends_the_batch():
    """An admission policy on images answers 422 like a failed test; the pod, read again, is
    exactly as the patch expects: a refusal, not a race (it would otherwise wait gated forever)."""
    pod = make_pod(0)
    api = cluster(pod)
    api.fail("PATCH", "Pod", Invalid("denied by image policy", status=422))
    gate = gate_of(api)
    run_rounds(gate, tracker_with(pod))
    assert isinstance(gate.error, Invalid) and "refused to set the image" in str(gate.error)
    assert "denied by image policy" in str(gate.error)


def test_transient_failures_past_the_give_up_time_end_the_batch():
    pod = make_pod(0)
    api = cluster(pod)
    api.fail("PATCH", "Pod", Unavailable("webhook down", status=500), times=3)
    gate = gate_of(api, give_up_after=0)
    run_rounds(gate, tracker_with(pod), rounds=3, pause=0.3)   # one backoff, then the policy gives up
    assert len(patched(api)) == 2 and isinstance(gate.error, Unavailable)


def test_a_pod_that_cannot_be_read_after_a_422_is_tried_again_not_left_gated():
    """The re-read that tells a refusal from a changed pod fails transiently: the patch is tried
    again after the backoff (it was left waiting for a snapshot that might never come)."""
    pod = make_pod(0)
    api = cluster(pod)
    api.fail("PATCH", "Pod", Invalid("test failed", status=422))
    api.fail("GET", "Pod", Unavailable("down", status=503))
    gate = gate_of(api)
    run_rounds(gate, tracker_with(pod), rounds=3, pause=0.3)
    assert len(patched(api)) == 2 and gate.error is None
    assert "schedulingGates" not in live(api, pod)["spec"]


def test_a_pod_deleted_before_its_patch_is_not_an_error():
    pod = make_pod(0)
    api = cluster()                              # the snapshot outlived the pod
    gate = gate_of(api)
    run_rounds(gate, tracker_with(pod))
    assert patched(api) == [pod["metadata"]["name"]] and gate.error is None
