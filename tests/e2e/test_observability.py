"""Observability and GitOps against the live devcluster and the real operator.

(a) A real Prometheus scrapes the operator's /metrics every second while a small batch runs;
    afterwards every Grafana dashboard query returns data and the operator's episode counter
    agrees with the batch's status.
(b) Live RolloutBatch objects (running, succeeded, failed, invalid) read through the shipped
    Argo CD health.lua (real Lua 5.1), kstatus (cli-utils) and the Flux healthCheckExprs.

Fixtures: `operator_process` (tests/e2e/conftest.py; `.metrics_url`, `.log_tail()`) and
`namespace` (a fresh namespace per test). Needs /usr/bin/prometheus, lua5.1 and Go
(`make system-deps`); a missing tool is a failure, not a skip.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from rolloutbatch import dashboard
from tests.support import kstatus
from tests.support.argocd_health import lua_available, run_health
from tests.support.batches import apply, condition, episode_batch, get, unique, wait_finished
from tests.support.operator import kubectl
from tests.support.prometheus import PrometheusServer, prometheus_binary, sample_value

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
HEALTH_LUA = REPO / "manifests" / "gitops" / "argocd" / "health.lua"
FLUX_KS = REPO / "manifests" / "gitops" / "flux" / "kustomization.yaml"

# docs/design.md §4: one `ready` and one `reward` JSON line, both with the pod's own name.
GOOD_EPISODE = """\
import json, os, time
eid = os.environ["EPISODE_ID"]
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": eid}), flush=True)
time.sleep(0.5)
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": eid, "reward": 1.0}), flush=True)
"""
# Ready, then fails its tests: no reward, non-zero exit.
FAILING_EPISODE = """\
import json, os, sys, time
eid = os.environ["EPISODE_ID"]
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": eid}), flush=True)
sys.exit(1)
"""
# Ready, then runs long enough to be observed while running (the batch is deleted with the
# test namespace).
SLOW_EPISODE = """\
import json, os, time
eid = os.environ["EPISODE_ID"]
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": eid}), flush=True)
time.sleep(240)
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": eid, "reward": 1.0}), flush=True)
"""


def require_tools(*, prometheus: bool = False, lua: bool = False) -> None:
    if prometheus and prometheus_binary() is None:
        pytest.fail("prometheus is not installed (make system-deps)", pytrace=False)
    if lua and not lua_available():
        pytest.fail("lua5.1 is not installed (make system-deps)", pytrace=False)


def wait_until(pred, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


# --- (a) metrics and the dashboard against a real Prometheus ------------------------------------

def test_dashboard_queries_return_data_from_live_operator(operator_process, namespace, tmp_path):
    require_tools(prometheus=True)
    with PrometheusServer([operator_process.metrics_url], tmp_path / "prometheus") as prom:
        prom.wait_for_targets_up()
        prom.wait_for("rolloutbatch_build_info")
        # A warm pool of one, started first: its series are scraped at zero before its claims.
        pool_name = unique("obspool")
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(
            {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": pool_name},
             "spec": {"size": 1, "task": {"files": {"episode.py": GOOD_EPISODE}}}}))

        name = unique("obs")
        apply(episode_batch(name, GOOD_EPISODE, episodes=3), namespace)
        obj = wait_finished(name, namespace, timeout=300, operator=operator_process)
        ready = condition(obj, "Ready")
        assert ready and ready["status"] == "True", (obj["status"], operator_process.log_tail())
        # and a pooled batch of two from it: a hit and a miss
        wait_until(lambda: (json.loads(kubectl("get", "rolloutpool", pool_name, "-n", namespace, "-o", "json").stdout)
                            .get("status") or {}).get("readyPods") == 1, 180, f"pool {pool_name} warm")
        pooled = unique("obspooled")
        apply({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": pooled},
               "spec": {"episodes": 2, "poolRef": {"name": pool_name}}}, namespace)
        done = wait_finished(pooled, namespace, timeout=300, operator=operator_process)
        assert done["status"]["succeededEpisodes"] == 2, done["status"]
        succeeded = obj["status"]["succeededEpisodes"] + 2
        assert succeeded == 5

        # The operator's counter, as Prometheus scraped it, equals the batch's status. The test
        # namespace is fresh, so no other batch contributes to it.
        expr = f'sum(rolloutbatch_episodes_total{{namespace="{namespace}",result="succeeded"}})'
        wait_until(lambda: (r := prom.query(expr)) and sample_value(r) == succeeded, 30,
                   f"{expr} == {succeeded}")
        # The batch counters move once the final status is written, after the episodes' last one:
        # a scrape can fall between the two (seen in CI), so they are waited for as well.
        finished = f'sum(rolloutbatch_batches_total{{namespace="{namespace}",result="succeeded"}})'
        wait_until(lambda: (r := prom.query(finished)) and sample_value(r) == 2, 30, f"{finished} == 2")
        active = f'sum(rolloutbatch_batches_active{{namespace="{namespace}"}})'
        wait_until(lambda: (r := prom.query(active)) and sample_value(r) == 0, 30, f"{active} == 0")
        # No batch names in labels by default.
        assert not prom.query('count({__name__=~"rolloutbatch_.*", batch!=""})')

        # Every dashboard query (variables filled in: all namespaces, 1m rate windows) has data.
        queries = dashboard.dashboard_queries(namespace=".*", rate_interval="1m", range_="1h")
        deadline = time.monotonic() + 30
        pending = dict(queries)
        while pending and time.monotonic() < deadline:
            for title, q in list(pending.items()):
                if prom.query(q):
                    del pending[title]
            if pending:
                time.sleep(1)
        assert not pending, ("dashboard queries without data:\n" + json.dumps(pending, indent=1)
                           + "\noperator log:\n" + operator_process.log_tail())


# --- (b) GitOps health of live objects ----------------------------------------------------------

def flux_exprs() -> dict[str, str]:
    ks = yaml.safe_load(FLUX_KS.read_text())
    (c,) = [c for c in ks["spec"]["healthCheckExprs"] if c["kind"] == "RolloutBatch"]
    return {"current": c["current"], "failed": c["failed"], "in_progress": c["inProgress"]}


def readings(obj: dict) -> tuple[dict, dict, dict]:
    """(Argo CD health.lua, kstatus, Flux healthCheckExprs) for one live object."""
    return run_health(HEALTH_LUA, obj), kstatus.compute(obj), kstatus.flux_health(obj, **flux_exprs())


def test_live_health_of_running_succeeded_failed_and_invalid_batches(operator_process, namespace):
    require_tools(lua=True)
    kstatus.build()  # fail early (and once) if the Go helper cannot be built

    running = unique("running")
    succeeded = unique("ok")
    failed = unique("bad")
    invalid = unique("invalid")
    apply(episode_batch(running, SLOW_EPISODE, episodes=1), namespace)
    apply(episode_batch(succeeded, GOOD_EPISODE, episodes=2), namespace)
    apply(episode_batch(failed, FAILING_EPISODE, episodes=1), namespace)
    apply(episode_batch(invalid, GOOD_EPISODE, episodes=1, runtimeClassName="does-not-exist"), namespace)

    # Running: observed by the operator, Reconciling=True, not finished.
    def running_obj():
        obj = get(running, namespace)
        if not obj:
            return None
        st = obj.get("status") or {}
        rec = condition(obj, "Reconciling")
        if (st.get("observedGeneration") == obj["metadata"]["generation"] and rec
                and rec["status"] == "True" and st.get("phase") in ("Running", "Provisioning")):
            return obj
        return None

    obj = wait_until(running_obj, 120, f"{running} to be running")
    argo, ks, flux = readings(obj)
    assert argo["status"] == "Progressing", argo
    assert argo["message"], argo
    assert ks["status"] == "InProgress", ks
    assert flux["status"] == "InProgress", flux

    obj = wait_finished(succeeded, namespace, timeout=300, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]
    argo, ks, flux = readings(obj)
    assert argo == {"status": "Healthy", "message": condition(obj, "Ready")["message"]
                    or condition(obj, "Ready")["reason"]}
    assert ks["status"] == "Current", ks
    assert flux["status"] == "Current", flux

    for name, reason_hint in ((failed, None), (invalid, "does-not-exist")):
        obj = wait_finished(name, namespace, timeout=300, operator=operator_process)
        assert obj["status"]["phase"] == "Failed", obj["status"]
        stalled = condition(obj, "Stalled")
        assert stalled and stalled["status"] == "True", obj["status"]
        argo, ks, flux = readings(obj)
        assert argo == {"status": "Degraded", "message": stalled["message"] or stalled["reason"]}
        if reason_hint:
            assert reason_hint in argo["message"], argo
        assert ks["status"] == "Failed", ks
        assert flux["status"] == "Failed", flux

    # The running batch is still running after all that (and its readings did not change).
    obj = get(running, namespace)
    assert obj["status"]["phase"] in ("Running", "Provisioning"), obj["status"]
    assert run_health(HEALTH_LUA, obj)["status"] == "Progressing"
