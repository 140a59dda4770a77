"""The verdict of a pod with spec.verifier: the agent's ``ready`` event, the verifier's ``reward``.

A Job's pod runs the agent in an init container and the verifier after it; a pool's pod keeps both
containers waiting and hands each its phase (core.pool_delivery). Either way the agent is the
adversary: it controls everything the verifier imports of its work, while the verifier's author is
trusted. The order of reasons is :func:`judge_verified`'s docstring; the pod-level reasons and the
final check of the two events together are core.verdict's :func:`~core.verdict.judge_episode`,
so a verified episode is judged by the one verdict path.

Pure, total: any facts and any logs give a result, never an exception.
"""

from __future__ import annotations

import dataclasses

from rolloutbatch.core import log_tails
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import split_agent_record
from rolloutbatch.core.launchers import VERIFIER_SLACK_SECONDS
from rolloutbatch.core.model import MAX_ABS_REWARD, AgentFacts, EpisodeResult, ParsedLog, PodFacts, usable_reward
from rolloutbatch.core.outcomes import outcome_of
from rolloutbatch.core.pod_reading import POD_SUCCEEDED
from rolloutbatch.core.strictjson import finite
from rolloutbatch.core.verdict import (CLOCK_SKEW_TOLERANCE_SECONDS, POD_DEADLINE_REASON, agent_overran, count_of,
                                       judge_episode, over_own_limits, shown)
from rolloutbatch.core.vocabulary import AGENT_OVERRAN_EXIT, NOT_DELIVERED_EXIT


def agent_record(facts: PodFacts) -> dict | None:
    """The agent launcher's record (exit_code, timed_out) from the agent's termination message."""
    agent = facts.agent
    if agent is None or agent.state != "terminated":
        return None
    return split_agent_record(agent.message)[1]


def verifier_started(facts: PodFacts) -> bool:
    """The judged container (the verifier) was started by the node: it has a start time (a
    runtime's start error reports the epoch, a container never created none)."""
    return bool(finite(facts.started_at)) and facts.terminated_reason not in v.START_ERROR_REASONS


