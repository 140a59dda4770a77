"""A pooled batch with a verifier, on the API in memory (service.pool_claims): which pool it may
claim, and the two deliveries: the agent's episode to the ``agent`` container, then, once that
container ended, the verifier's phase (its files, env, time) to the ``verifier`` container; a
verifier whose agent never ran is told to grade nothing."""
from __future__ import annotations

import time

import pytest

from rolloutbatch import GROUP, VERSION
from rolloutbatch.core import naming, pool_delivery, pool_spec, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.kube.errors import Unconfirmed
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import episode_delivery, pool_claims
from tests.support.memory_api import MemoryApi
from tests.unit.service.memory_pool import (BATCH, NS, POOL_NS, batch_spec, delivery, delivery_round, filled, live,
                                            refuse, run, set_status)

VERIFIER = {"files": {"verify.py": "print('grade')"}, "timeoutSeconds": 30, "env": [{"name": "GRADE", "value": "1"}]}


@pytest.mark.parametrize("pool_verifier, batch_verifier, said", [
    ({}, None, "give the batch one"),
    (None, VERIFIER, "needs a pool with spec.verifier"),
    ({"mountPath": "/grade"}, VERIFIER, "is not the pool's"),
])
def test_a_batch_and_a_pool_that_disagree_on_the_verifier_stall_before_any_claim(api, pool_verifier, batch_verifier,
                                                                                  said):
    filled(api, 2, **({"verifier": pool_verifier} if pool_verifier is not None else {}))
    spec = batch_spec(**({"verifier": batch_verifier} if batch_verifier else {}))
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    assert err.value.reason == v.STALL_POOL_CONFLICT and said in err.value.message
    assert all(p["metadata"]["labels"].get(naming.LABEL_EPISODE_ROLE) == naming.ROLE_WARM
               for p in api.list_objects("Pod", POOL_NS))          # nothing claimed


def _claimed(api: MemoryApi, episodes: int = 1):
    filled(api, episodes, verifier={})
    spec = batch_spec(episodes=episodes, parallelism=episodes, episodeTimeoutSeconds=60, verifier=VERIFIER)
    claimed = run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                                        lambda pods: None, CLUSTERWIDE))
    assert claimed["metadata"]["namespace"] == POOL_NS
    pods = api.list_objects("Pod", POOL_NS)
    # the claim's deadline leaves room for both phases
    assert all(p["spec"]["activeDeadlineSeconds"] >= 60 + 30 + 5 for p in pods)
    return spec, pods


def _agent_ended(api: MemoryApi, name: str, code: int, writer_exit: int | None = None) -> None:
    writer = {"terminated": {"exitCode": writer_exit}} if writer_exit is not None else {"running": {}}
    set_status(api, name, {"phase": "Running", "startTime": "2026-12-03T00:00:00Z", "containerStatuses": [
        {"name": "agent", "started": False, "state": {"terminated": {"exitCode": code, "message": ""}}},
        {"name": "verifier", "started": True, "state": {"running": {}}},
        {"name": "verifier-files", "started": writer_exit is None, "state": writer}]})


WRITER_WAITS = {"name": "verifier-files", "started": True, "state": {"running": {}}}


def _keyed(data: bytes) -> bool:
    """A whole delivery: its first line the length and key, its last the sentinel set to that key."""
    first, _, rest = data.partition(b"\n")
    length, _, key = first.partition(b" ")
    return int(length) == len(rest) and rest.endswith(b"\n%s=%s\n" % (pool_delivery.SENTINEL.encode(), key))


def _round(api: MemoryApi, d: episode_delivery.EpisodeDelivery) -> None:
    run(delivery_round(api, d, 1))


