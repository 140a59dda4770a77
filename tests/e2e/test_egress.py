"""Declared egress on real pod networking (issue 15): a batch reaches exactly what it declares.

A stand-in model endpoint and a decoy run as pods in another namespace; episodes try both (and
the apiserver's Service) and report what they reached. kube-router enforces the batch's policy.
"""
from __future__ import annotations

import json

import pytest

from tests.devcluster.test_devcluster_network import server_pod, start_servers
from tests.support.batches import apply, episode_batch, results, unique, wait_finished

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