def judge_verified(facts: PodFacts, agent_log: ParsedLog | None, verifier_log: ParsedLog | None, *,
                   agent_error: str | None = None, verifier_error: str | None = None,
                   agent_channel: str | None = None, verifier_channel: str | None = None,
                   agent_tail: str | None = None, verifier_tail: str | None = None,
                   skew_tolerance: float = CLOCK_SKEW_TOLERANCE_SECONDS, attempts: int = 1,
                   batch_deadline_at: float | None = None, now: float | None = None,
                   evicted: bool = False, episode_timeout: int | None = None) -> EpisodeResult:
    """The verdict of a pod with spec.verifier: the agent's ``ready``, the verifier's ``reward``.

    The rule (adversary: the agent, which controls everything the verifier imports of its work;
    the verifier's author is trusted): once the agent phase ended and the verifier started, any
    failure of the verifier (exit code, killed, restarts, its deadline, no or an unusable reward,
    output past the limit, a line holding an event behind other bytes) is ``VerifierFailed``, the
    agent's failure; a verifier the node never
    started (``ImagePullFailed``, ``VerifierNotStarted``) loses the episode.
    In order: a pool's agent that ran past its time by the API's times (``Timeout``, whatever its
    launcher recorded: core.verdict.agent_overran); the verifier never started (the agent's
    ``Timeout`` when its launcher recorded it
    ran past its time and the pod's deadline came first); the agent outlived its watchdog past the slack (its
    launcher's AGENT_OVERRAN_EXIT: ``Timeout``, not graded); its pod's deadline while it ran
    (``VerifierFailed``);
    the pod-level reasons of :func:`judge_episode` (``Timeout`` while the agent ran, the batch's
    deadline, storage limits, unpullable images); the agent phase ended abnormally (its launcher
    was killed or could not record the agent's exit: ``NonZeroExit``); the verifier's own
    failures (``VerifierFailed``); a log that could not be read (``LogUnavailable``); the agent's
    events (``LogLimitExceeded``, ``NoReadyEvent``, ``DuplicateReady``, ``IdentityMismatch``,
    ``MissingTimestamp``); last the two together by :func:`judge_episode` (clock skew, reward
    before ready). The agent's own exit code does not matter: a crashed agent is a graded
    attempt. Its reward-shaped events are ignored (flag ``AgentRewardIgnored``). Total, like
    :func:`judge_episode`.
    """
    record = agent_record(facts)
    info: dict = {"exit_code": record["exit_code"] if record else None,
                  "timed_out": bool(record and record["timed_out"])}
    if agent_tail is not None:
        info["output_tail"] = agent_tail
    if agent_channel is not None:
        info["channel"] = agent_channel
    flags: list[str] = []
    if agent_log is not None and agent_log.reward:
        flags.append(v.FLAG_AGENT_REWARD_IGNORED)
    if info["timed_out"]:
        flags.append(v.FLAG_AGENT_TIMED_OUT)
    common = dict(skew_tolerance=skew_tolerance, attempts=attempts, batch_deadline_at=batch_deadline_at, now=now,
                  evicted=evicted)

    def done(result: EpisodeResult, tail: str | None = None) -> EpisodeResult:
        # The agent's tail is the row's too: its outcome's budget, as the verifier's log tail
        # (a success's agent output, kept on stdout agents' rows, is no longer 4 KiB of each).
        agent = {k: val for k, val in info.items() if k != "output_tail"}
        agent_kept = log_tails.kept(info.get("output_tail"), result.outcome)
        if agent_kept is not None:
            agent["output_tail"] = agent_kept
        return result.replace(agent=agent, flags=tuple(dict.fromkeys((*result.flags, *flags))),
                              log_tail=log_tails.kept(tail, result.outcome))

    def pod_result(reason: str, message: str, tail: str | None, channel: str | None = None) -> EpisodeResult:
        base = judge_episode(facts, None, log_error="-", **common)    # identity and times of the pod
        return done(base.replace(outcome=outcome_of(reason), reason=reason, message=message, channel=channel), tail)

    def verifier_failed(message: str) -> EpisodeResult:
        return pod_result(v.EP_VERIFIER_FAILED, message, verifier_tail, verifier_channel)

    agent = facts.agent or AgentFacts(state="waiting")
    agent_done = agent.state == "terminated" and agent.exit_code == 0
    if evicted and not (facts.phase == POD_SUCCEEDED and facts.exit_code == 0):
        return done(judge_episode(facts, None, **common), agent_tail)    # EvictedByQueue, whichever phase ran
    if facts.inputs_error is not None:
        return done(judge_episode(facts, None, **common))   # lost: the agent never started
    if agent_done and agent_overran(facts, episode_timeout):
        # its launcher said it did not (a pool pod's launcher can be misled: agent_overran), but the
        # API's times do: not graded, whether its verifier ran or the pod's deadline came first (a
        # verifier not started would make its attempt lost, and retried)
        return pod_result(v.EP_TIMEOUT, f"the agent ran more than {VERIFIER_SLACK_SECONDS} s past "
                                        "episodeTimeoutSeconds from its hand-over (by the API's times, whatever "
                                        "its launcher recorded): not graded", agent_tail)
    if agent_done and not verifier_started(facts) and info["timed_out"] and facts.pod_reason == POD_DEADLINE_REASON:
        # The agent ran past its time (its launcher's record says so), inside the slack it has
        # before it is failed, and took the verifier's share of the pod's deadline: its own doing,
        # not a verifier the node could not start (that would make its bad attempt lost)
        return pod_result(v.EP_TIMEOUT, "the agent ran past episodeTimeoutSeconds and the pod's deadline came "
                                        "before its verifier started: not graded", agent_tail)
    if facts.agent_oom_killed and not verifier_started(facts):
        # A process of the agent passed the pod's memory limit; the kubelet fails a pod whose init
        # container the runtime reports OOMKilled, whatever its exit code (kuberuntime's
        # isInitContainerFailed), so its verifier never starts. The agent did it: its failure,
        # counted, never a verifier the node could not start (a re-roll of its bad attempt).
        return pod_result(v.EP_NON_ZERO_EXIT, "the agent phase's container was OOMKilled (a process of the agent used "
                                              "more memory than the pod's limit), so the kubelet failed the pod "
                                              "before its verifier: the agent's failure", agent_tail)
    if agent_done and not verifier_started(facts) and not over_own_limits(facts):
        reason = v.EP_IMAGE_PULL if facts.waiting_reason in v.IMAGE_WAITING_REASONS else v.EP_VERIFIER_NOT_STARTED
        why = f"{facts.waiting_reason or facts.terminated_reason or facts.phase}: {facts.waiting_message or ''}"
        return pod_result(reason, f"the verifier never started ({why.strip().rstrip(':')})"[:1000], verifier_tail)
    if agent_done and facts.pooled and facts.exit_code == NOT_DELIVERED_EXIT and facts.verifier_delivered_at is None:
        # A pool's verifier waits from the pod's start; its launcher exits so only while it waits
        # (a verifier's own exit of that code is reported as 1): it never graded anything. Not the
        # agent's failure. Told by the exit code, as the Job's podFailurePolicy tells it, unless
        # the operator has the launcher's word that the phase was handed over (never_delivered):
        # then what the verifier ran made it exit so, and the verifier failed.
        return pod_result(v.EP_INFRASTRUCTURE, "the verifier container ended before it was handed its phase",
                          verifier_tail)
    if agent.state == "terminated" and agent.exit_code == AGENT_OVERRAN_EXIT:
        # It outlived its watchdog, past the slack (core.launchers): not graded, whatever its
        # verifier did meanwhile (a Job's pod never starts it; a pool's kept it waiting, and the
        # pod's deadline may have ended it). Only the launcher exits so: the agent's own exit
        # code is in its record.
        return pod_result(v.EP_TIMEOUT, f"the agent ran more than {VERIFIER_SLACK_SECONDS} s past "
                                        "episodeTimeoutSeconds (it outlived its watchdog): not graded", agent_tail)
    if agent_done and facts.pod_reason == POD_DEADLINE_REASON:
        return verifier_failed("the verifier ran past the pod's deadline (episodeTimeoutSeconds + "
                               "verifier.timeoutSeconds)")
    pod_level = judge_episode(facts, None, **common)
    if pod_level.reason in (v.EP_TIMEOUT, v.EP_BATCH_TIMEOUT, v.EP_STORAGE_LIMIT, v.EP_IMAGE_PULL):
        return done(pod_level, agent_tail)
    if not agent_done:
        return pod_result(v.EP_NON_ZERO_EXIT, f"the agent phase ended abnormally ({agent.state}, exit code "
                                              f"{agent.exit_code}): its launcher was stopped or could not record "
                                              "the agent's exit", agent_tail)
    if record is None:
        return pod_result(v.EP_NON_ZERO_EXIT, "the agent's launcher left no exit record in its termination message",
                          agent_tail)
    # Decided from the pod alone, before any log: an exit or a restart needs no output.
    if not (facts.phase == POD_SUCCEEDED and facts.exit_code == 0):
        if facts.exit_code == v.VERIFIER_TIMEOUT_EXIT:
            return verifier_failed(f"the verifier ran past verifier.timeoutSeconds and was stopped (exit code "
                                   f"{facts.exit_code})")
        return verifier_failed(f"the verifier exited with code {facts.exit_code} "
                               f"({facts.terminated_reason or facts.phase})")
    if facts.restart_count:
        return verifier_failed(f"the verifier restarted {facts.restart_count} times")
    if verifier_error is not None:
        return done(judge_episode(facts, None, log_error=verifier_error, **common), verifier_tail)
    if verifier_log is None:
        return done(judge_episode(facts, None, **common), verifier_tail)
    rewards = verifier_log.reward
    if verifier_log.truncated:
        return verifier_failed("the verifier's output passed the read limit: its reward cannot be proven")
    if verifier_log.garbled:
        # what the verifier ran can write the container's stdout (/proc/1/fd/1): bytes put just
        # before the verifier's own reward line hide it, and a forged one would stand alone
        return verifier_failed("a line of the verifier's output holds an event behind other bytes (written into "
                               "by what it ran): its reward cannot be proven")
    if len(rewards) != 1:
        return verifier_failed(f"the verifier reported {count_of(rewards)} reward events, not 1")
    reward = rewards[0]
    if reward.episode_id != facts.name:
        return verifier_failed(f"the verifier's reward names episode {shown(reward.episode_id)}, "
                               f"not {shown(facts.name)}")
    if usable_reward(reward.reward) is None:
        return verifier_failed(f"the verifier's reward is not a finite number within +-{MAX_ABS_REWARD:g}: "
                               f"{shown(reward.reward)}")
    if finite(reward.at) is None:
        return verifier_failed("the verifier's reward has no numeric `at`")
    if agent_error is not None:
        return done(judge_episode(facts, None, log_error=agent_error, **common), agent_tail)
    if agent_log is None:
        return done(judge_episode(facts, None, **common), agent_tail)
    if agent_log.truncated:
        return done(judge_episode(facts, agent_log, channel=agent_channel, **common), agent_tail)
    # The verifier runs after the agent: its lines come after the agent's in one order.
    offset = max((e.line for e in agent_log.ready + agent_log.reward), default=0)
    combined = ParsedLog(ready=agent_log.ready, reward=tuple(dataclasses.replace(e, line=e.line + offset)
                                                             for e in rewards),
                         problems=agent_log.problems + verifier_log.problems,
                         bytes_read=agent_log.bytes_read + verifier_log.bytes_read, truncated=agent_log.truncated)
    result = judge_episode(facts, combined, channel=verifier_channel, **common)
    # a success keeps the end of the verifier's output (the grading); a failure here is about the
    # agent's events, so the agent's
    return done(result, verifier_tail if result.outcome == v.OUTCOME_SUCCEEDED else agent_tail)
