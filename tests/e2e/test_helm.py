"""The Helm chart on the devcluster: `helm install` runs batches, `helm upgrade` keeps them going,
and the namespaced install (watchNamespaces) works under Roles alone.

As in test_install.py, the chart's image (ghcr.io/rolloutbatch/rolloutbatch) is the one built
from this checkout's Dockerfile and loaded into the nodes, and the session's operator is paused
meanwhile (it does not take part in the chart's leader election). The objects other tests applied with `kubectl apply -k manifests/default` are
adopted (`--take-ownership`); the CRD is already there, and Helm leaves an existing one alone.
`helm uninstall` removes the operator and its RBAC, never the CRD or the batches.
"""
from __future__ import annotations

import time

import pytest
import yaml

from rolloutbatch.core.naming import short_uid
from tests.support.batches import apply, episode_batch, results, unique, wait_finished, wait_status
from tests.support.operator import CHART, can_i, helm, kubectl, rollout

pytestmark = [pytest.mark.cluster]

NS = "rolloutbatch-system"
RELEASE = "rolloutbatch"
SELECTOR = "app.kubernetes.io/name=rolloutbatch,app.kubernetes.io/component=operator"
# Slow enough that an upgrade lands while episodes run: 4 episodes, 2 at a time, ~15 s each.
SLOW_EPISODE = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); time.sleep(15); emit("reward", reward=1)
'''
EPISODE = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); emit("reward", reward=1)
'''


def operator_pods() -> list[dict]:
    return yaml.safe_load(kubectl("get", "pods", "-n", NS, "-l", SELECTOR, "-o", "yaml").stdout)["items"]


def live_operator_pods() -> list[dict]:
    """Those not on their way out (a rolling update's old pods linger through their grace period)."""
    return [p for p in operator_pods() if not p["metadata"].get("deletionTimestamp")]


def operator_log() -> str:
    return "".join(kubectl("logs", "-n", NS, p["metadata"]["name"], check=False).stdout for p in operator_pods())


def install(*values: str) -> None:
    kubectl("create", "namespace", NS, check=False)   # the chart's release lives there: not the chart's own
    # (no --wait: the rollout's own wait replaces a pod the devcluster left unreachable, once)
    helm("upgrade", "--install", RELEASE, str(CHART), "--namespace", NS, "--take-ownership", *values, timeout=240)
    rollout(NS, "rolloutbatch-operator", SELECTOR)


@pytest.fixture
def uninstall(solo_operator):
    yield
    helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "120s", check=False, timeout=180)
    deadline = time.monotonic() + 60
    while operator_pods() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not operator_pods(), "the operator pod outlived its release"


def test_helm_install_runs_a_batch_and_an_upgrade_keeps_it_running(uninstall, namespace):
    install()
    name = unique("helm")
    apply(episode_batch(name, SLOW_EPISODE, episodes=4, parallelism=2), namespace)
    wait_status(name, namespace, lambda st: st.get("phase") == "Running" and (st.get("runningEpisodes") or 0) > 0,
                timeout=120)
    before = {p["metadata"]["uid"] for p in operator_pods()}

    # A changed value: a rolling update replaces both replicas and the new leader takes the batch over.
    helm("upgrade", RELEASE, str(CHART), "--namespace", NS, "--reuse-values", "--set", "logLevel=debug",
         "--set", "resources.limits.memory=640Mi", timeout=240)
    rollout(NS, "rolloutbatch-operator", SELECTOR)
    pods = live_operator_pods()
    assert len(before) == 2 and len(pods) == 2 and not {p["metadata"]["uid"] for p in pods} & before
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert "--verbose" in container["args"] and container["resources"]["limits"]["memory"] == "640Mi"
    assert "2" in helm("history", RELEASE, "--namespace", NS).stdout

    body = wait_finished(name, namespace, timeout=300)
    status = body["status"]
    assert status["phase"] == "Succeeded", status
    assert status["succeededEpisodes"] == 4 and status.get("failedEpisodes", 0) == 0, status
    # every episode counted once, across the two operators
    assert sorted(row["index"] for row in results(name, namespace)["pods"]) == [0, 1, 2, 3]
    log = operator_log()
    assert name in log and "Forbidden" not in log, log[-3000:]


@pytest.fixture
def namespaced(uninstall, namespace):
    # The cluster-wide bindings other tests applied would lend this ServiceAccount their rights.
    kubectl("delete", "clusterrolebinding", "rolloutbatch-operator", "rolloutbatch-operator-secrets",
            "--ignore-not-found")
    install("--set", f"watchNamespaces={{{namespace}}}")
    return namespace


def test_the_namespaced_install_has_no_cluster_wide_rights(namespaced):
    other = "default"
    for verb, resource, where in [("create", "namespaces", []), ("delete", "namespaces", []),
                                  ("list", "configmaps", ["--all-namespaces"]), ("get", "configmaps", ["-n", other]),
                                  ("get", "pods", ["--subresource=log", "-n", other]),
                                  ("list", "pods", ["--all-namespaces"]), ("create", "jobs.batch", ["-n", other]),
                                  ("get", "secrets", ["-n", other]),
                                  ("list", "customresourcedefinitions.apiextensions.k8s.io", []),
                                  ("list", "nodes", []), ("create", "pods", ["-n", namespaced])]:
        assert not can_i(verb, resource, *where), (verb, resource, where)
    for verb, resource, where in [("get", "pods", ["--subresource=log"]), ("create", "jobs.batch", []),
                                  ("watch", "rolloutbatches.rl.agentruntime.io", []),
                                  ("patch", "rolloutbatches.rl.agentruntime.io", ["--subresource=status"]),
                                  ("create", "configmaps", []), ("get", "secrets", [])]:
        assert can_i(verb, resource, *where, "-n", namespaced), (verb, resource)
    assert not kubectl("get", "clusterrolebindings", "-o", "name", "-l", "app.kubernetes.io/name=rolloutbatch"
                       ).stdout.strip()


def test_the_namespaced_install_runs_shared_batches_and_refuses_dedicated_ones(namespaced):
    shared = unique("helm-shared")
    apply(episode_batch(shared, EPISODE, episodes=3, isolation={"namespace": "Shared"}), namespaced)
    body = wait_finished(shared, namespaced, timeout=240)
    assert body["status"]["phase"] == "Succeeded" and body["status"]["succeededEpisodes"] == 3, body["status"]

    dedicated = unique("helm-dedicated")
    apply(episode_batch(dedicated, EPISODE, episodes=2), namespaced)   # Dedicated is the default
    body = wait_finished(dedicated, namespaced, timeout=120)
    status = body["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "ClusterRightsRequired"), status
    assert "Shared" in status["message"] and not status.get("sandboxNamespace")
    sandbox = f"namespace/rb-{short_uid(body['metadata']['uid'])}"
    assert sandbox not in kubectl("get", "namespaces", "-o", "name").stdout.split()

    kubectl("delete", "rolloutbatch", shared, dedicated, "-n", namespaced, "--timeout=60s", timeout=70)
    log = operator_log()
    assert "without cluster-wide rights" in log and "Forbidden" not in log, log[-3000:]
