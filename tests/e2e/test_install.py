"""The real install path: `kubectl apply -k manifests/default` runs the
operator as a pod under its own ServiceAccount, with in-cluster config.

The project's image (ghcr.io/rolloutbatch/rolloutbatch) is built from this checkout's Dockerfile
by `make images` and loaded into every node, so the pod runs exactly what is tested here. The
test pauses the session's operator (it would hold the leader-election Lease), installs the two
replicas, finds the leader by the Lease, runs a batch that calls the model example's endpoint by
Service name (declared egress + DNS found under the operator's own rights), and scrapes each
replica from another pod, as Prometheus does through the Service's endpoints: the leader counted
the episodes, the standby says it is one on /readyz and counted nothing.
"""
from __future__ import annotations

import time

import pytest
import yaml

from tests.support.batches import apply, failure_text, results, wait_finished, wait_gone
from tests.support.kube import simple_pod, unique_name, wait_pod_finished
from tests.support.operator import ROOT, kubectl, rollout

pytestmark = [pytest.mark.cluster]

NS = "rolloutbatch-system"
SELECTOR = "app.kubernetes.io/name=rolloutbatch,app.kubernetes.io/component=operator"
# Each URL tried for up to a minute: a pod just started may not be in the network policy's sets
# on every node yet (a connection refused or timed out then is the network's, not the operator's)
SCRAPE = '''
import sys, time, urllib.error, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for url in sys.argv[1:]:
    end = time.monotonic() + 60
    while True:
        try:
            body = opener.open(url, timeout=10).read().decode()
            break
        except urllib.error.HTTPError as exc:
            body = exc.read().decode()
            break
        except OSError as exc:
            print("retrying " + url + ": " + str(exc), flush=True)
            if time.monotonic() > end:
                raise
            time.sleep(1)
    print("=== " + url)
    print(body)
'''


def lease_holders(pods: list[dict]) -> dict[str, str]:
    """Each replica's view of its role, from its log (a failover mid-batch shows here)."""
    return {p["metadata"]["name"]: "\n".join(line for line in kubectl("logs", "-n", NS, p["metadata"]["name"],
                                                                     check=False).stdout.splitlines()
                                             if "leader:" in line)[-1500:] for p in pods}


def pod_names() -> list[str]:
    return kubectl("get", "pods", "-n", NS, "-l", SELECTOR, "-o", "name").stdout.split()


@pytest.fixture
def installed(solo_operator):
    kubectl("apply", "-k", str(ROOT / "manifests" / "default"))
    try:
        rollout(NS, "rolloutbatch-operator", SELECTOR)
        yield
    finally:
        # The operator only; the CRD (and every batch of the session) stays.
        kubectl("delete", "deployment,service,poddisruptionbudget", "-n", NS, "-l", SELECTOR, "--wait=true",
                timeout=120, check=False)
        deadline = time.monotonic() + 60
        while pod_names() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not pod_names(), "the operator pod outlived its Deployment"


def test_operator_runs_as_a_pod_from_the_install_manifests(installed, policy_server, namespace, core, kube_namespace):
    pods = yaml.safe_load(kubectl("get", "pods", "-n", NS, "-l", SELECTOR, "-o", "yaml").stdout)["items"]
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    holder = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        holder = kubectl("get", "lease", "rolloutbatch-operator", "-n", NS, "--ignore-not-found",
                         "-o", "jsonpath={.spec.holderIdentity}").stdout
        if holder.rsplit("_", 1)[0] in {p["metadata"]["name"] for p in pods}:
            break
        time.sleep(0.5)
    (pod,) = [p for p in pods if p["metadata"]["name"] == holder.rsplit("_", 1)[0]]
    (standby,) = [p for p in pods if p is not pod]
    assert pod["spec"]["serviceAccountName"] == "rolloutbatch-operator"
    assert pod["spec"]["containers"][0]["image"].startswith("ghcr.io/rolloutbatch/rolloutbatch:")

    batch = yaml.safe_load((ROOT / "examples" / "shipping-fix-model.yaml").read_text())
    apply(batch, namespace)
    body = wait_finished(batch["metadata"]["name"], namespace, timeout=240)
    # on failure, the rows that did not succeed and who held the lease: what a flake needs to be read
    failed = [row for row in results(batch["metadata"]["name"], namespace)["pods"] if row["outcome"] != "succeeded"]
    assert body["status"]["phase"] == "Succeeded", failure_text(failed=failed, leases=lease_holders(pods),
                                                                status=body["status"])
    assert body["status"]["succeededEpisodes"] == batch["spec"]["episodes"]
    log = kubectl("logs", "-n", NS, pod["metadata"]["name"]).stdout
    assert "Cluster DNS answers outside pods" in log      # read under the operator's own Role
    assert batch["metadata"]["name"] in log                # this pod did the work

    name = unique_name("scrape")
    urls = [f"http://{p['status']['podIP']}:{port}/{path}" for p in (pod, standby)
            for port, path in ((8080, "metrics"), (8081, "readyz"))]
    core.create_namespaced_pod(kube_namespace, simple_pod(name, SCRAPE, containers=[
        {"name": "main", "image": "python:3.12-alpine", "command": ["python", "-c", SCRAPE, *urls]}]))
    assert wait_pod_finished(core, name, kube_namespace).status.phase == "Succeeded"
    out = core.read_namespaced_pod_log(name, kube_namespace)
    leader_metrics, leader_ready, standby_metrics, standby_ready = (
        part.split("\n", 1)[1] for part in out.split("=== ")[1:])
    series = f'rolloutbatch_episodes_total{{namespace="{namespace}",result="succeeded"}} '
    assert f'{series}{float(batch["spec"]["episodes"])}' in leader_metrics, leader_metrics[-2000:]
    assert "rolloutbatch_leader 1.0" in leader_metrics and "rolloutbatch_leader 0.0" in standby_metrics
    assert series not in standby_metrics                    # the standby counted nothing
    assert '"role": "leader"' in leader_ready and '"role": "standby"' in standby_ready, (leader_ready, standby_ready)
    assert batch["metadata"]["name"] not in kubectl("logs", "-n", NS, standby["metadata"]["name"]).stdout

    # Its cleanup too, under its own rights: the finalizer removes the sandbox, nothing refused.
    kubectl("delete", "rolloutbatch", batch["metadata"]["name"], "-n", namespace, "--wait=false")
    wait_gone("rolloutbatch", batch["metadata"]["name"], namespace, timeout=120)
    assert not kubectl("get", "namespace", body["status"]["sandboxNamespace"], "--ignore-not-found",
                       "-o", "name").stdout.strip()
    log = kubectl("logs", "-n", NS, pod["metadata"]["name"]).stdout
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]
