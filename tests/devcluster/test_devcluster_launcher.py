"""The launcher's own promises: `up` on a running cluster is a quick no-op, `status` is green."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from devcluster.cluster import KUBELET_PREFIX
from tests.support.kube import DEFAULT_KUBECONFIG, ROOT, kubeconfig_path

# exclusive: `up` on a cluster that answers slowly under load takes it down as stale
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]


@pytest.fixture(autouse=True)
def _own_devcluster(kube_api):
    if kubeconfig_path().resolve() != DEFAULT_KUBECONFIG.resolve():
        pytest.skip("KUBECONFIG points at another cluster; launcher checks apply to .devcluster only")


def cluster_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devcluster.cluster", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_up_is_idempotent_and_prints_export():
    t0 = time.monotonic()
    out = cluster_cli("up")
    assert out.returncode == 0, out.stderr
    assert "already up" in out.stderr
    assert out.stdout.strip() == f"export KUBECONFIG={DEFAULT_KUBECONFIG}"
    assert time.monotonic() - t0 < 10


def test_status_reports_every_component_healthy():
    out = cluster_cli("status")
    assert out.returncode == 0, out.stdout + out.stderr
    node = KUBELET_PREFIX + "devnode-1"
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", node):
        assert any(line.startswith(component) and line.endswith("healthy")
                   for line in out.stdout.splitlines()), out.stdout


def test_unknown_component_is_an_error():
    out = cluster_cli("restart", "no-such-component")
    assert out.returncode == 1
    assert "unknown component" in out.stderr
