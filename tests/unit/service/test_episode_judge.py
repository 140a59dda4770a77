"""service.episode_judge: what a judged pod's row keeps of its log, and what that costs in reads."""
from __future__ import annotations

import asyncio
import json

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.service.context import Context, Settings
from rolloutbatch.service.episode_judge import EpisodeJudge
from tests.support.memory_api import MemoryApi
from tests.unit.core.test_verifier_core import T0, agent, ev, facts


class Metrics:
    def log_read(self, seconds, nbytes):
        pass


def cluster(log: bytes | None, **meta) -> MemoryApi:
    """The pod of ``facts()`` (ns/pod-0), its episode container having written ``log``; no pod
    when ``log`` is None. ``meta``: more of the live pod's metadata."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    if log is not None:
        api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-0", "namespace": "ns", "uid": "u", **meta}})
        api.set_log("ns", "pod-0", naming.CONTAINER_NAME, log)
    return api


def log_reads(api: MemoryApi) -> int:
    return sum(1 for method, path in api.calls if method == "GET" and path.endswith("/log"))


def judge(pod, api: MemoryApi, verified: bool = False, settings: Settings | None = None):
    async def go():
        ctx = Context(api=api, metrics=Metrics(), settings=settings or Settings(), read_slots=asyncio.Semaphore(1))
        return await EpisodeJudge(ctx, ctx.storage).judge(pod, verified=verified, batch_deadline_at=None, now=T0 + 20)
    api.calls.clear()
    return asyncio.run(go())


EVENTS = ev("ready", T0 + 1) + "\n" + ev("reward", T0 + 2, reward=1) + "\n"


def test_a_succeeded_episode_keeps_the_end_of_its_log():
    output = ("collected 12 items\n" * 200 + EVENTS).encode()
    api = cluster(output)
    result = judge(facts(), api)
    assert result.outcome == v.OUTCOME_SUCCEEDED and log_reads(api) == 1
    assert output.endswith(result.log_tail.encode())
    assert v.SUCCESS_LOG_TAIL_BYTES - 12 <= len(json.dumps(result.log_tail)) - 2 <= v.SUCCESS_LOG_TAIL_BYTES


def test_a_failed_episode_keeps_more():
    output = ("Traceback line\n" * 600).encode()
    result = judge(facts(phase="Failed", exit_code=1), cluster(output))
    assert result.outcome == v.OUTCOME_FAILED and output.endswith(result.log_tail.encode())
    # counted as written: each newline is two bytes in the results document
    assert v.LOG_TAIL_BYTES - 12 <= len(json.dumps(result.log_tail)) - 2 <= v.LOG_TAIL_BYTES


def test_a_termination_message_success_costs_no_log_read():
    api = cluster(b"never read")
    result = judge(facts(termination_message=EVENTS), api)
    assert result.outcome == v.OUTCOME_SUCCEEDED and result.channel == v.CHANNEL_TERMINATION_MESSAGE
    assert log_reads(api) == 0 and result.log_tail is None


def test_a_pod_gone_before_its_log_is_read_is_judged_without_it_in_one_read():
    api = cluster(None)
    result = judge(facts(), api)
    assert result.outcome != v.OUTCOME_SUCCEEDED and log_reads(api) == 1   # a 404 is not retried
    assert v.LOG_POD_GONE in (result.message or "") + (result.reason or "")


def test_an_empty_log_of_a_pod_being_deleted_is_a_log_gone_not_an_episode_that_said_nothing():
    """An eviction deletes the pod as it ends; the kubelet removes its containers and their logs,
    and a read then can come back empty. That says nothing of what the episode printed (it had
    logged ready): lost, not the agent's NoReadyEvent."""
    result = judge(facts(deleting=True, disrupted=True), cluster(b""))
    assert (result.outcome, result.reason) == (v.OUTCOME_LOST, v.EP_LOG_UNAVAILABLE)
    assert v.LOG_POD_GONE in result.message
    # a pod not being deleted that printed nothing did say nothing
    assert judge(facts(), cluster(b"")).reason == v.EP_NO_READY


