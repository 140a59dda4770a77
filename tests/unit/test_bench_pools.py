"""bench/pools.py's own logic: a mode's medians over its repeated runs, the working agent, and the wait
for an earlier run's pods to go."""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@functools.cache
def _pools():
    """bench/pools.py loaded once; what loading it put on sys.path and in sys.modules (bench's own
    top-level names: lib, workloads) is taken back, so no later test imports them by accident."""
    path, modules = list(sys.path), set(sys.modules)
    spec = importlib.util.spec_from_file_location("bench_pools", ROOT / "bench" / "pools.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if str(ROOT / "bench") in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]
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
    assert lines[0].startswith("echo \"schedstat ") and '"event":"ready"' in lines[1] and lines[2] == "sleep 3" \
        and '"event":"reward"' in lines[3]
    assert pools.PY_WORK_EPISODE.index("schedstat") < pools.PY_WORK_EPISODE.index('e("ready"); time.sleep(3)')


def test_an_agents_schedstat_line_gives_its_cpu_and_run_queue_wait_in_seconds():
    pools = _pools()
    log = '{"event":"ready"}\nschedstat 31000000 1250000000 98\n{"event":"reward","reward":1.0}\n'
    assert pools.schedstat_of(log) == (0.031, 1.25)


@pytest.mark.parametrize("log", ["", '{"event":"ready"}', "schedstat", "schedstat 1 2", "schedstat 1 x 3",
                                 "schedstat: 1 2 3", "a schedstat 1 2 3"])
def test_a_log_without_a_whole_schedstat_line_gives_none(log):
    assert _pools().schedstat_of(log) is None


class _Kube:
    """Answers the pod list with each of ``answers`` in turn (the last one from then on)."""

    def __init__(self, *answers: int) -> None:
        self.answers, self.asked = list(answers), []

    def get(self, path, **params):
        self.asked.append((path, tuple(sorted(params.items()))))
        count = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {"items": [{"metadata": {"namespace": "rp-1", "name": f"p{i}"}} for i in range(count)]}


def test_a_run_waits_until_an_earlier_runs_pods_are_gone(monkeypatch):
    pools = _pools()
    monkeypatch.setattr(pools.time, "sleep", lambda s: None)
    kube = _Kube(178, 3, 0)
    pools._quiet(kube)
    assert len(kube.asked) == 3
    naming = pools.naming
    assert set(kube.asked) == {("/api/v1/pods", (("labelSelector", f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"),))}


def test_a_run_refuses_to_start_beside_pods_that_do_not_go(monkeypatch):
    pools = _pools()
    monkeypatch.setattr(pools.time, "sleep", lambda s: None)
    with pytest.raises(RuntimeError, match="2 pods of an earlier run are still on the cluster .*rp-1/p0"):
        pools._quiet(_Kube(2), timeout=0.0)


def test_loading_the_bench_leaves_no_bench_module_importable():
    _pools()
    assert str(ROOT / "bench") not in sys.path
    assert not [m for m in ("lib", "workloads", "pools") if m in sys.modules
                and str(ROOT / "bench") in str(getattr(sys.modules[m], "__file__", "") or "")]


def _nodes(tmp_path, weights=("1024", "1024")):
    """A devcluster's state with a node per weight, each node's cgroup a directory of tmp_path."""
    state, cgroups = tmp_path / "state", []
    for i, weight in enumerate(weights, 1):
        (state / "nodes" / f"devnode-{i}").mkdir(parents=True)
        (state / "nodes" / f"devnode-{i}" / "launch.json").write_text(f'{{"cgroupRoot": "/rbx-devnode-{i}"}}')
        cgroup = tmp_path / "cpu" / f"rbx-devnode-{i}"
        cgroup.mkdir(parents=True)
        (cgroup / "cpu.shares").write_text(weight + "\n")
        cgroups.append(cgroup)
    return state, cgroups


def test_the_node_cgroups_are_those_the_nodes_launch_files_name(tmp_path, monkeypatch):
    pools = _pools()
    state, cgroups = _nodes(tmp_path)
    monkeypatch.setattr(pools, "CPU_CGROUPS", tmp_path / "cpu")
    assert pools.node_cgroups(state) == cgroups


def test_node_cgroups_weigh_the_shares_given_for_the_block_and_what_they_did_after(tmp_path):
    pools = _pools()
    _, cgroups = _nodes(tmp_path, ("1024", "2048"))
    with pools.node_cpu_shares(8192, cgroups) as weights:
        assert weights == [8192]
        assert [(c / "cpu.shares").read_text() for c in cgroups] == ["8192", "8192"]
    assert [(c / "cpu.shares").read_text().strip() for c in cgroups] == ["1024", "2048"]
    with pytest.raises(ValueError), pools.node_cpu_shares(8192, cgroups):
        raise ValueError("the run failed")
    assert [(c / "cpu.shares").read_text().strip() for c in cgroups] == ["1024", "2048"]


def test_no_shares_given_changes_nothing_and_says_the_weights_the_run_has(tmp_path):
    pools = _pools()
    _, cgroups = _nodes(tmp_path, ("1024", "1024"))
    with pools.node_cpu_shares(None, cgroups) as weights:
        assert weights == [1024]
    with pools.node_cpu_shares(None, []) as weights:   # no real nodes (the node agent): nothing to say
        assert weights == []


def test_shares_given_without_a_node_cgroup_are_refused(tmp_path):
    with pytest.raises(RuntimeError, match="no devcluster node cgroup"), _pools().node_cpu_shares(8192, []):
        pass


@pytest.mark.parametrize("shares, refused", [(None, False), (2, False), (262144, False), (1, True), (262145, True),
                                             (0, True), (-5, True)])
def test_node_cpu_shares_are_within_cgroup_v1s_bounds(shares, refused):
    assert (_pools().cpu_shares_refused(shares) is not None) == refused


def test_the_command_line_hands_its_parallelism_and_result_name_to_the_run(monkeypatch):
    pools, got = _pools(), {}
    monkeypatch.setattr(pools, "Kube", lambda: "kube")
    monkeypatch.setattr(pools, "part_pools", lambda kube, sizes, runtime_class, result, **kw: got.update(
        sizes=sizes, result=result, **kw))
    pools.main(["--sizes", "20", "--parallelism", "10", "--result", "pools-later-waves"])
    assert (got["sizes"], got["result"], got["parallelism"]) == ([20], "pools-later-waves", 10)
    pools.main(["--sizes", "20"])
    assert (got["result"], got["parallelism"]) == ("pools", None)


def test_a_parallelism_below_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        _pools().main(["--parallelism", "0"])
    assert "--parallelism must be at least 1" in capsys.readouterr().err
