"""A pooled batch's claim figures (core.verdict, core.model, core.stats, core.status): each handed-over
episode's row says whether it ran on a claimed warm pod (a hit) or a cold one (a miss) and the
seconds from the claim (or the cold pod's creation) to its hand-over; the status and the results
document carry the hits, the misses and the hits' percentiles. A restart rebuilds them from the rows."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.model import BatchRef, EpisodeResult, pool_claim, valid_pool_claim
from rolloutbatch.core.pod_reading import parse_time, pod_facts
from rolloutbatch.core.results import results_document
from rolloutbatch.core.stats import summarize
from rolloutbatch.core.strictjson import finite
from rolloutbatch.core.status import build_status
from rolloutbatch.core.verdict import judge_episode
from tests.support import crd_schema

CREATED = "2026-12-07T09:00:00Z"
T0 = parse_time(CREATED)
STATUS_SCHEMA = crd_schema.openapi_schema()["properties"]["status"]


def pod(index: int, *, pooled: bool = True, claimed: float | None = None, delivered: float | None = None) -> dict:
    annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
    if pooled:
        annotations[naming.POOLED_ANNOTATION] = "true"
    if claimed is not None:
        annotations[naming.ANNOTATION_CLAIMED_AT] = repr(claimed)
    if delivered is not None:
        annotations[naming.ANNOTATION_DELIVERED_AT] = repr(delivered)
    state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": CREATED,
                            "finishedAt": "2026-12-07T09:05:00Z"}}
    return {"metadata": {"name": f"p-{index}", "namespace": "rp-x", "uid": f"u{index}", "creationTimestamp": CREATED,
                         "annotations": annotations},
            "spec": {"nodeName": "devnode-1"},
            "status": {"phase": "Succeeded", "containerStatuses": [
                {"name": naming.CONTAINER_NAME, "restartCount": 0, "imageID": "img", "state": state}]}}


def judged(body: dict, reward: float = 1.0) -> EpisodeResult:
    facts = pod_facts(body)
    at = (facts.delivered_at or facts.created) + 0.5
    events = [{"event": "ready", "at": at, "episode_id": facts.name},
              {"event": "reward", "at": at + 1, "episode_id": facts.name, "reward": reward}]
    return judge_episode(facts, parse_log(b"\n".join(json.dumps(e).encode() for e in events)))


def test_a_claimed_warm_pod_is_a_hit_timed_from_its_claim() -> None:
    row = judged(pod(0, claimed=T0 + 600, delivered=T0 + 600.2114)).to_row(T0)
    assert row["pool"] == {"hit": True, "claim_seconds": 0.211}


def test_a_cold_pod_of_the_pools_template_is_a_miss_timed_from_its_creation() -> None:
    assert judged(pod(1, delivered=T0 + 4.5)).to_row(T0)["pool"] == {"hit": False, "claim_seconds": 4.5}


@pytest.mark.parametrize("body", [pod(2, pooled=False, delivered=T0 + 1),      # a Job's pod, annotated by hand
                                  pod(3, claimed=T0 + 5)],                      # claimed, never handed over
                         ids=["not-a-pools-pod", "never-handed-over"])
def test_no_claim_figure_without_a_hand_over_of_a_pools_pod(body) -> None:
    assert "pool" not in judged(body).to_row(T0)


def test_a_hand_over_read_before_its_claim_counts_no_negative_seconds() -> None:
    assert judged(pod(4, claimed=T0 + 10, delivered=T0 + 9.9)).pool == {"hit": True, "claim_seconds": 0.0}


def status_of(summary) -> dict:
    return build_status(ref=BatchRef("rl", "b", "u"), spec=None, phase=v.RUNNING, summary=summary, running=1,
                        ready=1, sandbox_namespace=None, job_name=None, results_configmap="b-results",
                        start_time=CREATED, completion_time=None, job_complete_seconds=None, message="m",
                        reason=None, previous={}, now_iso=CREATED)


def results_of() -> list[EpisodeResult]:
    hits = [judged(pod(i, claimed=T0 + 100, delivered=T0 + 100 + s)) for i, s in enumerate((0.1, 0.2, 0.3, 0.4))]
    failed_hit = judged(pod(4, claimed=T0 + 100, delivered=T0 + 101.0), reward=float("nan"))   # a claim still
    misses = [judged(pod(5, delivered=T0 + 7)), judged(pod(6, delivered=T0 + 9))]
    return [*hits, failed_hit, *misses]


def test_the_summary_counts_hits_and_misses_and_the_hits_percentiles() -> None:
    results = results_of()
    assert results[4].outcome == v.OUTCOME_FAILED
    summary = summarize(results, episodes=7, origin=T0)
    assert (summary.pool_hits, summary.pool_misses) == (5, 2)
    assert summary.claim_p50 == pytest.approx(0.3) and summary.claim_p95 == pytest.approx(0.88)


def test_a_restart_rebuilds_the_same_figures_from_the_rows() -> None:
    results = results_of()
    rows = [json.loads(json.dumps(r.to_row(T0), allow_nan=False)) for r in results]
    again = summarize([EpisodeResult.from_row(row) for row in rows], episodes=7, origin=T0)
    assert again == summarize(results, episodes=7, origin=T0)


def test_the_status_and_the_results_carry_them_for_a_pooled_batch_only() -> None:
    summary = summarize(results_of(), episodes=7, origin=T0)
    status = status_of(summary)
    assert status["pool"] == {"hits": 5, "misses": 2, "claimSeconds": {"p50": 0.3, "p95": 0.88}}
    assert crd_schema.errors(status, STATUS_SCHEMA) == []
    document = results_document(ref=BatchRef("rl", "b", "u"), spec=None, summary=summary, results=results_of(),
                                origin=T0, extra={})
    assert (document["pool_hits"], document["pool_misses"], document["claim_p50_seconds"]) == (5, 2, 0.3)
    cold = summarize([judged(pod(0, pooled=False))], episodes=1, origin=T0)
    assert "pool" not in status_of(cold)
    assert "pool_hits" not in results_document(ref=BatchRef("rl", "b", "u"), spec=None, summary=cold, results=[],
                                               origin=T0, extra={})


@pytest.mark.parametrize("bad", [{"hit": 1, "claim_seconds": 0.2}, {"hit": True, "claim_seconds": -1},
                                 {"hit": True, "claim_seconds": "0.2"}, {"hit": True, "claim_seconds": True},
                                 {"hit": True}, {"hit": True, "claim_seconds": 0.2, "more": 1}, [True, 0.2],
                                 {"hit": True, "claim_seconds": 10 ** 400}])
def test_a_hand_edited_pool_field_is_refused_when_a_row_is_read_back(bad) -> None:
    row = judged(pod(0, claimed=T0 + 1, delivered=T0 + 2)).to_row(T0)
    with pytest.raises(ValueError, match="pool must be"):
        EpisodeResult.from_row({**row, "pool": bad})


@given(st.booleans(), st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-10, max_value=10 ** 30))
def test_what_pool_claim_makes_reads_back_as_itself_and_is_strict_json(hit, seconds) -> None:
    made = pool_claim(hit, seconds)
    if made is None:
        assert finite(seconds) is None
        return
    assert made["claim_seconds"] >= 0 and type(made["claim_seconds"]) is float
    assert valid_pool_claim(json.loads(json.dumps(made, allow_nan=False))) == made