def test_the_agent_then_the_verifier_are_handed_their_phases_once_each(api):
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    handed: list[tuple[str | None, bytes]] = []
    api.set_attach(POOL_NS, name, lambda container, stdin: handed.append((container, stdin)))
    d = delivery(api, spec, [], [])
    _round(api, d)
    assert [e[2] for e in api.attaches] == [naming.AGENT_CONTAINER]
    agent_script = handed[0][1].decode()
    assert "ROLLOUTBATCH_TIMEOUT=60" in agent_script and "verify.py" not in agent_script   # nothing of the verifier
    assert handed[0][0] == naming.AGENT_CONTAINER
    _round(api, d)                    # the agent still runs: nothing more
    assert len(api.attaches) == 1
    _agent_ended(api, name, 0)
    _round(api, d)
    _round(api, d)                    # handed once
    # the files first, to the writer that alone can write them; then the verifier its phase
    assert [e[2] for e in api.attaches] == [naming.AGENT_CONTAINER, naming.VERIFIER_FILES_CONTAINER,
                                            naming.VERIFIER_CONTAINER]
    files_script, verifier_script = handed[1][1].decode(), handed[2][1].decode()
    assert (handed[1][0], handed[2][0]) == (naming.VERIFIER_FILES_CONTAINER, naming.VERIFIER_CONTAINER)
    assert "/verifier/verify.py" in files_script and _keyed(files_script.encode())
    assert f"{naming.VERIFIER_FILES_CLAIM_MOUNT_PATH}/{pool_delivery.WRITTEN}" in files_script
    assert "ROLLOUTBATCH_TIMEOUT=30" in verifier_script and "printf" not in verifier_script   # it writes nothing
    assert f"[ -e {naming.VERIFIER_FILES_CLAIM_MOUNT_PATH}/{pool_delivery.WRITTEN} ] || exit 1" in verifier_script
    assert " GRADE=1 " in verifier_script and _keyed(verifier_script.encode())
    annotations = api.get_object("Pod", name, POOL_NS)["metadata"]["annotations"]
    assert float(annotations[naming.ANNOTATION_DELIVERED_AT]) > 0
    assert float(annotations[naming.ANNOTATION_VERIFIER_DELIVERED_AT]) > 0


@pytest.mark.parametrize("agent_exit", [v.NOT_DELIVERED_EXIT, 120])
def test_a_verifier_whose_agent_did_not_end_well_is_told_to_grade_nothing(api, agent_exit):
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    d = delivery(api, spec, [], [])
    _agent_ended(api, name, agent_exit)
    _round(api, d)
    to_verifier = [e for e in api.attaches if e[2] == naming.VERIFIER_CONTAINER]
    assert len(to_verifier) == 1 and _keyed(to_verifier[0][3])
    assert to_verifier[0][3].split(b"\n")[1] == f"exit {v.NOT_DELIVERED_EXIT}".encode()
    # the files writer is handed nothing to write, only its end (the pod ends when all its containers do)
    (to_writer,) = [e for e in api.attaches if e[2] == naming.VERIFIER_FILES_CONTAINER]
    assert to_writer[3].split(b"\n")[1].startswith(pool_delivery.SENTINEL.encode())


def test_a_files_writer_that_ended_well_before_a_restart_is_not_handed_the_files_again(api):
    """An earlier operator handed the writer its files and died before the verifier's phase: the
    writer ended 0 (it said RECEIVED, then ended), so the verifier alone is handed its phase, whose
    script checks the writer's mark."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    _agent_ended(api, name, 0, writer_exit=0)
    _round(api, delivery(api, spec, [], []))
    assert [e[2] for e in api.attaches] == [naming.VERIFIER_CONTAINER]
    assert f"{naming.VERIFIER_FILES_CLAIM_MOUNT_PATH}/{pool_delivery.WRITTEN} ] || exit 1".encode() \
        in api.attaches[0][3]


def test_a_files_writer_that_failed_is_never_followed_by_the_verifier(api):
    """The writer ended otherwise (deleted, a delivery it refused): its files are not there, and
    the verifier is not handed a phase it could not grade; the pod is evicted (an infrastructure
    retry), as for any hand-over that failed."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    events: list = []
    _agent_ended(api, name, 0, writer_exit=v.NOT_DELIVERED_EXIT)
    _round(api, delivery(api, spec, events, []))
    assert not api.attaches
    assert "files writer ended with exit code" in events[0][2] and api.get_object("Pod", name, POOL_NS) is None


def test_a_verifier_phase_that_cannot_be_handed_over_evicts_the_pod(api):
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name,
                   lambda container, stdin: refuse("full") if container == naming.VERIFIER_CONTAINER else None)
    events: list = []
    d = delivery(api, spec, events, [])
    _agent_ended(api, name, 0)
    _round(api, d)
    assert [e[1] for e in events] == [v.EVENT_DELIVERY_FAILED] and "verifier phase" in events[0][2]
    assert api.get_object("Pod", name, POOL_NS) is None


