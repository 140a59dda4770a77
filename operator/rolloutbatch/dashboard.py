"""The Grafana dashboard for the RolloutBatch operator, generated from code.

Regenerate the committed files after editing this module (from the repository root)::

    python -m rolloutbatch.dashboard            # writes manifests/monitoring/grafana-dashboard{.json,-configmap.yaml}
                                                # and the chart's charts/rolloutbatch/files/grafana-dashboard.json
    python -m rolloutbatch.dashboard --check    # exit 1 when the committed files are stale

Conventions (kube-prometheus-stack style): a ``datasource`` variable of type datasource and every
panel/target pointing at ``${datasource}`` (no hard-coded datasource uid), a ``namespace`` variable
fed by ``label_values(rolloutbatch_batches_active, namespace)``, ``$__rate_interval`` in every
``rate()``, a stable ``uid``, and a ConfigMap labelled ``grafana_dashboard: "1"`` for the Grafana
sidecar. :func:`dashboard_queries` lists every PromQL expression with the variables filled in so a
test can run them against a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rolloutbatch.core import vocabulary as v

UID = "rolloutbatch-overview"
TITLE = "RolloutBatch operator"
CONFIGMAP_NAME = "rolloutbatch-grafana-dashboard"
JSON_FILE = "grafana-dashboard.json"
CONFIGMAP_FILE = "grafana-dashboard-configmap.yaml"
DS = {"type": "prometheus", "uid": "${datasource}"}
NS = 'namespace=~"$namespace"'


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False
    fmt: str = "time_series"  # or "heatmap" for cumulative `le` buckets


@dataclass
class Panel:
    title: str
    kind: str  # timeseries | stat | heatmap | bargauge
    targets: list[Target]
    unit: str = "short"
    description: str = ""
    w: int = 12
    h: int = 8
    options: dict[str, Any] = field(default_factory=dict)
    min: float | None = None
    max: float | None = None


def _quantiles(metric: str, qs: tuple[float, ...], by: str = "", window: str = "$__rate_interval",
               fn: str = "rate", selector: str = NS, legend_prefix: str = "") -> list[Target]:
    group = f"le, {by}" if by else "le"
    sel = f"{{{selector}}}" if selector else ""
    return [
        Target(
            f"histogram_quantile({q}, sum by ({group}) ({fn}({metric}_bucket{sel}[{window}])))",
            f"{legend_prefix}p{round(q * 100)}" + (f" {{{{{by}}}}}" if by else ""),
        )
        for q in qs
    ]


def _rows() -> list[tuple[str, list[Panel]]]:
    """The dashboard's content: rows of panels, top to bottom."""
    ep_rate = f"rate(rolloutbatch_episodes_total{{{NS}}}[$__rate_interval])"
    # episodes that ran to a verdict: not those cut off by spec.stop (result "stopped")
    finished_rate = f'rate(rolloutbatch_episodes_total{{{NS},result!="{v.OUTCOME_STOPPED}"}}[$__rate_interval])'
    return [
        ("Overview", [
            Panel("Active batches", "stat", [
                Target(f"sum(rolloutbatch_batches_active{{{NS}}})", "active")],
                description="RolloutBatches started and not yet finished.", w=4, h=5),
            Panel("Running episodes", "stat", [
                Target(f"sum(rolloutbatch_episodes_running{{{NS}}})", "running")],
                description="Episode pods running now.", w=4, h=5),
            Panel("Batches finished in range", "stat", [
                Target(f"sum by (result) (increase(rolloutbatch_batches_total{{{NS}}}[$__range]))",
                       "{{result}}", instant=True)],
                description="Batches that reached Succeeded, Failed or Stopped in the selected time range, by result.",
                w=8, h=5),
            Panel("Operator version", "stat", [
                Target("max by (version) (rolloutbatch_build_info)", "{{version}}", instant=True)],
                w=4, h=5, options={"textMode": "name"}),
            Panel("Operator leaders", "stat", [
                Target("sum(rolloutbatch_leader)", "leaders", instant=True)],
                description="Operator processes holding the leader-election Lease: 1; 0 for the few seconds "
                            "a standby takes over (docs/design.md, leadership).", w=4, h=5),
            Panel("Active batches by namespace", "timeseries", [
                Target(f"sum by (namespace) (rolloutbatch_batches_active{{{NS}}})", "{{namespace}}")],
                w=12),
            Panel("Running episodes by namespace", "timeseries", [
                Target(f"sum by (namespace) (rolloutbatch_episodes_running{{{NS}}})", "{{namespace}}")],
                w=12),
        ]),
        ("Episodes", [
            Panel("Episodes per second by result", "timeseries", [
                Target(f"sum by (result) ({ep_rate})", "{{result}}"),
                Target(f"sum(rate(rolloutbatch_episodes_retried_total{{{NS}}}[$__rate_interval]))",
                       "retried")],
                unit="ops", description="Episode verdicts per second; retried = re-run after an "
                "infrastructure failure (eviction, preemption, node loss)."),
            Panel("Episode failure ratio", "timeseries", [
                Target(f'sum(rate(rolloutbatch_episodes_total{{{NS},result=~"{v.OUTCOME_FAILED}|{v.OUTCOME_LOST}"}}'
                       f"[$__rate_interval])) / sum({finished_rate})", "failed or lost")],
                unit="percentunit", min=0, max=1,
                description="(failed + lost) / all finished episodes (those cut off by spec.stop are neither)."),
            Panel("Episode start-up (pod created -> ready)", "timeseries",
                  _quantiles("rolloutbatch_episode_startup_seconds", (0.5, 0.95, 0.99)), unit="s"),
            Panel("Episode duration (ready -> reward)", "timeseries",
                  _quantiles("rolloutbatch_episode_duration_seconds", (0.5, 0.95, 0.99)), unit="s"),
            Panel("Warm pool: claim -> episode handed over", "timeseries",
                  _quantiles("rolloutbatch_claim_seconds", (0.5, 0.95), by="result"), unit="s",
                  description="spec.poolRef: a warm pod's claim (hit), or a cold pod's creation (miss), until the "
                              "operator handed the pod its episode."),
            Panel("Warm pool hits and misses in range", "stat", [
                Target(f"sum by (result) (increase(rolloutbatch_pool_claims_total{{{NS}}}[$__range]))",
                       "{{result}}", instant=True)],
                description="Episodes of pooled batches that got a warm pod (hit) or a cold one (miss)."),
            Panel("Kueue evictions in range", "stat", [
                Target(f"sum by (namespace) (increase(rolloutbatch_queue_evictions_total{{{NS}}}[$__range]))",
                       "{{namespace}}", instant=True)],
                description="Times Kueue evicted a running batch's Job (spec.queueName): its running episodes "
                            "ended EvictedByQueue (lost)."),
            Panel("Reward extras dropped in range", "stat", [
                Target(f"sum by (namespace) (increase(rolloutbatch_reward_extras_dropped_total{{{NS}}}[$__range]))",
                       "{{namespace}}", instant=True)],
                description="Episodes whose reward event had extra fields left out of their results row (past "
                "the extras budget, or not JSON). Each such row is flagged RewardExtrasDropped and its message "
                "names the fields; the batch has one RewardExtrasDropped Warning Event.",
                w=24, h=5, options={"textMode": "value_and_name"}),
        ]),
        ("Rewards", [
            Panel("Reward distribution over time", "heatmap", [
                Target(f"sum by (le) (increase(rolloutbatch_episode_reward_bucket{{{NS}}}"
                       "[$__rate_interval]))", "{{le}}", fmt="heatmap")],
                options={"calculate": False, "yAxis": {"unit": "short"},
                         "cellGap": 1, "color": {"scheme": "Viridis", "mode": "scheme"}}),
            Panel("Reward distribution in range", "bargauge", [
                Target(f"sum by (le) (increase(rolloutbatch_episode_reward_bucket{{{NS}}}"
                       "[$__range]))", "{{le}}", instant=True, fmt="heatmap")],
                description="Episodes per reward bucket (upper bound) in the selected time range.",
                options={"displayMode": "gradient", "orientation": "vertical"}),
            # Means and rates, not quantiles: rewards are often 0 or 1, and a histogram quantile
            # interpolates inside a bucket, inventing values no episode had. The mean comes from
            # the per-sign sums (the histogram has no _sum while a bucket is below zero).
            Panel("Mean reward", "timeseries", [
                Target(f"({_reward_rate('positive')} - {_reward_rate('negative')}) / "
                       f"sum(rate(rolloutbatch_episode_reward_count{{{NS}}}[$__rate_interval]))", "mean")],
                description="Mean of the rewards graded episodes count with: a failed one's is 0, lost ones "
                "have none (the status' rewardMean, over time)."),
            Panel("Success rate", "timeseries", [
                Target(f'sum(rate(rolloutbatch_episodes_total{{{NS},result="succeeded"}}[$__rate_interval])) '
                       f"/ sum({finished_rate})", "succeeded")],
                unit="percentunit", min=0, max=1,
                description="Succeeded / all finished episodes (failed ones count 0 in the rewards)."),
        ]),
        ("Batches", [
            Panel("Batch durations in range (p50)", "bargauge",
                  _batch_duration_targets(0.5), unit="s",
                  description="Batch start -> all ready, -> all rewards; Job created -> complete."),
            Panel("Batch durations in range (p95)", "bargauge",
                  _batch_duration_targets(0.95), unit="s"),
        ]),
        ("Operator", [
            Panel("Log-read throughput", "timeseries", [
                Target("sum(rate(rolloutbatch_log_read_bytes_total[$__rate_interval]))", "bytes/s")],
                unit="Bps", w=8),
            Panel("Log reads per second", "timeseries", [
                Target("sum(rate(rolloutbatch_log_read_seconds_count[$__rate_interval]))", "reads/s")],
                unit="ops", w=8),
            Panel("Log-read latency", "timeseries",
                  _quantiles("rolloutbatch_log_read_seconds", (0.5, 0.95), selector=""),
                  unit="s", w=8),
            Panel("Handler errors per second", "timeseries", [
                Target("sum by (handler) (rate(rolloutbatch_handler_errors_total[$__rate_interval]))",
                       "{{handler}}")], unit="ops"),
            Panel("Handler duration p95", "timeseries",
                  _quantiles("rolloutbatch_handler_duration_seconds", (0.95,), by="handler",
                             selector=""), unit="s"),
        ]),
    ]


