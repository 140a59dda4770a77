"""Termination messages and init containers on the devcluster's real nodes.

terminationMessagePath/Policy as a kubelet applies them (the operator judges episodes from
state.terminated.message), and init containers that run in order, each to its end, before the
containers start, with nothing of an init container left running once its main process exits.
"""
from __future__ import annotations

import pytest

from tests.support.kube import simple_pod, wait_pod_finished

pytestmark = pytest.mark.cluster


def _two_pods(core, ns):
    write = ("import sys; open('/dev/termination-log', 'w').write('{\"event\": \"done\"}\\n'); "
             "print('to stdout'); sys.exit(0)")
    core.create_namespaced_pod(ns, simple_pod("file", write))
    fail = "import sys\nfor i in range(100): print('line', i)\nsys.exit(3)"
    body = simple_pod("fallback", fail)
    body["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    core.create_namespaced_pod(ns, body)
    big = "open('/tmp/m', 'w').write('x' * 6000 + 'END')"
    body = simple_pod("custom", big)
    body["spec"]["containers"][0]["terminationMessagePath"] = "/tmp/m"
    core.create_namespaced_pod(ns, body)
    plain = simple_pod("file-fail", "import sys; print('only stdout'); sys.exit(1)")
    core.create_namespaced_pod(ns, plain)


def test_termination_messages(core, kube_namespace):
    _two_pods(core, kube_namespace)
    msg = {}
    for name in ("file", "fallback", "custom", "file-fail"):
        pod = wait_pod_finished(core, name, kube_namespace, timeout=90)
        msg[name] = pod.status.container_statuses[0].state.terminated.message or ""
    assert msg["file"] == '{"event": "done"}\n'                      # the file, not stdout
    lines = msg["fallback"].splitlines()
    assert lines[0] == "line 20" and lines[-1] == "line 99" and len(lines) == 80   # last 80 lines
    assert len(msg["custom"]) == 4096 and msg["custom"].endswith("END")   # the end of an oversize file
    assert msg["file-fail"] == ""                                     # File policy: never the log


def test_init_containers_run_in_order_and_leave_nothing_running(core, kube_namespace):
    # The first init container leaves a detached process that would write into the shared
    # volume a second later; the next phases must never see that write.
    first = ("import os, time\n"
             "if os.fork() == 0:\n    os.setsid(); time.sleep(1.5); open('/shared/late', 'w').write('x'); os._exit(0)\n"
             "open('/shared/order', 'a').write('first ')\n"
             "open('/dev/termination-log', 'w').write('first done')\n")
    second = "import time, os; time.sleep(2.5); open('/shared/order', 'a').write('second ')\nprint(os.path.exists('/shared/late'))"
    main = "import os; print(open('/shared/order').read() + 'main', os.path.exists('/shared/late'))"
    vol = [{"name": "shared", "mountPath": "/shared"}]
    body = simple_pod("phases", main, volumes=[{"name": "shared", "emptyDir": {}}])
    body["spec"]["containers"][0]["volumeMounts"] = vol
    body["spec"]["initContainers"] = [
        {"name": "first", "image": "python:3.12-alpine", "command": ["python", "-c", first], "volumeMounts": vol},
        {"name": "second", "image": "python:3.12-alpine", "command": ["python", "-c", second], "volumeMounts": vol},
    ]
    core.create_namespaced_pod(kube_namespace, body)
    pod = wait_pod_finished(core, "phases", kube_namespace, timeout=90)
    assert pod.status.phase == "Succeeded"
    inits = {s.name: s for s in pod.status.init_container_statuses}
    assert inits["first"].state.terminated.message == "first done"
    assert inits["first"].state.terminated.finished_at <= inits["second"].state.terminated.started_at
    assert core.read_namespaced_pod_log("phases", kube_namespace, container="second").strip() == "False"
    assert core.read_namespaced_pod_log("phases", kube_namespace).strip() == "first second main False"