def test_the_pool_refills_with_pods_that_have_both_containers(api):
    rec = filled(api, 1, verifier={"image": "grader:1"})
    assert pool_spec.parse_pool_spec(live(api)["spec"]).verifier is not None
    pod = api.list_objects("Pod", POOL_NS)[0]
    assert [c["name"] for c in pod["spec"]["containers"]] == [naming.AGENT_CONTAINER, naming.VERIFIER_CONTAINER,
                                                              naming.VERIFIER_FILES_CONTAINER]
    assert rec is not None


def test_a_phase_handed_over_too_late_for_its_time_evicts_the_pod(api):
    """Late (an operator restart, queued execs), a phase would be cut short by the pod's deadline
    and read as the episode's failure: the pod is evicted instead (an infrastructure retry)."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    # the pod's deadline leaves the verifier 10 s of its 30
    deadline = pods[0]["spec"]["activeDeadlineSeconds"]
    start = time.time() - deadline + 10
    set_status(api, name, {"phase": "Running", "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
                           "containerStatuses": [
                               {"name": "agent", "started": False, "state": {"terminated": {"exitCode": 0}}},
                               {"name": "verifier", "started": True, "state": {"running": {}}}, WRITER_WAITS]})
    events: list = []
    d = delivery(api, spec, events, [])
    _round(api, d)
    assert not api.attaches and [e[1] for e in events] == [v.EVENT_DELIVERY_FAILED]
    assert "too late" in events[0][2] and api.get_object("Pod", name, POOL_NS) is None


def test_a_verified_batch_never_claims_a_pod_made_before_its_pool_had_a_verifier(api):
    filled(api, 2)
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"verifier": {}}}, "edit")
    spec = batch_spec(episodes=2, parallelism=2, verifier=VERIFIER)
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None, lambda pods: None,
                              CLUSTERWIDE))
    claimed = [p for p in api.list_objects("Pod", POOL_NS) if p["metadata"]["labels"].get(naming.LABEL_BATCH_UID)]
    assert claimed == []      # both old pods wait for the pool's round to replace them; the batch runs cold


# -- what a re-roll would reward: evictions only for what the operator caused ----------------------
def _verifier_waits(api: MemoryApi, name: str, agent_seconds: float, left: float, delivered_ago: float,
                    agent_exit: int = 0) -> None:
    """The agent phase ran ``agent_seconds`` from its hand-over (``delivered_ago`` s ago) and ended;
    the pod's deadline is ``left`` s away; the verifier waits."""
    pod = api.get_object("Pod", name, POOL_NS)
    now = time.time()
    start = now - pod["spec"]["activeDeadlineSeconds"] + left
    delivered = now - delivered_ago

    def stamp(at: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
                    {"metadata": {"annotations": {naming.ANNOTATION_DELIVERED_AT: f"{delivered:.3f}"}}}, "test")
    set_status(api, name, {"phase": "Running", "startTime": stamp(start), "containerStatuses": [
        {"name": "agent", "started": False, "state": {"terminated": {
            "exitCode": agent_exit, "finishedAt": stamp(delivered + agent_seconds),
            "message": '{"event":"agent_exit","exit_code":0,"timed_out":true}'}}},
        {"name": "verifier", "started": True, "state": {"running": {}}}, WRITER_WAITS]})