def _reward_rate(sign: str) -> str:
    return (f'sum(rate(rolloutbatch_episode_reward_magnitude_total{{{NS},sign="{sign}"}}'
            "[$__rate_interval]))")


def _batch_duration_targets(q: float) -> list[Target]:
    out = []
    for metric, legend in (("rolloutbatch_batch_ready_seconds", "all ready"),
                           ("rolloutbatch_batch_rewards_seconds", "all rewards"),
                           ("rolloutbatch_batch_complete_seconds", "job complete"),
                           ("rolloutbatch_queue_wait_seconds", "queue wait (spec.queueName)")):
        (t,) = _quantiles(metric, (q,), window="$__range", fn="increase")
        out.append(Target(t.expr, legend, instant=True))
    return out


def _panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": p.unit}
    if p.min is not None:
        defaults["min"] = p.min
    if p.max is not None:
        defaults["max"] = p.max
    out: dict[str, Any] = {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": DS,
        "gridPos": {"h": p.h, "w": p.w, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": dict(p.options),
        "targets": [
            {
                "datasource": DS,
                "expr": t.expr,
                "legendFormat": t.legend,
                "refId": chr(ord("A") + i),
                "range": not t.instant,
                "instant": t.instant,
                "format": t.fmt,
                "editorMode": "code",
            }
            for i, t in enumerate(p.targets)
        ],
    }
    if p.kind == "timeseries":
        out["options"].setdefault("legend", {"displayMode": "list", "placement": "bottom",
                                             "showLegend": True})
        out["options"].setdefault("tooltip", {"mode": "multi", "sort": "desc"})
    if p.kind == "stat":
        out["options"].setdefault("reduceOptions", {"calcs": ["lastNotNull"], "fields": "",
                                                    "values": False})
    if p.kind == "bargauge":
        out["options"].setdefault("reduceOptions", {"calcs": ["lastNotNull"], "fields": "",
                                                    "values": False})
    return out


def build_dashboard() -> dict[str, Any]:
    """The dashboard model (Grafana JSON), deterministic for a given source."""
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row_title, row_panels in _rows():
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y, x, row_h = pid + 1, y + 1, 0, 0
        for p in row_panels:
            if x + p.w > 24:
                x, y, row_h = 0, y + row_h, 0
            panels.append(_panel_json(p, pid, x, y))
            pid, x, row_h = pid + 1, x + p.w, max(row_h, p.h)
        y += row_h
    return {
        "uid": UID,
        "title": TITLE,
        "description": "RolloutBatch operator: batches, episodes, rewards, start-up latency and "
                       "operator health (metrics prefix rolloutbatch_).",
        "tags": ["rolloutbatch", "rl", "kubernetes-operator"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
                "regex": "",
                "refresh": 1,
                "options": [],
            },
            {
                "name": "namespace",
                "label": "Namespace",
                "type": "query",
                "datasource": DS,
                "definition": "label_values(rolloutbatch_batches_active, namespace)",
                "query": {"query": "label_values(rolloutbatch_batches_active, namespace)",
                          "refId": "PrometheusVariableQueryEditor-VariableQuery"},
                "current": {},
                "hide": 0,
                "includeAll": True,
                "allValue": ".*",
                "multi": True,
                "refresh": 2,
                "sort": 1,
                "regex": "",
                "options": [],
            },
        ]},
        "panels": panels,
    }


