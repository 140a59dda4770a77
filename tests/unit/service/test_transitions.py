"""service.transitions: each final episode reaches the metrics; reward extras left out are counted
and said in one Warning Event per batch."""
from __future__ import annotations

from prometheus_client import CollectorRegistry

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import MAX_EXTRA_FIELD_BYTES
from rolloutbatch.core.tracker import Transition
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.metrics import Metrics
from rolloutbatch.service.transitions import TransitionReport
from tests.unit.core.factories import REF, result
from tests.unit.core.test_verifier_core import T0, ev, facts, log


def report(batch_label=False):
    registry, events = CollectorRegistry(), []
    reporter = TransitionReport(Metrics(registry, batch_label=batch_label), REF,
                                lambda *event: events.append(event))
    return reporter, registry, events


def oversized(index: int, name: str = "trace"):
    """An episode whose reward carries an extra (``name``) past its per-field budget, judged by the core."""
    huge = "x" * (MAX_EXTRA_FIELD_BYTES + 1)
    return judge_episode(facts(index=index, name=f"pod-{index}"),
                         log(ev("ready", T0 + 1, who=f"pod-{index}"),
                             ev("reward", T0 + 2, who=f"pod-{index}", reward=1, ok=1, **{name: huge})))


def test_extras_left_out_are_counted_and_said_once_per_batch():
    reporter, registry, events = report()
    dropped = [oversized(i) for i in range(3)]
    assert all(v.FLAG_EXTRAS_DROPPED in r.flags and r.outcome == v.OUTCOME_SUCCEEDED for r in dropped)
    for r in [*dropped, result(5)]:
        reporter(Transition("final", r.index, r))
    value = registry.get_sample_value("rolloutbatch_reward_extras_dropped_total", {"namespace": REF.namespace})
    assert value == 3
    assert registry.get_sample_value("rolloutbatch_episodes_total",
                                     {"namespace": REF.namespace, "result": "succeeded"}) == 4
    assert len(events) == 1
    kind, reason, message = events[0]
    assert (kind, reason) == ("Warning", "RewardExtrasDropped") and reason == v.EVENT_EXTRAS_DROPPED
    assert "episode 0 (pod pod-0)" in message and "trace" in message and "once per batch" in message
    assert "rolloutbatch_reward_extras_dropped_total" in message and len(message) <= 1000


def test_the_event_quotes_a_dropped_extras_name_escaped():
    """kubectl describe prints an Event's message raw: an extra named with a terminal's control
    sequence (clear the screen, set the window title) is said escaped."""
    reporter, _, events = report()
    reporter(Transition("final", 0, oversized(0, name="\x1b[2J\x1b]0;pwned\x07\x9b1A\u2028\u202e")))
    (_, _, message), = events
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\x9b1A\\u2028\\u202e" in message and message.isprintable(), message


def test_the_counter_starts_at_zero_and_follows_the_batch_label():
    reporter, registry, events = report(batch_label=True)
    reporter(Transition("final", 0, result(0)))
    labels = {"namespace": REF.namespace, "batch": REF.name}
    assert registry.get_sample_value("rolloutbatch_reward_extras_dropped_total", labels) == 0
    reporter(Transition("final", 1, oversized(1)))
    assert registry.get_sample_value("rolloutbatch_reward_extras_dropped_total", labels) == 1
    reporter.metrics.batch_deleted(REF.namespace, REF.name)
    assert registry.get_sample_value("rolloutbatch_reward_extras_dropped_total", labels) is None


def test_retries_are_counted():
    reporter, registry, events = report()
    reporter(Transition("retried", 4))
    assert registry.get_sample_value("rolloutbatch_episodes_retried_total", {"namespace": REF.namespace}) == 1
    assert events == []
