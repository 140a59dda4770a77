"""Pods really run on the devcluster's nodes: Jobs complete, logs read back through the API
(pods/log -> apiserver -> kubelet's /containerLogs), exit codes are reported, capacity is
respected and the sandbox keeps pods away from host files and the network.
"""
from __future__ import annotations

import json
import os
import pathlib
import urllib.parse
import uuid

import pytest

from tests.support.kube import ROOT, simple_pod, unique_name, wait_for, wait_pod_finished

pytestmark = pytest.mark.cluster

IMAGE = "python:3.12-alpine"


def expected_nodes() -> int:
    state = ROOT / ".devcluster" / "state.json"
    try:
        return len(json.loads(state.read_text())["nodes"])
    except (OSError, ValueError, KeyError):
        return int(os.environ.get("DEVCLUSTER_NODES", "2"))


def test_nodes_ready_and_schedulable(core):
    want = expected_nodes()
    assert want >= 2, "the devcluster should run at least two nodes (DEVCLUSTER_NODES)"
    nodes = [n for n in core.list_node().items if n.metadata.name.startswith("devnode-")]
    assert len(nodes) == want, [n.metadata.name for n in nodes]
    for node in nodes:
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready.get("Ready") == "True", (node.metadata.name, ready)
        assert not node.spec.unschedulable
        assert not [t for t in (node.spec.taints or []) if t.effect in ("NoSchedule", "NoExecute")], node.spec.taints
        assert int(node.status.allocatable["pods"]) > 0
        assert any(a.type == "InternalIP" for a in node.status.addresses)


def test_job_of_ten_completes_and_every_log_reads_back(batch, core, kube_namespace):
    name = unique_name("ten")
    script = ("import json, os, socket; "
              "print(json.dumps({'episode': os.environ.get('JOB_COMPLETION_INDEX'), 'ok': True}))")
    batch.create_namespaced_job(kube_namespace, {
        "metadata": {"name": name},
        "spec": {
            "completions": 10, "parallelism": 10, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": IMAGE, "command": ["python", "-c", script]}]}},
        },
    })

    def complete():
        job = batch.read_namespaced_job(name, kube_namespace)
        conds = {c.type: c.status for c in (job.status.conditions or [])}
        assert conds.get("Failed") != "True", job.status
        return job if conds.get("Complete") == "True" else None

    job = wait_for(complete, timeout=180, interval=1, what=f"job {name} Complete")
    assert job.status.succeeded == 10
    pods = core.list_namespaced_pod(kube_namespace, label_selector=f"job-name={name}").items
    assert len(pods) == 10
    seen = set()
    for pod in pods:
        assert pod.status.phase == "Succeeded"
        assert pod.spec.node_name and pod.spec.node_name.startswith("devnode-")
        text = core.read_namespaced_pod_log(pod.metadata.name, kube_namespace, container="main")
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines, f"empty log for {pod.metadata.name}"
        record = json.loads(lines[-1])
        assert record["ok"] is True
        seen.add(record["episode"])
    assert seen == {str(i) for i in range(10)}


def test_exit_code_one_ends_failed(core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, simple_pod("fails", "import sys; print('bye'); sys.exit(1)"))
    pod = wait_pod_finished(core, "fails", kube_namespace, timeout=90)
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 1
    assert "bye" in core.read_namespaced_pod_log("fails", kube_namespace)


def test_deleting_a_running_pod_finishes(core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, simple_pod("sleeper", "import time; time.sleep(3600)"))
    wait_for(lambda: core.read_namespaced_pod("sleeper", kube_namespace).status.phase == "Running",
             timeout=90, what="sleeper Running")
    core.delete_namespaced_pod("sleeper", kube_namespace)

    def gone():
        return not [p for p in core.list_namespaced_pod(kube_namespace).items if p.metadata.name == "sleeper"]

    wait_for(gone, timeout=60, what="sleeper deleted (its kubelet finalised it)")


def test_pods_stay_pending_when_nodes_are_full(core, kube_namespace):
    pod = simple_pod("too-big", "print('never')")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100000", "memory": "1Mi"}}
    core.create_namespaced_pod(kube_namespace, pod)

    def unschedulable():
        p = core.read_namespaced_pod("too-big", kube_namespace)
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c
        return None

    cond = wait_for(unschedulable, timeout=60, what="PodScheduled=False/Unschedulable")
    assert "Insufficient cpu" in cond.message, cond.message
    assert core.read_namespaced_pod("too-big", kube_namespace).status.phase == "Pending"


def test_sandbox_hides_host_files_and_network(kube_api, core, kube_namespace):
    """A pod sees neither a fresh host file nor the cluster's keys, and cannot reach the API
    server on the host's loopback (own network namespace)."""
    secret = pathlib.Path(f"/tmp/hostsecret-{uuid.uuid4().hex}")
    secret.write_text("host secret\n")
    admin_key = ROOT / ".devcluster" / "pki" / "admin.key"
    port = urllib.parse.urlsplit(kube_api.configuration.host).port
    script = f"""
import json, socket
out = {{}}
for label, path in (("secret", {str(secret)!r}), ("admin_key", {str(admin_key)!r})):
    try:
        with open(path) as f:
            out[label] = f.read()[:40]
    except Exception as e:
        out[label] = None
        out[label + "_error"] = type(e).__name__
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", {port}))
    out["connected"] = True
except Exception as e:
    out["connected"] = False
    out["connect_error"] = type(e).__name__
print(json.dumps(out))
"""
    try:
        core.create_namespaced_pod(kube_namespace, simple_pod("probe", script))
        pod = wait_pod_finished(core, "probe", kube_namespace, timeout=90)
        log = core.read_namespaced_pod_log("probe", kube_namespace)
        assert pod.status.phase == "Succeeded", log
        result = json.loads([line for line in log.splitlines() if line.strip()][-1])
        assert result["secret"] is None, result
        assert result["admin_key"] is None, result
        assert result["connected"] is False, result
    finally:
        secret.unlink(missing_ok=True)