def test_the_kubelets_error_line_for_a_removed_container_is_a_log_gone_not_the_episodes():
    """The kubelet answers a log read of a container it removed with 200 and its own error line
    (it wrote the status before it found the container gone): an evicted episode that had logged
    ready was judged NoReadyEvent from that line (a clean-clone pre-check caught it)."""
    line = b"unable to retrieve container logs for containerd://0123abcd"
    api = cluster(line)
    api.objects[("pods", "ns", "pod-0")]["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    result = judge(facts(disrupted=True), api)
    assert (result.outcome, result.reason) == (v.OUTCOME_LOST, v.EP_LOG_UNAVAILABLE), result
    # the same words printed by a pod that is not being deleted are the agent's own
    assert judge(facts(), cluster(line)).reason == v.EP_NO_READY


def test_an_empty_log_of_a_pod_whose_deletion_came_after_the_snapshot_is_a_log_gone():
    """The snapshot judged shows no deletion yet (an eviction deletes the pod as it ends, and its
    deletion event can come later): the pod is asked again before an empty log is the agent's."""
    api = cluster(b"")
    api.objects[("pods", "ns", "pod-0")]["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"   # as being deleted
    deleting = judge(facts(disrupted=True), api)
    assert (deleting.outcome, deleting.reason) == (v.OUTCOME_LOST, v.EP_LOG_UNAVAILABLE), deleting
    assert v.LOG_POD_GONE in deleting.message
    replaced = judge(facts(disrupted=True), cluster(b"", uid="another"))   # ours went, a namesake came
    assert (replaced.outcome, replaced.reason) == (v.OUTCOME_LOST, v.EP_LOG_UNAVAILABLE), replaced


def test_a_log_read_failing_once_is_read_again():
    api = cluster(EVENTS.encode())
    api.fail("GET", "Pod", Unavailable("apiserver restarting", status=503), when=lambda path: path.endswith("/log"))
    result = judge(facts(), api)
    assert result.outcome == v.OUTCOME_SUCCEEDED and log_reads(api) == 2


def test_a_reward_the_agents_code_wrote_to_the_verifiers_message_does_not_silence_the_verifier():
    """The verifier's termination message is writable by all it runs, the agent's code included:
    a reward written there is cross-checked with the verifier's stdout, and one that disagrees
    with the verifier's own makes two rewards (VerifierFailed), not the episode's reward. A verifier that writes
    the same reward to both channels is judged once."""
    agent_ready = ev("ready", T0 + 1) + "\n"
    for stdout, outcome in ((ev("reward", T0 + 6, reward=0), (v.OUTCOME_FAILED, v.EP_VERIFIER_FAILED)),
                            (ev("reward", T0 + 7, reward=1.0), (v.OUTCOME_SUCCEEDED, None)),
                            ("grading done", (v.OUTCOME_SUCCEEDED, None))):
        api = cluster(b"")
        api.set_log("ns", "pod-0", naming.VERIFIER_CONTAINER, (stdout + "\n").encode())
        pod = facts(agent=agent(own=agent_ready), termination_message=ev("reward", T0 + 6, reward=1))
        result = judge(pod, api, verified=True)
        assert (result.outcome, result.reason) == outcome, (stdout, result.outcome, result.reason)


def test_a_verifiers_message_reward_stands_only_on_a_stdout_read_whole():
    """The agent's code the verifier runs can write a reward into the message and flood stdout
    past the read limit, so the verifier's own reward there is never read: the message's cannot
    be proven then (VerifierFailed, as a verifier past the limit on stdout alone is). A stdout
    that could not be read at all proves nothing either: not a success."""
    agent_ready = ev("ready", T0 + 1) + "\n"
    forged = facts(agent=agent(own=agent_ready), termination_message=ev("reward", T0 + 6, reward=1))
    api = cluster(b"")
    flood = b"x" * 200 + b"\n"
    api.set_log("ns", "pod-0", naming.VERIFIER_CONTAINER, flood * 20 + (ev("reward", T0 + 6, reward=0) + "\n").encode())
    result = judge(forged, api, verified=True, settings=Settings(log_limit_bytes=len(flood) * 10))
    assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_VERIFIER_FAILED), result
    assert "read limit" in result.message
    # the same stdout read whole: the disagreeing rewards fail it too; a quiet one within the limit passes
    quiet = cluster(b"")
    quiet.set_log("ns", "pod-0", naming.VERIFIER_CONTAINER, flood * 5)
    assert judge(forged, quiet, verified=True, settings=Settings(log_limit_bytes=len(flood) * 10)).outcome \
        == v.OUTCOME_SUCCEEDED
    unread = cluster(b"")
    unread.set_log("ns", "pod-0", naming.VERIFIER_CONTAINER, b"grading done\n")
    unread.fail("GET", "Pod", Unavailable("apiserver restarting", status=503), times=10,
                when=lambda path: path.endswith("/log"))
    result = judge(forged, unread, verified=True)
    assert result.outcome != v.OUTCOME_SUCCEEDED and result.reason == v.EP_LOG_UNAVAILABLE, result


def test_a_written_into_verifier_message_does_not_hand_the_verdict_to_a_forged_stdout_reward():
    """The agent's code the verifier runs writes one byte into the (world-writable) message file
    and a forged reward line to the verifier's stdout (/proc/1/fd/1); the verifier then appends
    its own reward (0) to its message, whose line now holds an event behind other bytes. The
    message was taken as holding no event: stdout became the only channel, and the forged reward 1
    succeeded. The message stays the channel, and its line written into fails the verifier."""
    api = cluster(b"")
    api.set_log("ns", "pod-0", naming.VERIFIER_CONTAINER, (ev("reward", T0 + 7, reward=1) + "\n").encode())
    pod = facts(agent=agent(own=ev("ready", T0 + 1) + "\n"), termination_message="x" + ev("reward", T0 + 8, reward=0) + "\n")
    result = judge(pod, api, verified=True)
    assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_VERIFIER_FAILED), (result.outcome, result.reward)



