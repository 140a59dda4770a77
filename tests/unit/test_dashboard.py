"""The Grafana dashboard: committed files match the generator, conventions hold, every query
refers to metrics the operator exports, parses as PromQL (promtool) and, against a real Prometheus
scraping a real Metrics exporter, returns data."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from rolloutbatch import dashboard
from rolloutbatch.metrics import METRIC_NAMES, Metrics
from tests.support.prometheus import PrometheusServer, prometheus_binary

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "monitoring"


def test_committed_files_match_the_generator():
    for name, text in dashboard.outputs().items():
        committed = (MONITORING / name).read_text()
        assert committed == text, f"{name} is stale: run `python -m rolloutbatch.dashboard`"
    assert dashboard.main(["--check"]) == 0


def test_configmap_carries_the_dashboard_for_the_sidecar():
    cm = yaml.safe_load((MONITORING / dashboard.CONFIGMAP_FILE).read_text())
    assert cm["kind"] == "ConfigMap"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (key,) = cm["data"]
    assert key.endswith(".json")
    assert json.loads(cm["data"][key]) == json.loads((MONITORING / dashboard.JSON_FILE).read_text())


def test_dashboard_conventions():
    d = json.loads((MONITORING / dashboard.JSON_FILE).read_text())
    assert d["uid"] == "rolloutbatch-overview"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ns = variables["namespace"]
    assert ns["query"]["query"] == "label_values(rolloutbatch_batches_active, namespace)"
    assert ns["datasource"]["uid"] == "${datasource}"
    assert ns["includeAll"] and ns["allValue"] == ".*"

    panels = [p for p in d["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            if "rate(" in t["expr"] or "increase(" in t["expr"]:
                assert re.search(r"\[\$__(rate_interval|range)\]", t["expr"]), t["expr"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24
    # No datasource uid other than the variable anywhere in the document.
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', json.dumps(d)))
    assert uids == {"rolloutbatch-overview", "${datasource}"}

    titles = " | ".join(p["title"] for p in panels).lower()
    for needed in ("active batches", "episodes per second by result", "failure ratio",
                   "start-up", "reward distribution", "mean reward", "success rate",
                   "reward extras dropped", "batch durations", "log-read throughput",
                   "handler errors", "handler duration"):
        assert needed in titles, needed
    startup = next(p for p in panels if p["title"].startswith("Episode start-up"))
    exprs = " ".join(t["expr"] for t in startup["targets"])
    for q in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({q}, sum by (le) (rate(rolloutbatch_episode_startup_seconds_bucket" in exprs


def _exported_sample_names() -> set[str]:
    """Sample names a Metrics instance exports once every method has been used."""
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.batch_started("ns", "b")
    m.episode_finished("ns", "b", "succeeded", 1, 1, 1)
    m.episode_retried("ns", "b")
    m.set_running("ns", "b", 1)
    m.batch_finished("ns", "b", "succeeded", 1, 1, 1)
    m.log_read(0.1, 10)
    m.pool_started("ns", "p")
    m.pool_claims("ns", "p", 1, 1)
    m.claim_observed("ns", "p", True, 0.2)
    with m.handler("h"):
        pass
    return {s.name for fam in reg.collect() for s in fam.samples}


def test_every_query_uses_exported_metrics():
    exported = _exported_sample_names()
    queries = dashboard.dashboard_queries()
    assert queries
    used: set[str] = set()
    for title, expr in queries.items():
        assert "$" not in expr, (title, expr)
        names = set(re.findall(r"\b(rolloutbatch_[a-z_]+)", expr))
        assert names, (title, expr)
        missing = names - exported
        assert not missing, f"{title}: {missing} not exported by rolloutbatch.metrics"
        used |= names
    # the dashboard covers the headline metrics
    for n in ("rolloutbatch_batches_active", "rolloutbatch_episodes_total",
              "rolloutbatch_episode_startup_seconds_bucket", "rolloutbatch_episode_reward_bucket",
              "rolloutbatch_log_read_bytes_total", "rolloutbatch_handler_errors_total",
              "rolloutbatch_handler_duration_seconds_bucket"):
        assert n in used, n


def _family(sample: str) -> str:
    for suffix in ("_bucket", "_count", "_sum"):
        if sample.endswith(suffix) and sample[: -len(suffix)] in METRIC_NAMES:
            return sample[: -len(suffix)]
    return sample


def test_every_metric_the_operator_exports_has_a_panel():
    used = {_family(n) for expr in dashboard.dashboard_queries().values()
            for n in re.findall(r"\b(rolloutbatch_[a-z_]+)", expr)}
    assert METRIC_NAMES <= used, f"no panel for {sorted(METRIC_NAMES - used)}"


def test_rewards_are_shown_as_means_and_rates_never_as_quantiles():
    # Rewards are often 0 or 1: a histogram quantile interpolates inside a bucket and shows
    # values no episode had.
    queries = dashboard.dashboard_queries()
    for title, expr in queries.items():
        if "histogram_quantile" in expr:
            assert "episode_reward" not in expr, title
    mean = queries["Mean reward [A]"]
    assert 'sign="positive"' in mean and 'sign="negative"' in mean and "rolloutbatch_episode_reward_count" in mean
    assert 'result="succeeded"' in queries["Success rate [A]"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_queries_parse_as_promql(tmp_path):
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": expr}
        for i, expr in enumerate(dashboard.dashboard_queries().values())
    ]}]}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.skipif(prometheus_binary() is None, reason="prometheus not installed")
def test_every_query_returns_data_from_a_real_prometheus(tmp_path):
    """No cluster: the operator's exporter, driven through its public API, scraped by a real
    Prometheus. The cluster version of this test is tests/e2e/test_observability.py."""
    m = Metrics(CollectorRegistry())
    stop = m.serve(0, "127.0.0.1")
    try:
        with PrometheusServer([f"http://127.0.0.1:{m.server_port}/metrics"], tmp_path) as prom:
            prom.wait_for_targets_up()
            m.batch_started("team-a", "b1")
            m.pool_started("team-a", "pool")
            with m.handler("create"):
                pass
            prom.wait_for('rolloutbatch_batches_active{namespace="team-a"} == 1')
            for i, reward in enumerate((1.0, 0.5, -0.75)):
                with m.handler("pod_event"):
                    m.set_running("team-a", "b1", 3 - i)
                    m.log_read(0.01 * (i + 1), 500)
                    m.episode_finished("team-a", "b1", "succeeded", 0.5 + i, 2.0 + i, reward)
            with pytest.raises(KeyError):
                with m.handler("pod_event"):
                    raise KeyError("handler failure is counted")
            m.pool_claims("team-a", "pool", 2, 1)
            m.claim_observed("team-a", "pool", True, 0.2)
            m.claim_observed("team-a", "pool", False, 4.0)
            m.batch_finished("team-a", "b1", "succeeded", 2.5, 4.5, 5.0)
            prom.wait_for('rolloutbatch_batches_total{result="succeeded"} == 1')
            prom.wait_for('rolloutbatch_episodes_total{result="succeeded"} == 3')

            empty = {}
            for title, expr in dashboard.dashboard_queries(rate_interval="1m").items():
                result = prom.query(expr)
                if not result:
                    empty[title] = expr
            assert not empty, f"queries without data: {json.dumps(empty, indent=2)}"
            ratio = prom.query(dashboard.dashboard_queries()["Episode failure ratio [A]"])
            assert float(ratio[0]["value"][1]) == 0.0
            mean = prom.query(dashboard.dashboard_queries(rate_interval="1m")["Mean reward [A]"])
            assert float(mean[0]["value"][1]) == pytest.approx(0.25)   # (1.0 + 0.5 - 0.75) / 3
    finally:
        stop()
