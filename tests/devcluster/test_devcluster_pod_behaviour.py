"""Kubelet behaviour the operator relies on, checked on the devcluster's real nodes: deadlines,
image and configuration errors (and their retry), volumes/env/users, restarts with previous
logs, graceful deletion, and status conditions written by others surviving the kubelet's writes.
"""
from __future__ import annotations

import time

import pytest
from kubernetes.client.rest import ApiException

from tests.support.kube import simple_pod, wait_for, wait_pod_finished

pytestmark = pytest.mark.cluster


def _pod(core, ns, name):
    return core.read_namespaced_pod(name, ns)


def _waiting_reason(core, ns, name):
    st = _pod(core, ns, name).status.container_statuses
    return st and st[0].state.waiting and st[0].state.waiting.reason


def test_active_deadline_fails_the_pod(core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, simple_pod("dl", "import time; time.sleep(300)",
                                                          activeDeadlineSeconds=2))
    pod = wait_pod_finished(core, "dl", kube_namespace, timeout=60)
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "DeadlineExceeded"
    assert "deadline" in pod.status.message
    # The kubelet writes the phase first and the killed container's state in a later status update
    # (seen under load: Failed/DeadlineExceeded with the container still running): the container ends.
    wait_for(lambda: _pod(core, kube_namespace, "dl").status.container_statuses[0].state.terminated, timeout=60,
             what="the deadline's container terminated")


def test_unknown_image_waits_with_err_image_pull(core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "img"},
                                                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}})
    assert wait_for(lambda: _waiting_reason(core, kube_namespace, "img") == "ErrImagePull", timeout=60)
    pod = _pod(core, kube_namespace, "img")
    assert pod.status.phase == "Pending"
    assert "nginx:1.27" in pod.status.container_statuses[0].state.waiting.message
    core.delete_namespaced_pod("img", kube_namespace)
    wait_for(lambda: _gone(core, kube_namespace, "img"), timeout=60, what="pod img deleted")


def _gone(core, ns, name):
    try:
        _pod(core, ns, name)
    except ApiException as e:
        return e.status == 404
    return False


def test_missing_configmap_is_retried_until_it_exists(core, kube_namespace):
    body = simple_pod("cfg", "import os; print(os.environ['X'])")
    body["spec"]["containers"][0]["env"] = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "x"}}}]
    core.create_namespaced_pod(kube_namespace, body)
    assert wait_for(lambda: _waiting_reason(core, kube_namespace, "cfg") == "CreateContainerConfigError", timeout=60)
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "late"}, "data": {"x": "arrived"}})
    pod = wait_pod_finished(core, "cfg", kube_namespace, timeout=90)
    assert pod.status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("cfg", kube_namespace).strip() == "arrived"


