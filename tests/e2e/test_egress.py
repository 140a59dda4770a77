"""Declared egress on real pod networking (issue 15): a batch reaches exactly what it declares.

A stand-in model endpoint and a decoy run as pods in another namespace; episodes try both (and
the apiserver's Service) and report what they reached. kube-router enforces the batch's policy.
"""
from __future__ import annotations

import time

import pytest

from tests.devcluster.test_devcluster_network import probe, server_pod, start_servers
from tests.support.batches import apply, episode_batch, get, results, unique, wait_finished, wait_gone
from tests.support.kube import wait_for
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

PROBE = r'''
import json, os, time, urllib.request
def reach(url):
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=3) as r:
            return r.status == 200
    except Exception:
        return False
seen = {k: reach(os.environ[k]) for k in ("MODEL", "DECOY")}
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
emit("reward", reward=1 if seen["MODEL"] and not seen["DECOY"] else 0, seen=seen)
'''


def run(namespace, operator, model_ip, decoy_ip, **isolation):
    name = unique("egress")
    env = [{"name": "MODEL", "value": f"http://{model_ip}:8080/"}, {"name": "DECOY", "value": f"http://{decoy_ip}:8080/"}]
    apply(episode_batch(name, PROBE, episodes=2, minSuccessfulEpisodes=0, env=env, isolation=isolation), namespace)
    wait_finished(name, namespace, timeout=180, operator=operator)
    return [r["extra"]["seen"] for r in results(name, namespace)["pods"]]


def test_declared_egress_opens_exactly_the_model_endpoint(operator_process, namespace, core, kube_namespace):
    node = core.list_node().items[0].metadata.name
    servers = start_servers(core, kube_namespace, [server_pod("model", node, {"role": "model"}),
                                                   server_pod("decoy", node, {"role": "decoy"})])
    model, decoy = servers["model"].status.pod_ip, servers["decoy"].status.pod_ip
    rule = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": kube_namespace}},
                    "podSelector": {"matchLabels": {"role": "model"}}}],
            "ports": [{"protocol": "TCP", "port": 8080}]}
    assert run(namespace, operator_process, model, decoy, egress=[rule]) == [{"MODEL": True, "DECOY": False}] * 2
    # DenyAll reaches nothing; AllowEgress reaches both (the denials above are the policy's doing).
    assert run(namespace, operator_process, model, decoy) == [{"MODEL": False, "DECOY": False}] * 2
    assert run(namespace, operator_process, model, decoy, network="AllowEgress") == [{"MODEL": True, "DECOY": True}] * 2


# -- item 5: the policy holds until the last pod is gone ------------------------------------------

DECOY = r'''
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print("hit", self.client_address[0], flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
print("serving", flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
'''

# Shared mode is where the order is ours alone: with the per-batch policy deleted before the Job,
# this test sees the decoy reached (tried by reordering core.children.deletion_plan). In
# Dedicated mode this cluster's namespace deletion already removes pods before other objects
# (ordered namespace deletion, Kubernetes 1.33+); the Job-first order keeps older clusters safe.
# Ignores SIGTERM and keeps knocking until SIGKILL: what a hostile episode does when its batch
# is deleted. Its grace period (the Job template's) is the window a namespace-first deletion
# would leave open.
STUBBORN = r'''
import json, os, signal, time, urllib.request
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(json.dumps(dict(event="ready", at=time.time(), episode_id=os.environ["EPISODE_ID"])), flush=True)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
while True:
    try:
        opener.open(os.environ["DECOY"], timeout=0.5).read()
        print("through", flush=True)
    except Exception:
        print("blocked", flush=True)
    time.sleep(0.1)
'''


def _hits(core, name: str, namespace: str) -> list[str]:
    log = core.read_namespaced_pod_log(name, namespace) or ""
    return [line.split()[1] for line in log.splitlines() if line.startswith("hit ")]


@pytest.mark.parametrize("sandbox", ["Dedicated", "Shared"])
def test_deleting_a_running_batch_never_opens_its_pods_network(operator_process, namespace, core, kube_namespace, sandbox):

    node = core.list_node().items[0].metadata.name
    decoy = server_pod("decoy", node, {"role": "decoy"})
    decoy["spec"]["containers"][0]["command"] = ["python", "-c", DECOY]
    ip = start_servers(core, kube_namespace, [decoy])["decoy"].status.pod_ip
    # The decoy counts what reaches it (the control: an unrestricted pod gets through).
    assert probe(core, kube_namespace, [f"http={ip}:8080"])[f"http={ip}:8080"].startswith("ok")
    control = set(_hits(core, "decoy", kube_namespace))
    assert control

    name = unique("stubborn")
    apply(episode_batch(name, STUBBORN, episodes=2, episodeTimeoutSeconds=300,
                        env=[{"name": "DECOY", "value": f"http://{ip}:8080/"}],
                        isolation={"namespace": sandbox}), namespace)
    body = wait_for(lambda: (b := get(name, namespace)) and (b.get("status") or {}).get("jobName") and b,
                    timeout=60, what="the batch's Job")
    sandbox_ns, job = body["status"].get("sandboxNamespace", namespace), body["status"]["jobName"]
    pods = lambda: core.list_namespaced_pod(sandbox_ns, label_selector=f"job-name={job}").items  # noqa: E731

    def knocking():
        found = [p for p in pods() if p.status.phase == "Running" and p.status.pod_ip]
        return len(found) == 2 and all(
            "blocked" in (core.read_namespaced_pod_log(p.metadata.name, sandbox_ns) or "") for p in found) and found
    running = wait_for(knocking, timeout=120, what="both episodes knocking on the decoy")
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=false")
    t0 = time.monotonic()
    survived = 0.0
    while pods():   # SIGTERM ignored: they live out their grace period, the policy must hold
        survived = time.monotonic() - t0
        time.sleep(0.2)
    wait_gone("rolloutbatch", name, namespace, timeout=120)
    assert survived >= 3.0, f"episode pods were gone {survived:.1f}s after the delete: the window was not tested"
    episode_ips = {p.status.pod_ip for p in running}
    assert not episode_ips & set(_hits(core, "decoy", kube_namespace)), "a deleted batch's episode reached the decoy"