def dashboard_queries(namespace: str = ".*", rate_interval: str = "5m",
                      range_: str = "1h") -> dict[str, str]:
    """Every PromQL expression of the dashboard, keyed "<panel title> [<refId>]", with Grafana's
    variables replaced ($namespace by a regex, $__rate_interval and $__range by durations), ready
    for Prometheus's HTTP API."""
    out: dict[str, str] = {}
    for panel in build_dashboard()["panels"]:
        for t in panel.get("targets", []):
            expr = (t["expr"].replace("$namespace", namespace)
                    .replace("$__rate_interval", rate_interval).replace("$__range", range_))
            out[f"{panel['title']} [{t['refId']}]"] = expr
    return out


def dashboard_json() -> str:
    return json.dumps(build_dashboard(), indent=2) + "\n"


class _Literal(str):
    pass


def _literal_representer(dumper: yaml.SafeDumper, data: _Literal) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, _literal_representer)


def configmap_yaml() -> str:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "labels": {
                "grafana_dashboard": "1",
                "app.kubernetes.io/name": "rolloutbatch",
                "app.kubernetes.io/component": "monitoring",
            },
            # Honoured by the Grafana sidecar when sidecar.dashboards.folderAnnotation is set.
            "annotations": {"grafana_folder": "RolloutBatch"},
        },
        "data": {f"{UID}.json": _Literal(dashboard_json())},
    }
    header = ("# Generated by `python -m rolloutbatch.dashboard` from "
              "operator/rolloutbatch/dashboard.py. Do not edit.\n")
    return header + yaml.dump(cm, Dumper=_Dumper, sort_keys=False, width=4096)


def outputs() -> dict[str, str]:
    return {JSON_FILE: dashboard_json(), CONFIGMAP_FILE: configmap_yaml()}


def default_out_dir() -> Path:
    # operator/rolloutbatch/dashboard.py -> <repo>/manifests/monitoring
    return Path(__file__).resolve().parents[2] / "manifests" / "monitoring"


# The Helm chart reads the dashboard from its own files/ (.Files.Get reaches nothing outside it).
CHART_JSON = Path(__file__).resolve().parents[2] / "charts" / "rolloutbatch" / "files" / JSON_FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rolloutbatch.dashboard", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=default_out_dir(), help="output directory")
    ap.add_argument("--check", action="store_true", help="fail if the files differ; write nothing")
    ap.add_argument("--queries", action="store_true", help="print the PromQL queries and exit")
    args = ap.parse_args(argv)
    if args.queries:
        for title, expr in dashboard_queries().items():
            print(f"{title}\n    {expr}")
        return 0
    stale = []
    for path, text in [*((args.out / name, text) for name, text in outputs().items()),
                       (CHART_JSON, dashboard_json())]:
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(str(path))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print("stale (run `python -m rolloutbatch.dashboard`): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    for s in stale:
        print(f"wrote {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