def test_volumes_env_and_run_as_user(core, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "cm"}, "data": {"greeting": "hi"}})
    core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "sec"}, "string_data": {"token": "t0k"}})
    script = """
import os, json
sa = '/var/run/secrets/kubernetes.io/serviceaccount'
open('/scratch/w', 'w').write('x')
print(json.dumps({
  'uid': os.getuid(), 'gid': os.getgid(), 'groups': sorted(os.getgroups()),
  'cm': open('/cfg/greeting').read(), 'sec': open('/sec/t').read(),
  'ns': open('/dw/ns').read(), 'token': len(open(sa + '/token').read()) > 100,
  'ca': open(sa + '/ca.crt').read().startswith('-----BEGIN'),
  'env': [os.environ[k] for k in ('POD', 'NODE', 'FROMCM', 'S_token', 'MSG')],
  'cwd': os.getcwd(),
}))
"""
    body = simple_pod("vol", script, securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
                      volumes=[{"name": "c", "configMap": {"name": "cm", "defaultMode": 0o400}},
                               {"name": "s", "secret": {"secretName": "sec", "items": [{"key": "token", "path": "t"}]}},
                               {"name": "d", "downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                               {"name": "e", "emptyDir": {}}])
    c = body["spec"]["containers"][0]
    c["workingDir"] = "/scratch"
    c["volumeMounts"] = [{"name": "c", "mountPath": "/cfg"}, {"name": "s", "mountPath": "/sec"},
                         {"name": "d", "mountPath": "/dw"}, {"name": "e", "mountPath": "/scratch"}]
    c["env"] = [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "FROMCM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "greeting"}}},
                {"name": "MSG", "value": "$(POD)-says-$(FROMCM)"}]
    c["envFrom"] = [{"secretRef": {"name": "sec"}, "prefix": "S_"}]
    core.create_namespaced_pod(kube_namespace, body)
    pod = wait_pod_finished(core, "vol", kube_namespace, timeout=90)
    log = core.read_namespaced_pod_log("vol", kube_namespace)
    assert pod.status.phase == "Succeeded", log
    import json
    out = json.loads(log.strip().splitlines()[-1])
    assert out["uid"] == 1000 and out["gid"] == 3000 and 2000 in out["groups"]
    assert out["cm"] == "hi" and out["sec"] == "t0k" and out["ns"] == kube_namespace
    assert out["token"] and out["ca"]
    assert out["env"] == ["vol", pod.spec.node_name, "hi", "t0k", "vol-says-hi"]
    assert out["cwd"] == "/scratch"


def test_on_failure_restarts_count_and_previous_logs(core, kube_namespace):
    """The third attempt lingers, so the previous instance's log is read while the pod runs:
    once a pod has finished, kubelet's container GC may already have removed that instance.
    A running container may not have printed yet (Python starting on a loaded node), so its
    own log is polled, within the 20 s it lingers."""
    script = ("import os, sys, time\np = '/state/n'\nn = int(open(p).read()) if os.path.exists(p) else 0\n"
              "open(p, 'w').write(str(n + 1))\nprint('attempt', n, flush=True)\n"
              "time.sleep(20 if n >= 2 else 0)\n"
              "sys.exit(0 if n >= 2 else 1)")
    body = simple_pod("retry", script, restartPolicy="OnFailure", volumes=[{"name": "s", "emptyDir": {}}])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "s", "mountPath": "/state"}]
    core.create_namespaced_pod(kube_namespace, body)
    deadline = time.monotonic() + 90
    while True:
        pod = core.read_namespaced_pod("retry", kube_namespace)
        cs = (pod.status.container_statuses or [None])[0]
        if cs is not None and cs.restart_count == 2 and cs.state.running:
            break
        assert time.monotonic() < deadline, pod.status
        time.sleep(0.3)
    assert cs.last_state.terminated.exit_code == 1
    wait_for(lambda: core.read_namespaced_pod_log("retry", kube_namespace).strip() == "attempt 2",
             timeout=15, interval=0.3, what="the running attempt's log")
    assert core.read_namespaced_pod_log("retry", kube_namespace, previous=True).strip() == "attempt 1"
    pod = wait_pod_finished(core, "retry", kube_namespace, timeout=60)
    assert pod.status.phase == "Succeeded"
    assert pod.status.container_statuses[0].restart_count == 2


def test_graceful_deletion_waits_for_the_grace_period(core, kube_namespace):
    script = ("import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: print('TERM', flush=True))\n"
              "print('up', flush=True)\ntime.sleep(600)")
    core.create_namespaced_pod(kube_namespace, simple_pod("stubborn", script, terminationGracePeriodSeconds=3))
    wait_for(lambda: _pod(core, kube_namespace, "stubborn").status.phase == "Running", timeout=60)
    wait_for(lambda: "up" in core.read_namespaced_pod_log("stubborn", kube_namespace), timeout=30)
    t0 = time.monotonic()
    core.delete_namespaced_pod("stubborn", kube_namespace)
    wait_for(lambda: _gone(core, kube_namespace, "stubborn"), timeout=60, interval=0.2, what="pod gone")
    took = time.monotonic() - t0
    assert 2.5 <= took < 20, took


def test_conditions_written_by_others_survive(core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, simple_pod("cond", "import time; time.sleep(3)"))
    wait_for(lambda: _pod(core, kube_namespace, "cond").status.phase == "Running", timeout=60)
    # (a lastTransitionTime, or the disruption controller resets the condition as stale at once)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_namespaced_pod_status("cond", kube_namespace, {"status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "Test", "message": "kept",
         "lastTransitionTime": now}]}})
    pod = wait_pod_finished(core, "cond", kube_namespace, timeout=60)
    types = {c.type: c for c in pod.status.conditions}
    assert pod.status.phase == "Succeeded"
    assert types["DisruptionTarget"].reason == "Test"
    assert "PodScheduled" in types and types["Ready"].status == "False"


# Holds as many sleeping processes as it can, up to GOAL (past the node's podPidsLimit, well under
# this machine's kernel.pid_max of 32768), prints the count, then keeps them until it is deleted.
FORK_BOMB = r'''
import os, subprocess, time
GOAL, held, error = 3000, 0, ""
try:
    while held < GOAL:
        subprocess.Popen(["sleep", "600"])
        held += 1
except OSError as exc:
    error = repr(exc)
print("held", held, error, flush=True)
open("/tmp/done", "w").write(str(held))
time.sleep(600)
'''


def test_a_fork_bomb_is_capped_at_the_pods_pid_limit_and_a_neighbour_still_starts(core, kube_namespace):
    from devcluster.nodeconfig import POD_PIDS_LIMIT
    bomb = simple_pod("bomb", FORK_BOMB, terminationGracePeriodSeconds=1)
    bomb["spec"]["containers"][0].update(resources={"limits": {"memory": "512Mi"}},
                                         readinessProbe={"exec": {"command": ["cat", "/tmp/done"]}, "periodSeconds": 1})
    core.create_namespaced_pod(kube_namespace, bomb)
    wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in _pod(core, kube_namespace, "bomb").status.conditions or []),
             timeout=120, what="the bomb holds all the processes it could get")
    log = core.read_namespaced_pod_log("bomb", kube_namespace, container="main")
    held = int(log.split()[1])
    # the pod's python, its probe's process and a few kept by the runtime share the limit
    assert POD_PIDS_LIMIT - 16 <= held < POD_PIDS_LIMIT, log
    # while it holds them, a neighbour on the same node still starts and forks
    node = _pod(core, kube_namespace, "bomb").spec.node_name
    core.create_namespaced_pod(kube_namespace, simple_pod(
        "neighbour", "import subprocess; print(subprocess.run(['echo', 'forked'], capture_output=True, text=True).stdout)",
        nodeName=node))
    pod = wait_pod_finished(core, "neighbour", kube_namespace, timeout=120)
    assert pod.status.phase == "Succeeded"
    assert "forked" in core.read_namespaced_pod_log("neighbour", kube_namespace)
    core.delete_namespaced_pod("bomb", kube_namespace, grace_period_seconds=0)
