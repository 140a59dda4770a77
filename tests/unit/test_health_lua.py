"""manifests/gitops/argocd/health.lua through the real Lua 5.1 interpreter, case by case from
health_test.yaml (Argo CD's own test format), and the argocd-cm snippet carrying it verbatim."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rolloutbatch.core import pool_census, pool_spec
from rolloutbatch.core import vocabulary as v
from tests.support.argocd_health import lua_available, lua_literal, lua_string, run_health

REPO = Path(__file__).resolve().parents[2]
ARGOCD = REPO / "manifests" / "gitops" / "argocd"
HEALTH = ARGOCD / "health.lua"
CASES = yaml.safe_load((ARGOCD / "health_test.yaml").read_text())["tests"]
CM_KEY = "resource.customizations.health.rl.agentruntime.io_RolloutBatch"

needs_lua = pytest.mark.skipif(not lua_available(), reason="lua5.1 not installed (apt-get install lua5.1)")


@needs_lua
@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"] for c in CASES])
def test_health_case(case):
    obj = yaml.safe_load((ARGOCD / case["inputPath"]).read_text())
    assert obj["apiVersion"] == "rl.agentruntime.io/v1alpha1" and obj["kind"] == "RolloutBatch"
    got = run_health(HEALTH, obj)
    assert got == {"status": case["healthStatus"]["status"],
                   "message": case["healthStatus"]["message"]}


def test_every_testdata_file_has_a_case():
    used = {c["inputPath"] for c in CASES}
    files = {f"testdata/{p.name}" for p in (ARGOCD / "testdata").glob("*.yaml")}
    assert used == files
    statuses = {c["healthStatus"]["status"] for c in CASES}
    assert statuses == {"Healthy", "Progressing", "Degraded"}


def test_argocd_cm_snippet_carries_health_lua_verbatim():
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    assert cm["data"][CM_KEY] == HEALTH.read_text()
    assert cm["data"][CM_KEY.replace("RolloutBatch", "RolloutPool")] == HEALTH.read_text()


@needs_lua
@pytest.mark.parametrize("warm, starting, stuck, health", [
    (1, 2, False, "Progressing"),   # filling
    (3, 0, False, "Healthy"),
    (0, 0, True, "Degraded"),       # its pods cannot run
])
def test_a_pool_as_the_operator_writes_it(warm, starting, stuck, health):
    ref = pool_spec.PoolRef(name="warm", namespace="team", uid="u")
    spec = pool_spec.parse_pool_spec({"size": 3, "task": {"files": {"e.py": "x"}}})
    found = pool_census.PoolCensus(tuple(f"w{i}" for i in range(warm)), tuple(f"s{i}" for i in range(starting)),
                                   ("p",) if stuck else (),
                                   (("p", v.PoolReason.IMAGE, "cannot pull x:1"),) if stuck else (), ())
    status = pool_census.pool_status(ref, spec, found, 1, 0, "2026-12-04T00:00:00Z")
    got = run_health(HEALTH, {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool",
                              "metadata": {"name": "warm", "generation": 1}, "spec": {"size": 3}, "status": status})
    assert got["status"] == health
    assert got["message"] == status["message"] and (not stuck or "cannot pull x:1" in got["message"])


@needs_lua
def test_hostile_messages_round_trip():
    """Messages come from the operator, which quotes episode output: any text must survive."""
    msg = 'quotes " and \\ backslash, newline\nand unicode: 报酬 ✓, tab\t, NUL-free ]]'
    obj = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
           "metadata": {"name": "x", "generation": 1},
           "status": {"observedGeneration": 1, "conditions": [
               {"type": "Stalled", "status": "True", "reason": "X", "message": msg}]}}
    assert run_health(HEALTH, obj) == {"status": "Degraded", "message": msg}


@needs_lua
def test_null_fields_and_missing_conditions():
    obj = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
           "metadata": {"name": "x", "generation": 2},
           "status": {"observedGeneration": None, "message": None, "conditions": None}}
    assert run_health(HEALTH, obj) == {"status": "Progressing", "message": "Waiting for the operator"}


def test_lua_encoding():
    assert lua_string('a"b\\c\n') == '"a\\"b\\\\c\\10"'
    assert lua_literal({"a": [1, 2.5, True, None], "b": None}) == '{["a"] = {1, 2.5, true, nil}}'
