"""What users and tools read of a batch's status beyond its phase: rewards as they are (not
rounded as seconds are), and the bare verdict written when the API refuses the full status (no
episode left running in it, transition times kept where no condition flips)."""
from __future__ import annotations

import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.cadence import Cadence
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.stats import summarize
from rolloutbatch.core.status import build_status, final_phase
from rolloutbatch.service.status_writer import StatusWriter
from tests.unit.core.factories import result

REF = BatchRef("ns", "b", "0123456789abcdef", 1)
SPEC = parse_spec({"episodes": 2, "task": {"files": {"episode.py": "x"}}})


def status(phase="Running", summary=None, previous=None, now_iso="2024-01-01T00:00:01Z", **changes):
    kwargs = dict(ref=REF, spec=SPEC, phase=phase,
                  summary=summary or summarize([result(0)], episodes=2, origin=100.0),
                  running=1, ready=1, sandbox_namespace="rb-0123456789", job_name="rb-0123456789",
                  results_configmap="b-results", start_time="2024-01-01T00:00:00Z", completion_time=None,
                  job_complete_seconds=None, message="running", reason=None, previous=previous or {},
                  now_iso=now_iso)
    kwargs.update(changes)
    return build_status(**kwargs)


def test_status_rewards_are_the_summarys_not_rounded():
    """`rewardSum` is the results document's reward_sum: small rewards (log-probs, shaped rewards)
    read 0 when rounded to milliseconds as the durations are."""
    summary = summarize([result(0, reward=0.0004), result(1, reward=0.0004)], episodes=2, origin=100.0)
    s = status("Succeeded", summary=summary, message="2/2 episodes succeeded, reward sum 0.0008")
    assert summary.reward_sum == 0.0008
    assert s["rewardSum"] == summary.reward_sum, f"status.rewardSum {s['rewardSum']} vs reward_sum {summary.reward_sum}"
    assert s["rewardMean"] == summary.reward_mean, f"status.rewardMean {s['rewardMean']} vs {summary.reward_mean}"


def test_status_reward_sum_agrees_with_the_final_message():
    """The final message and the REWARD column say one sum."""
    summary = summarize([result(0, reward=0.0004)], episodes=1, origin=100.0)
    spec = parse_spec({"episodes": 1, "task": {"files": {"episode.py": "x"}}})
    phase, reason, message = final_phase(summary, spec, "b-results")
    s = status(phase, summary=summary, spec=spec, message=message, reason=reason)
    assert "reward sum 0.0004" in s["message"]
    assert s["rewardSum"] == 0.0004, f"message says {s['message']!r}, rewardSum is {s['rewardSum']}"


class _Storage:
    def __init__(self):
        self.patches: list[dict] = []

    async def patch_batch_status(self, namespace, name, patch):
        self.patches.append(patch)
        return {}


def _merge(target: dict, patch: dict) -> dict:
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _bare_after_running():
    running = status("Running", running=2, now_iso="2024-01-01T00:00:01Z")
    storage = _Storage()
    writer = StatusWriter(storage, REF, running, Cadence(0, 0, 1))
    asyncio.run(writer.write_bare_failure(v.STALL_SANDBOX_DELETED, "the Job was deleted", "2024-01-01T00:09:00Z"))
    (patch,) = storage.patches
    return running, _merge(running, patch)     # what the API server holds after the merge patch


def test_bare_stall_verdict_leaves_no_episode_running():
    """`runningEpisodes` is 0 in a finished batch's status (the RUNNING column): the bare verdict
    is a merge patch, and the last running count stayed for ever."""
    _, final = _bare_after_running()
    assert final["phase"] == v.FAILED
    assert final.get("runningEpisodes", 0) == 0, f"Failed batch still shows runningEpisodes={final['runningEpisodes']}"


def test_bare_stall_verdict_keeps_the_transition_time_of_conditions_that_did_not_flip():
    """lastTransitionTime changes only when a condition's status flips (README)."""
    running, final = _bare_after_running()
    before = {c["type"]: c for c in running["conditions"]}
    after = {c["type"]: c for c in final["conditions"]}
    assert before[v.CONDITION_READY]["status"] == after[v.CONDITION_READY]["status"] == v.CONDITION_FALSE
    assert after[v.CONDITION_READY]["lastTransitionTime"] == before[v.CONDITION_READY]["lastTransitionTime"]
