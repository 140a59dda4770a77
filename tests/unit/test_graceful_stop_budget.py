"""A leader's graceful stop fits in the Deployment's terminationGracePeriodSeconds, so it releases
the Lease before the kubelet's SIGKILL and the standby takes over at once, not after the lease
duration. The steps' bounds are core.leadership's (one definition), checked here against the knobs
that enforce them and against the grace period of manifests/manager and of the chart."""
from __future__ import annotations

import inspect
import pathlib
import re

import kopf
import pytest
import yaml

import rolloutbatch.handlers  # noqa: F401  (registers the daemons)
from rolloutbatch.core import leadership as L
from rolloutbatch.service.leadership import operate

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _manifest_grace() -> int:
    docs = yaml.safe_load_all((ROOT / "manifests" / "manager" / "deployment.yaml").read_text())
    (deployment,) = [d for d in docs if d and d.get("kind") == "Deployment"]
    return deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]


def _chart_grace() -> int:
    text = (ROOT / "charts" / "rolloutbatch" / "templates" / "deployment.yaml").read_text()
    (grace,) = re.findall(r"^\s*terminationGracePeriodSeconds:\s*(\d+)\s*$", text, re.M)
    return int(grace)


def test_the_steps_bounds_are_the_ones_the_code_runs_with():
    daemons = [h for h in kopf.get_default_registry()._spawning.get_all_handlers()
               if hasattr(h, "cancellation_timeout")]
    assert len(daemons) >= 2 and {h.cancellation_timeout for h in daemons} == {L.DAEMON_CANCELLATION}
    # kopf stops its watchers' workers alongside the daemons: within the same time
    assert kopf.OperatorSettings().queueing.exit_timeout <= L.DAEMON_CANCELLATION
    assert inspect.signature(operate).parameters["settle_timeout"].default == L.API_DRAIN


@pytest.mark.parametrize("where, grace", [("manifests/manager", _manifest_grace), ("chart", _chart_grace)])
def test_a_graceful_stop_fits_in_the_termination_grace_period(where, grace):
    """Before, kopf's stop (10 s for its daemons, 5 s for the tasks left), the 30 s drain of API
    calls, the election threads joined one renew deadline each (2 x 10 s) and the release's request
    (5 s) added up to 70 s, past the 60 s grace: the pod could be killed before it released."""
    assert L.stop_seconds(L.Timing()) < grace(), where