@pytest.mark.parametrize("agent_seconds, delivered_ago, handed_over, agent_exit", [
    (100, 101, True, 0),     # it killed its watchdog and ran 40 s past its 60: the lateness is the agent's
    (60, 90, False, 0),      # within its time: the lateness was the operator's (queued hand-overs)
    # 6.5 s past its time: the API's rounded times cannot prove it, but its launcher said so (122)
    (66, 90, True, v.AGENT_OVERRAN_EXIT),
])
def test_a_late_verifier_hand_over_evicts_only_when_the_operator_made_it_late(api, agent_seconds, delivered_ago,
                                                                             handed_over, agent_exit):
    """The verifier's phase no longer fits before the pod's deadline. When the agent made it late,
    an eviction would re-roll its attempt: the phase is handed over instead (what the deadline
    cuts short is the agent's failure). When the operator did, the pod is evicted, an
    infrastructure retry, as before."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    _verifier_waits(api, name, agent_seconds=agent_seconds, left=10, delivered_ago=delivered_ago, agent_exit=agent_exit)
    events: list = []
    _round(api, delivery(api, spec, events, []))
    if handed_over:
        assert [e[2] for e in api.attaches] == [naming.VERIFIER_FILES_CONTAINER, naming.VERIFIER_CONTAINER] \
            and events == []
        assert api.get_object("Pod", name, POOL_NS) is not None
    else:
        assert not api.attaches and "too late" in events[0][2] and api.get_object("Pod", name, POOL_NS) is None


def test_a_failed_hand_over_of_a_pod_an_earlier_operator_may_have_served_is_left_to_its_deadline(api):
    """Claimed before this operator's delivery began: an earlier one may have handed it its phase
    and died before annotating it, and a repeat the agent made fail (it controls its claim
    directory) must not re-roll the attempt. The pod is not evicted; its deadline ends it."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: refuse("closed"))
    events: list = []
    d = delivery(api, spec, events, [], since=None)   # made now: after the claim
    _round(api, d)
    assert [e[2] for e in api.attaches] == [naming.AGENT_CONTAINER]
    assert [e[1] for e in events] == [v.EVENT_DELIVERY_FAILED] and "runs to its deadline" in events[0][2]
    assert api.get_object("Pod", name, POOL_NS) is not None
    _round(api, d)
    assert len(api.attaches) == 1   # not tried again


def test_the_time_left_is_checked_once_the_exec_has_its_slot(api):
    """Queued behind other deliveries, an episode would be handed less than its time: the check
    is made when its exec may start, not when it was queued."""
    import asyncio
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    need = pools.episode_seconds(spec.episode_timeout_seconds, spec.verifier.timeout_seconds)
    pod = api.get_object("Pod", name, POOL_NS)
    start = time.time() - pod["spec"]["activeDeadlineSeconds"] + need + 1.5   # fits now, not in 2 s
    set_status(api, name, {"phase": "Running", "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
                           "containerStatuses": [{"name": "agent", "started": True, "state": {"running": {}}},
                                                 {"name": "verifier", "started": True, "state": {"running": {}}}, WRITER_WAITS]})
    events: list = []
    d = delivery(api, spec, events, [])

    async def queued() -> None:
        for _ in range(episode_delivery.MAX_DELIVERIES):
            await d._slots.acquire()
        from tests.unit.service.memory_pool import drain
        from rolloutbatch.core.tracker import BatchTracker
        from rolloutbatch.core.pod_reading import pod_facts
        tracker = BatchTracker(1, 0, pooled=True)
        tracker._live[pod["metadata"]["uid"]] = pod_facts(api.get_object("Pod", name, POOL_NS))
        d.round(tracker)
        await asyncio.sleep(2.5)
        for _ in range(episode_delivery.MAX_DELIVERIES):
            d._slots.release()
        await drain(d)
    run(queued())
    assert not api.attaches and "too late" in events[0][2] and api.get_object("Pod", name, POOL_NS) is None


def test_a_hand_over_that_sent_everything_and_heard_nothing_is_left_to_its_lowered_deadline(api):
    """Every byte went and the launcher's line never came back (an agent flooding its stdout can
    bury it): the pod may run its episode, so it is not evicted (a re-roll), and its deadline is
    lowered as if it had its episode when the bytes began to go (no more time than its own)."""
    spec, pods = _claimed(api)
    name = pods[0]["metadata"]["name"]
    claimed_deadline = api.get_object("Pod", name, POOL_NS)["spec"]["activeDeadlineSeconds"]

    def silent(container, stdin):
        raise Unconfirmed("the container did not confirm its input within 20s (all of it was sent)")
    api.set_attach(POOL_NS, name, silent)
    events: list = []
    _round(api, delivery(api, spec, events, []))
    live = api.get_object("Pod", name, POOL_NS)
    assert live is not None and [e[1] for e in events] == [v.EVENT_DELIVERY_FAILED], events
    assert "runs to its deadline" in events[0][2]
    assert live["spec"]["activeDeadlineSeconds"] < claimed_deadline
    assert naming.ANNOTATION_DELIVERED_AT not in live["metadata"]["annotations"]   # not proven delivered