@pytest.mark.parametrize("flood_ready", [0, 101], ids=["rewards-only", "ready-and-rewards"])
def test_a_flood_of_forged_rewards_on_stdout_cannot_hide_the_verifiers_own(flood_ready):
    """A verifier that follows the README (kills what the agent's code left, then prints its one
    reward on stdout). The agent's code, while the verifier ran it, wrote a forged reward (1) to
    the world-writable message file and printed 101 copies of it on /proc/1/fd/1: the message is
    the channel, cross-checked against stdout's rewards, but parse_log kept 101 of them (and stopped
    reading past 101 of each kind), so the verifier's own 0 after them was never compared and the
    forged 1 succeeded. A stdout whose events were not all kept is not read whole."""
    forged = ev("reward", T0 + 7, reward=1)
    stdout = "\n".join([ev("ready", T0 + 7)] * flood_ready + [forged] * 101 + [ev("reward", T0 + 8, reward=0)]) + "\n"
    api = cluster(b"")
    api.set_log("ns", "pod-0", naming.VERIFIER_CONTAINER, stdout.encode())
    pod = facts(agent=agent(own=ev("ready", T0 + 1) + "\n"), termination_message=forged + "\n")
    result = judge(pod, api, verified=True)
    assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_VERIFIER_FAILED), (result.outcome, result.reward)


# -- honest agents the verifier's wrap and written-into rules must not touch (a review's proofs) --


def test_plain_agent_message_without_events_still_falls_back_to_stdout():
    """No verifier: an honest agent prints its events on stdout and writes its final result,
    pretty-printed, to /dev/termination-log. That message holds no event line (README: 'stdout
    stays the fallback, read only when the message holds no event'). The verifier's written-into
    rule, applied to every container, counted a line like '  "event": "reward",' as garbled and
    kept the message the channel: NoReadyEvent."""
    api = cluster(EVENTS.encode())
    message = json.dumps({"event": "reward", "reward": 1}, indent=2) + "\n"
    result = judge(facts(termination_message=message), api)
    assert (result.outcome, result.channel) == (v.OUTCOME_SUCCEEDED, v.CHANNEL_LOG), (result.reason, result.message)


def test_verified_agent_message_without_a_ready_line_still_falls_back_to_stdout():
    """spec.verifier: the agent's own message part (before its launcher's record) holds no event,
    only a note quoting one; its ready is on stdout. Stdout was read, and is again."""
    api = cluster(b"")
    api.set_log("ns", "pod-0", naming.AGENT_CONTAINER, (ev("ready", T0 + 1) + "\n").encode())
    api.set_log("ns", "pod-0", naming.VERIFIER_CONTAINER, b"")
    pod = facts(agent=agent(own='printed {"event": "ready"} on stdout\n'),
                termination_message=ev("reward", T0 + 7, reward=1) + "\n")
    result = judge(pod, api, verified=True)
    assert result.outcome == v.OUTCOME_SUCCEEDED, (result.reason, result.message)


def test_plain_agent_reward_with_sub_reward_records_in_its_extras_is_read():
    """No verifier, so no one else writes the agent's stdout: a reward whose extras list its
    parts as reward records is read as any reward (the verifier's wrap rule, applied to every
    channel, dropped it as written into: NoRewardEvent)."""
    line = json.dumps({"event": "reward", "at": T0 + 2, "episode_id": "pod-0", "reward": 1,
                       "parts": [{"event": "reward", "name": "tests", "reward": 1}]})
    result = judge(facts(), cluster((ev("ready", T0 + 1) + "\n" + line + "\n").encode()))
    assert result.outcome == v.OUTCOME_SUCCEEDED, (result.reason, result.message)
