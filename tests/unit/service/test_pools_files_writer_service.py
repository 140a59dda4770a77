"""The verifier's files writer in the verifier phase's hand-over (service.episode_delivery): the
verifier's time is checked after the writer's attach too, a writer whose answer was lost is looked
at again, and a writer not started yet is waited for."""
from __future__ import annotations

import asyncio
import time

from rolloutbatch.core import launchers, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube.errors import Unavailable, Unconfirmed
from rolloutbatch.service import episode_delivery
from tests.unit.service.memory_pool import POOL_NS, delivery, delivery_round, run, set_status
from tests.unit.service.test_pools_verifier_service import _agent_ended, _claimed


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def test_the_verifier_is_never_handed_less_than_its_time_after_the_writers_attach(api):
    """Design/module doc: "the time left is checked once the hand-over has its slot, so an
    episode queued behind others is never handed less than its time"; a phase that no longer
    fits is evicted (an infrastructure retry), else the pod's deadline cuts the verifier short
    and the honest episode reads VerifierFailed ("ran past the pod's deadline"). The check runs
    before the writer's attach, which may take up to DELIVERY_TIMEOUT (20 s: hello, the script,
    and the writer's writes at 100m CPU, all before its RECEIVED), while the verifier's slack is
    VERIFIER_SLACK_SECONDS (5 s): the verifier was then handed its phase with less than its time."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    need = spec.verifier.timeout_seconds + launchers.VERIFIER_SLACK_SECONDS
    pod = api.get_object("Pod", name, POOL_NS)
    now = time.time()
    delivered = now - 90          # the agent ran 60 s of its 60, well within its time
    start = now - pod["spec"]["activeDeadlineSeconds"] + need + 2.5
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
                    {"metadata": {"annotations": {naming.ANNOTATION_DELIVERED_AT: f"{delivered:.3f}"}}}, "test")
    set_status(api, name, {"phase": "Running", "startTime": _stamp(start), "containerStatuses": [
        {"name": "agent", "started": False, "state": {"terminated": {
            "exitCode": 0, "finishedAt": _stamp(delivered + 60),
            "message": '{"event":"agent_exit","exit_code":0,"timed_out":false}'}}},
        {"name": "verifier", "started": True, "state": {"running": {}}},
        {"name": "verifier-files", "started": True, "state": {"running": {}}}]})
    deadline_at = pod_facts(api.get_object("Pod", name, POOL_NS)).own_deadline_at
    assert deadline_at - time.time() >= need     # the phase fits when its slot is taken
    left_at_verifier: list[float] = []

    async def handler(container: str, stdin: bytes) -> None:
        if container == naming.VERIFIER_FILES_CONTAINER:
            await asyncio.sleep(4)               # the writer's attach: well within DELIVERY_TIMEOUT
        elif container == naming.VERIFIER_CONTAINER:
            left_at_verifier.append(deadline_at - time.time())
    api.set_attach(POOL_NS, name, handler)
    events: list = []
    run(delivery_round(api, delivery(api, spec, events, []), 1))
    assert not left_at_verifier or left_at_verifier[0] >= need, (
        f"the verifier was handed its {need} s phase with {left_at_verifier[0]:.1f} s left before the pod's deadline")


def test_a_writer_whose_received_line_was_lost_does_not_strand_a_graded_attempt(api):
    """The writer's attach sent every byte and heard nothing back (kube.errors.Unconfirmed): the
    writer may well have written the files and ended 0. The operator marks the verifier's phase
    done and never looks again: the verifier is never handed its phase, the pod idles to its
    deadline and the index is re-run as an infrastructure retry (the verifier's
    NOT_DELIVERED_EXIT), the agent's finished attempt thrown away and re-rolled. A writer that
    ended 0 is one the design says to skip ("a writer that already ended 0 ... is skipped"):
    the verifier should be handed its phase once the writer is seen to have ended 0."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    lost = [True]

    def handler(container: str, stdin: bytes) -> None:
        if container == naming.VERIFIER_FILES_CONTAINER and lost[0]:
            lost[0] = False
            raise Unconfirmed("the container did not confirm its input within 20s (all of it was sent)")
    api.set_attach(POOL_NS, name, handler)
    d = delivery(api, spec, [], [])
    _agent_ended(api, name, 0)
    run(delivery_round(api, d, 1))
    _agent_ended(api, name, 0, writer_exit=0)       # it wrote the files, said RECEIVED (lost), ended 0
    run(delivery_round(api, d, 1))
    run(delivery_round(api, d, 1))
    assert naming.VERIFIER_CONTAINER in [e[2] for e in api.attaches], \
        f"the verifier was never handed its phase: attaches {[e[2] for e in api.attaches]}"


