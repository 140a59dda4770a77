"""bench/pools.py's own arithmetic: a mode's medians over its repeated runs."""

from __future__ import annotations

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pools():
    spec = importlib.util.spec_from_file_location("bench_pools", ROOT / "bench" / "pools.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_modes_medians_are_taken_per_figure_over_the_runs_that_have_it():
    rows = [{"batch_to_all_ready_s": 0.5, "claim_seconds": {"p50": 0.30, "p95": 0.4}, "operator_cpu_ms_per_episode": 20},
            {"batch_to_all_ready_s": 0.7, "claim_seconds": {"p50": 0.25, "p95": 0.6}, "operator_cpu_ms_per_episode": 10},
            {"batch_to_all_ready_s": 0.6, "claim_seconds": {"p50": 0.40, "p95": 0.5}, "operator_cpu_ms_per_episode": 30}]
    assert _pools().medians(rows) == {"batch_to_all_ready_s": 0.6, "claim_p50_s": 0.3, "claim_p95_s": 0.5,
                                      "operator_cpu_ms_per_episode": 20}


def test_a_cold_mode_has_no_claim_figures_and_a_missing_figure_is_left_out():
    rows = [{"batch_to_all_ready_s": 8.0, "batch_to_all_rewards_s": None, "operator_cpu_ms_per_episode": 12.0},
            {"batch_to_all_ready_s": 6.0, "operator_cpu_ms_per_episode": 14.0}]
    assert _pools().medians(rows) == {"batch_to_all_ready_s": 7.0, "operator_cpu_ms_per_episode": 13.0}


def test_the_working_agent_waits_between_its_two_events():
    pools = _pools()
    lines = pools.SH_WORK_EPISODE.splitlines()
    assert '"event":"ready"' in lines[0] and lines[1] == "sleep 3" and '"event":"reward"' in lines[2]
