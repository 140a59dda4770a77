"""How kstatus (cli-utils' status.Compute, used by Flux and kpt) reads RolloutBatch and RolloutPool objects.

Same fixture objects as the Argo CD health tests (manifests/gitops/argocd/testdata), so the two
GitOps readings of one object are checked side by side."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rolloutbatch.core import pool_census, pool_spec
from rolloutbatch.core import vocabulary as v
from tests.support import kstatus

ARGOCD = Path(__file__).resolve().parents[2] / "manifests" / "gitops" / "argocd"

pytestmark = pytest.mark.skipif(not kstatus.go_available() and not kstatus.BIN.exists(),
                                reason="no Go toolchain to build the kstatus helper")


def load(name: str) -> dict:
    return yaml.safe_load((ARGOCD / "testdata" / name).read_text())


@pytest.mark.parametrize("fixture,expected", [
    ("running.yaml", "InProgress"),        # Reconciling=True, Ready=False
    ("provisioning.yaml", "InProgress"),
    ("succeeded.yaml", "Current"),         # Ready=True
    ("failed.yaml", "Failed"),             # Stalled=True
    ("invalid.yaml", "Failed"),
    ("stalled.yaml", "Failed"),
    ("generation-behind.yaml", "InProgress"),  # observedGeneration < generation
    # kstatus reads a custom resource without any conditions as Current: a RolloutBatch that
    # the operator has not visited yet looks done to plain kstatus. Hence Flux's
    # healthCheckExprs in manifests/gitops/flux/ (and the operator setting Reconciling=True on
    # its first visit).
    ("no-status.yaml", "Current"),
])
def test_kstatus_of_fixtures(fixture, expected):
    assert kstatus.compute(load(fixture))["status"] == expected


def test_messages():
    assert "generation" in kstatus.compute(load("generation-behind.yaml"))["message"].lower()
    assert kstatus.compute(load("failed.yaml"))["message"] == "7/10 episodes succeeded; 10 required"


def test_build_is_cached():
    path = kstatus.build()
    mtime = path.stat().st_mtime_ns
    assert kstatus.build() == path
    assert path.stat().st_mtime_ns == mtime


FLUX = Path(__file__).resolve().parents[2] / "manifests" / "gitops" / "flux" / "kustomization.yaml"


def flux_exprs() -> dict[str, str]:
    ks = yaml.safe_load(FLUX.read_text())
    assert ks["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1" and ks["kind"] == "Kustomization"
    assert ks["spec"]["wait"] is True and ks["spec"]["timeout"]
    (check,) = [c for c in ks["spec"]["healthCheckExprs"] if c["kind"] == "RolloutBatch"]
    assert check["apiVersion"] == "rl.agentruntime.io/v1alpha1"
    return {"current": check["current"], "failed": check["failed"],
            "in_progress": check["inProgress"]}


@pytest.mark.parametrize("fixture,expected", [
    ("running.yaml", "InProgress"),
    ("provisioning.yaml", "InProgress"),
    ("succeeded.yaml", "Current"),
    ("failed.yaml", "Failed"),
    ("invalid.yaml", "Failed"),
    ("stalled.yaml", "Failed"),  # Stalled wins over a stale Ready=True
    ("generation-behind.yaml", "InProgress"),
])
def test_flux_health_check_exprs(fixture, expected):
    assert kstatus.flux_health(load(fixture), **flux_exprs())["status"] == expected


def test_flux_without_conditions_is_in_progress_and_without_status_never_healthy():
    obj = load("running.yaml")
    obj["status"].pop("conditions")
    assert kstatus.flux_health(obj, **flux_exprs())["status"] == "InProgress"
    # No status at all: the expressions cannot be evaluated; Flux reports the error and waits.
    assert kstatus.flux_health(load("no-status.yaml"), **flux_exprs())["status"] == "Error"


@pytest.mark.parametrize("warm, starting, stuck, expected", [
    (0, 3, False, "InProgress"),   # filling: Reconciling=True (without it kstatus said Current at 0 of 3)
    (3, 0, False, "Current"),
    (0, 0, True, "Failed"),        # its pods cannot run: Stalled=True
])
def test_kstatus_of_a_pool_as_the_operator_writes_it(warm, starting, stuck, expected):
    ref = pool_spec.PoolRef(name="warm", namespace="team", uid="u")
    spec = pool_spec.parse_pool_spec({"size": 3, "task": {"files": {"e.py": "x"}}})
    found = pool_census.PoolCensus(tuple(f"w{i}" for i in range(warm)), tuple(f"s{i}" for i in range(starting)),
                                   ("p",) if stuck else (), (("p", v.PoolReason.IMAGE, "no"),) if stuck else (), ())
    pool = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool",
            "metadata": {"name": "warm", "namespace": "team", "generation": 2},
            "spec": {"size": 3}, "status": pool_census.pool_status(ref, spec, found, 2, 0, "2026-12-04T00:00:00Z")}
    assert kstatus.compute(pool)["status"] == expected