def test_the_verifier_phase_waits_for_a_files_writer_not_started_yet(api):
    """A cold pod's containers start one after another: an agent that ends at once may end before
    the writer started, and an attach to it then would fail and evict a pod whose agent ran."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    d = delivery(api, spec, [], [])
    _agent_ended(api, name, 0)
    pod = api.get_object("Pod", name, POOL_NS)
    pod["status"]["containerStatuses"][2] = {"name": "verifier-files", "started": False,
                                             "state": {"waiting": {"reason": "ContainerCreating"}}}
    set_status(api, name, pod["status"])
    run(delivery_round(api, d, 1))
    assert api.attaches == []
    _agent_ended(api, name, 0)     # now it runs
    run(delivery_round(api, d, 1))
    assert [e[2] for e in api.attaches] == [naming.VERIFIER_FILES_CONTAINER, naming.VERIFIER_CONTAINER]


def test_a_verifier_that_ended_before_its_phase_ends_its_files_writer_too(api):
    """Killed while it waited (its memory, a kill), the verifier ends; the writer, still waiting,
    kept the pod running to its deadline, and the row said that deadline, not the verifier's end.
    It is handed nothing to write, once, and ends."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    d = delivery(api, spec, [], [])
    set_status(api, name, {"phase": "Running", "startTime": _stamp(time.time()), "containerStatuses": [
        {"name": "agent", "started": True, "state": {"running": {}}},
        {"name": "verifier", "started": False, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
        {"name": "verifier-files", "started": True, "state": {"running": {}}}]})
    run(delivery_round(api, d, 1))
    run(delivery_round(api, d, 1))
    to_writer = [e for e in api.attaches if e[2] == naming.VERIFIER_FILES_CONTAINER]
    assert len(to_writer) == 1 and b"/verifier/" not in to_writer[0][3]    # its end, no file
    assert not [e for e in api.attaches if e[2] == naming.VERIFIER_CONTAINER]


def _rounds(api, d, monkeypatch, rounds: int, step: float) -> None:
    """``rounds`` delivery rounds, the delivery's clock moved on ``step`` seconds after each."""
    clock = [time.monotonic()]
    monkeypatch.setattr(episode_delivery.time, "monotonic", lambda: clock[0])
    for _ in range(rounds):
        run(delivery_round(api, d, 1))
        clock[0] += step


def test_an_unconfirmed_files_hand_over_is_retried_with_a_visible_state(api, monkeypatch):
    """The writer's attach keeps going unconfirmed: the files are sent again every DELIVERY_TIMEOUT
    until the pod's deadline; an Event says so, as for every other hand-over that failed or went
    unconfirmed (only the operator's log did)."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]

    def handler(container: str, stdin: bytes) -> None:
        if container == naming.VERIFIER_FILES_CONTAINER:
            raise Unconfirmed("the container did not confirm its input within 20s (all of it was sent)")
    api.set_attach(POOL_NS, name, handler)
    events: list = []
    d = delivery(api, spec, events, [])
    _agent_ended(api, name, 0)
    _rounds(api, d, monkeypatch, 5, episode_delivery.DELIVERY_TIMEOUT + 1)
    to_writer = [e for e in api.attaches if e[2] == naming.VERIFIER_FILES_CONTAINER]
    assert len(to_writer) == 5    # sent again each time its wait is over
    assert [e[1] for e in events] == [v.EVENT_DELIVERY_FAILED] and "did not confirm" in events[0][2], events


def test_ending_the_writer_of_a_dead_verifier_survives_one_failed_attach(api, monkeypatch):
    """A verifier container that ended before its phase has its writer handed nothing, so that it
    ends too. One transient attach failure (the API's 5xx, a dropped connection) left the writer
    waiting, and the pod with it, to its deadline: a later round tries again."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    failures = [1]

    def handler(container: str, stdin: bytes) -> None:
        if container == naming.VERIFIER_FILES_CONTAINER and failures[0]:
            failures[0] -= 1
            raise Unavailable("attach: connection reset by peer")
    api.set_attach(POOL_NS, name, handler)
    d = delivery(api, spec, [], [])
    set_status(api, name, {"phase": "Running", "startTime": _stamp(time.time()), "containerStatuses": [
        {"name": "agent", "started": True, "state": {"running": {}}},
        {"name": "verifier", "started": False, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
        {"name": "verifier-files", "started": True, "state": {"running": {}}}]})
    _rounds(api, d, monkeypatch, 3, episode_delivery.WRITER_END_PAUSE + 0.1)
    to_writer = [e for e in api.attaches if e[2] == naming.VERIFIER_FILES_CONTAINER]
    assert len(to_writer) == 2, (
        f"the writer's end was tried {len(to_writer)} time(s); after one failed attach the writer of a dead "
        "verifier waits, and the pod with it, to the pod's deadline")
