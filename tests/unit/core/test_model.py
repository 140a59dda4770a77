"""Typed values: results rows round-trip (the operator resumes from them), SpecError carries the field."""
import dataclasses

import pytest

from rolloutbatch.core.model import EpisodeResult, SpecError
from tests.unit.core.factories import result


def test_row_has_the_guides_fields_relative_to_the_origin():
    row = result(3, ready=1.23456, done=2.5).to_row(99.0)
    assert {"pod", "index", "node", "image_id", "reward", "pod_to_ready_seconds", "batch_to_ready_seconds",
            "batch_to_reward_seconds", "outcome", "reason"} <= set(row)
    assert (row["batch_to_ready_seconds"], row["batch_to_reward_seconds"], row["pod_to_ready_seconds"]) == \
        (2.235, 3.5, 1.235)
    assert "log_tail" not in row and "extra" not in row


@pytest.mark.parametrize("changes", [
    {}, {"outcome": "failed", "reason": "NonZeroExit", "message": "exit 1", "log_tail": "boom", "reward": None},
    {"extra": {"tests_exit": 0}, "flags": ("ClockSkewWithinTolerance",), "attempts": 3},
    {"outcome": "lost", "reason": "LogUnavailable", "node": None, "image_id": None, "ready_at": None,
     "reward_at": None, "pod_to_ready_seconds": None},
])
def test_row_round_trip(changes):
    original = result(5, **changes)
    assert EpisodeResult.from_row(original.to_row(100.0)) == original
    assert EpisodeResult.from_row(original.to_row(None)) == original


def test_results_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        result(0).outcome = "failed"


def test_spec_error_names_the_field():
    err = SpecError("spec.episodes", "is required")
    assert err.field == "spec.episodes" and str(err) == "spec.episodes: is required"


def test_from_row_refuses_ill_typed_rows():
    row = result(1).to_row(100.0)
    for bad in ({"reward": "lots"}, {"outcome": "unknown"}, {"index": False}, {"ready_at": float("nan")},
                {"reward": float("inf")}, {"flags": [None]}):
        with pytest.raises(ValueError):
            EpisodeResult.from_row({**row, **bad})
    with pytest.raises(ValueError):
        EpisodeResult.from_row(["not", "a", "row"])


def test_rows_never_hold_non_finite_durations():
    row = result(1, pod_to_ready_seconds=float("inf"), ready_at=1e308).to_row(-1e308)
    assert row["pod_to_ready_seconds"] is None and row["batch_to_ready_seconds"] is None
