"""Judging one finished episode pod: which channel holds its events, then the verdict.

The termination message is read first (it is in the pod status already: no request); a
container's log only when the message lacks the events, and, best effort, for the last output
of a failure (docs/design.md §4, "Channels"). Log reads are bounded (``service.episode_logs``)
and share the operator-wide read slots. The verdict itself is pure (``core.verdict``).
"""

from __future__ import annotations

import asyncio
import dataclasses

from rolloutbatch.core import log_tails, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import cross_checked, parse_log, parse_termination_message, split_agent_record
from rolloutbatch.core.model import EpisodeResult, ParsedLog, PodFacts
from rolloutbatch.core.verdict import is_terminal, judge_episode
from rolloutbatch.core.verdict_verified import judge_verified
from rolloutbatch.faults import crash_point
from rolloutbatch.kube.errors import KubeError
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import episode_logs
from rolloutbatch.service.context import Context


PARSE_INLINE_BYTES = 64 * 1024   # a log this small is parsed on the loop (a thread hop costs more)


class EpisodeJudge:
    """Reads what a finished pod's containers reported and judges it (one per batch)."""

    def __init__(self, ctx: Context, storage: Storage) -> None:
        self.ctx, self.storage = ctx, storage

    async def read_log(self, facts: PodFacts, container: str) -> tuple[ParsedLog | None, str | None, str | None]:
        """(parsed, tail, error) of one container's log: one bounded read."""
        settings = self.ctx.settings
        async with self.ctx.read_slots:
            data, truncated, error = await episode_logs.read(self.storage, facts.namespace, facts.name,
                                                             settings.log_limit_bytes, self.ctx.metrics,
                                                             self.ctx.log_reader, container)
        tail = log_tails.tail_of(data, settings.log_tail_bytes)   # the row keeps its outcome's share
        if error:
            return None, tail, error
        # up to --log-limit-bytes of hostile text: parsed off the event loop when large
        shared = _shared(container)
        parsed = (await asyncio.to_thread(parse_log, data, truncated=truncated, shared=shared)
                  if len(data) > PARSE_INLINE_BYTES else parse_log(data, truncated=truncated, shared=shared))
        # The kubelet removes a deleted pod's containers and their logs: a read then comes back
        # empty, or as the kubelet's own error line after a 200 it had already sent ("unable to
        # retrieve container logs for ..."). Neither says what the episode printed (an evicted
        # episode that logged ready was judged NoReadyEvent): a log that could not be read. (A
        # verifier prints no ready event: only its empty log is taken so.)
        unread = not data if container == naming.VERIFIER_CONTAINER else not parsed.ready
        if unread and (facts.deleting or await self._deleted_since(facts)):
            return None, tail, v.LOG_POD_GONE
        return parsed, tail, error

    async def _deleted_since(self, facts: PodFacts) -> bool:
        """The pod is gone or being deleted now, though the snapshot judged did not say so (an
        eviction deletes the pod as it ends, and its deletion can come after the snapshot). Asked
        only of a log without a ready event, so only such an episode costs one GET more."""
        try:
            live = await self.storage.get("Pod", facts.name, facts.namespace)
        except KubeError:
            return False   # not known: judged as the snapshot says
        meta = (live or {}).get("metadata") or {}
        return live is None or meta.get("uid") != facts.uid or bool(meta.get("deletionTimestamp"))

    async def channel(self, facts: PodFacts, container: str, message: str | None, whole_bytes: int | None = None
                      ) -> tuple[ParsedLog | None, str | None, str | None, str]:
        """The events of one container: its termination message when that holds them (no log
        read), else its log (the fallback). (parsed, tail, error, channel)."""
        parsed = parse_termination_message(message, whole_bytes=whole_bytes, shared=_shared(container))
        if parsed is not None:
            return parsed, None, None, v.CHANNEL_TERMINATION_MESSAGE
        return (*await self.read_log(facts, container), v.CHANNEL_LOG)

    async def judge(self, facts: PodFacts, *, verified: bool, batch_deadline_at: float | None,
                    now: float, evicted: bool = False, episode_timeout: int | None = None) -> EpisodeResult:
        """The verdict of one finished pod (``spec.verifier``: ``verified``; ``evicted``: see
        core.queueing.cut_off_by_eviction; ``episode_timeout``: a pool's pod's time from its
        hand-over, checked against the API's times: core.verdict.agent_overran)."""
        common = dict(batch_deadline_at=batch_deadline_at, now=now, evicted=evicted, episode_timeout=episode_timeout)
        if verified:
            return await self._verified(facts, common)
        parsed, tail, log_error, channel = await self.channel(facts, naming.CONTAINER_NAME, facts.termination_message)
        crash_point("track:log-read")
        result = judge_episode(facts, parsed, log_error=log_error, log_tail=tail, channel=channel, **common)
        if result.outcome == v.OUTCOME_FAILED and tail is None and channel == v.CHANNEL_TERMINATION_MESSAGE:
            # judged without a log read; a failure still keeps its last output (best effort). A
            # success does not: that read is the request the termination message saves.
            _, tail, _ = await self.read_log(facts, naming.CONTAINER_NAME)
            result = dataclasses.replace(result, log_tail=log_tails.kept(tail, result.outcome))
        return result

    async def _verified(self, facts: PodFacts, common: dict) -> EpisodeResult:
        """spec.verifier: the agent's events (ready) and the verifier's (reward), each from its
        container's termination message when it holds them, else from that container's log."""
        agent = facts.agent
        own, record = split_agent_record(agent.message if agent else None)
        whole = len((agent.message or "").encode()) if agent else None
        agent_log = agent_tail = agent_error = agent_channel = None
        if agent is not None and agent.state == "terminated":
            agent_log, agent_tail, agent_error, agent_channel = await self.channel(
                facts, naming.AGENT_CONTAINER, own, whole)
            if agent_tail is None and (record is None or record["exit_code"] != 0 or record["timed_out"]):
                # a crashed or stopped agent keeps its last output on the row
                _, agent_tail, _ = await self.read_log(facts, naming.AGENT_CONTAINER)
        verifier_log = verifier_tail = verifier_error = verifier_channel = None
        if is_terminal(facts) and facts.exit_code is not None:
            verifier_log, verifier_tail, verifier_error, verifier_channel = await self.channel(
                facts, naming.VERIFIER_CONTAINER, facts.termination_message)
            if verifier_channel == v.CHANNEL_TERMINATION_MESSAGE and verifier_log is not None:
                # the message file is writable by the agent's code the verifier runs: its stdout
                # is read too, and a reward there that the message's disagrees with makes two.
                # Unread, it proves nothing: the episode is judged as one whose log was not read.
                stdout, verifier_tail, verifier_error = await self.read_log(facts, naming.VERIFIER_CONTAINER)
                verifier_log = cross_checked(verifier_log, stdout)
        crash_point("track:log-read")
        result = judge_verified(facts, agent_log, verifier_log, agent_error=agent_error, verifier_error=verifier_error,
                                agent_channel=agent_channel, verifier_channel=verifier_channel,
                                agent_tail=agent_tail, verifier_tail=verifier_tail, **common)
        if result.reason == v.EP_VERIFIER_FAILED and result.log_tail is None and facts.exit_code is not None:
            _, tail, _ = await self.read_log(facts, naming.VERIFIER_CONTAINER)
            result = dataclasses.replace(result, log_tail=log_tails.kept(tail, result.outcome))
        return result


def _shared(container: str) -> bool:
    """The container's output is a shared channel (core.events.parse_log): the verifier's, which
    the agent's code it runs writes into too."""
    return container == naming.VERIFIER_CONTAINER
