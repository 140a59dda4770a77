"""The real install path: `kubectl apply -k manifests/default` runs the
operator as a pod under its own ServiceAccount, with in-cluster config.

The project's image (ghcr.io/rolloutbatch/rolloutbatch) is built from this checkout's Dockerfile
by `make images` and loaded into every node, so the pod runs exactly what is tested here. The test pauses the session's operator (two
operators must not share a cluster), runs a batch that calls the model example's endpoint by
Service name (declared egress + DNS found under the operator's own rights), and scrapes the
operator's metrics through its Service from another pod, as Prometheus would.
"""
from __future__ import annotations

import time

import pytest
import yaml

from tests.support.batches import apply, wait_finished, wait_gone
from tests.support.kube import simple_pod, unique_name, wait_pod_finished
from tests.support.operator import ROOT, kubectl

pytestmark = [pytest.mark.cluster]

NS = "rolloutbatch-system"
SELECTOR = "app.kubernetes.io/name=rolloutbatch,app.kubernetes.io/component=operator"
SCRAPE = '''
import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
print(opener.open(sys.argv[1], timeout=10).read().decode())
'''


def pod_names() -> list[str]:
    return kubectl("get", "pods", "-n", NS, "-l", SELECTOR, "-o", "name").stdout.split()


@pytest.fixture
def installed(solo_operator):
    kubectl("apply", "-k", str(ROOT / "manifests" / "default"))
    try:
        kubectl("rollout", "status", "deployment/rolloutbatch-operator", "-n", NS, "--timeout=120s", timeout=150)
        yield
    finally:
        # The operator only; the CRD (and every batch of the session) stays.
        kubectl("delete", "deployment,service", "-n", NS, "-l", SELECTOR, "--wait=true", timeout=120, check=False)
        deadline = time.monotonic() + 60
        while pod_names() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not pod_names(), "the operator pod outlived its Deployment"


def test_operator_runs_as_a_pod_from_the_install_manifests(installed, policy_server, namespace, core, kube_namespace):
    pod = kubectl("get", "pods", "-n", NS, "-l", SELECTOR, "-o", "yaml").stdout
    pod = yaml.safe_load(pod)["items"][0]
    assert pod["spec"]["serviceAccountName"] == "rolloutbatch-operator"
    assert pod["spec"]["containers"][0]["image"].startswith("ghcr.io/rolloutbatch/rolloutbatch:")

    batch = yaml.safe_load((ROOT / "examples" / "shipping-fix-model.yaml").read_text())
    apply(batch, namespace)
    body = wait_finished(batch["metadata"]["name"], namespace, timeout=240)
    assert body["status"]["phase"] == "Succeeded", body["status"]
    assert body["status"]["succeededEpisodes"] == batch["spec"]["episodes"]
    log = kubectl("logs", "-n", NS, pod["metadata"]["name"]).stdout
    assert "Cluster DNS answers outside pods" in log      # read under the operator's own Role
    assert batch["metadata"]["name"] in log                # this pod did the work

    name = unique_name("scrape")
    url = f"http://rolloutbatch-operator-metrics.{NS}.svc.cluster.local:8080/metrics"
    core.create_namespaced_pod(kube_namespace, simple_pod(name, SCRAPE, containers=[
        {"name": "main", "image": "python:3.12-alpine", "command": ["python", "-c", SCRAPE, url]}]))
    assert wait_pod_finished(core, name, kube_namespace).status.phase == "Succeeded"
    metrics = core.read_namespaced_pod_log(name, kube_namespace)
    series = f'rolloutbatch_episodes_total{{namespace="{namespace}",result="succeeded"}} '
    assert f'{series}{float(batch["spec"]["episodes"])}' in metrics, metrics[-2000:]

    # Its cleanup too, under its own rights: the finalizer removes the sandbox, nothing refused.
    kubectl("delete", "rolloutbatch", batch["metadata"]["name"], "-n", namespace, "--wait=false")
    wait_gone("rolloutbatch", batch["metadata"]["name"], namespace, timeout=120)
    assert not kubectl("get", "namespace", body["status"]["sandboxNamespace"], "--ignore-not-found",
                       "-o", "name").stdout.strip()
    log = kubectl("logs", "-n", NS, pod["metadata"]["name"]).stdout
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]
