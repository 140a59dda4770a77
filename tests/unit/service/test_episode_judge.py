"""service.episode_judge: what a judged pod's row keeps of its log, and what that costs in reads."""
from __future__ import annotations

import asyncio
import json

from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube import resources
from rolloutbatch.service.context import Context, Settings
from rolloutbatch.service.episode_judge import EpisodeJudge
from tests.unit.core.test_verifier_core import T0, ev, facts


class Metrics:
    def log_read(self, seconds, nbytes):
        pass


def judge(pod, log: bytes):
    reads = []

    async def call(fn, *args):
        assert fn is resources.read_log
        reads.append(args)
        return log, False

    async def go():
        ctx = Context(api=None, metrics=Metrics(), settings=Settings(), read_slots=asyncio.Semaphore(1))
        return await EpisodeJudge(ctx, call).judge(pod, verified=False, batch_deadline_at=None, now=T0 + 20)
    return asyncio.run(go()), reads


EVENTS = ev("ready", T0 + 1) + "\n" + ev("reward", T0 + 2, reward=1) + "\n"


def test_a_succeeded_episode_keeps_the_end_of_its_log():
    output = ("collected 12 items\n" * 200 + EVENTS).encode()
    result, reads = judge(facts(), output)
    assert result.outcome == v.OUTCOME_SUCCEEDED and len(reads) == 1
    assert output.endswith(result.log_tail.encode())
    assert v.SUCCESS_LOG_TAIL_BYTES - 12 <= len(json.dumps(result.log_tail)) - 2 <= v.SUCCESS_LOG_TAIL_BYTES


def test_a_failed_episode_keeps_more():
    output = ("Traceback line\n" * 600).encode()
    result, _ = judge(facts(phase="Failed", exit_code=1), output)
    assert result.outcome == v.OUTCOME_FAILED and output.endswith(result.log_tail.encode())
    # counted as written: each newline is two bytes in the results document
    assert v.LOG_TAIL_BYTES - 12 <= len(json.dumps(result.log_tail)) - 2 <= v.LOG_TAIL_BYTES


def test_a_termination_message_success_costs_no_log_read():
    result, reads = judge(facts(termination_message=EVENTS), b"never read")
    assert result.outcome == v.OUTCOME_SUCCEEDED and result.channel == v.CHANNEL_TERMINATION_MESSAGE
    assert reads == [] and result.log_tail is None
