"""Declared egress on real pod networking: a batch reaches exactly what it declares.

A stand-in model endpoint (a pod behind a Service) and a decoy run in another namespace. The
episodes of three batches, one per network mode and all at once, try the model by pod IP and by
Service name, the decoy, cluster DNS, the apiserver (its Service) and their node, and count who
knocks on their own listener while a test pod from another namespace tries each of them.
kube-router enforces the batches' policies. Another episode's pod is out of reach on both
ends: its egress is the decoy's case, its ingress the listener's.

What the operator tells about the declared peers: a peer that selects no pod when the batch
starts is a Warning Event and part of the Running message (the batch runs on); an ipBlock
holding a ClusterIP, which a policy never matches, stalls the batch before anything exists.
"""
from __future__ import annotations

import json
import time

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.model import BatchRef
from tests.devcluster.test_devcluster_network import probe, server_pod, start_servers
from tests.support.batches import (apply, condition, episode_batch, get, results, unique, wait_finished, wait_gone,
                                   wait_status)
from tests.support.kube import wait_for
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

LINGER = 60   # seconds an episode keeps its listener open for the ingress knock (3 batches start, a probe pod runs)

PROBE = r'''
import json, os, socket, threading, time, urllib.request
knocks = []
def listen():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 8081))
    srv.listen(16)
    while True:
        conn, addr = srv.accept()
        knocks.append(addr[0])
        conn.close()
threading.Thread(target=listen, daemon=True).start()
time.sleep(0.2)
socket.create_connection(("127.0.0.1", 8081), timeout=3).close()  # the listener counts: it counts this
def http(url):
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=3) as r:
            return r.status == 200
    except Exception:
        return False
def tcp(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return True
    except Exception:
        return False
def dns(name):
    try:
        return bool(socket.getaddrinfo(name, 80))
    except Exception:
        return False
seen = {"MODEL": http(os.environ["MODEL"]), "MODEL_DNS": http(os.environ["MODEL_DNS"]),
        "DECOY": http(os.environ["DECOY"]), "DNS": dns("kubernetes.default.svc.cluster.local"),
        "API": tcp(os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]),
        "NODE": any(tcp(*n.split(":")) for n in os.environ["NODES"].split(","))}
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
time.sleep(float(os.environ["LINGER"]))
emit("reward", reward=1, seen=seen, knocks=knocks)
'''

MODES = {"egress": "declared egress to the model", "DenyAll": "the default", "AllowEgress": "open egress"}
EXPECTED = {
    "egress": {"MODEL": True, "MODEL_DNS": True, "DECOY": False, "DNS": True, "API": False, "NODE": False},
    "DenyAll": {"MODEL": False, "MODEL_DNS": False, "DECOY": False, "DNS": False, "API": False, "NODE": False},
    "AllowEgress": {"MODEL": True, "MODEL_DNS": True, "DECOY": True, "DNS": True, "API": True, "NODE": True},
}


def model_service(core, namespace: str) -> str:
    core.create_namespaced_service(namespace, {
        "metadata": {"name": "model"},
        "spec": {"selector": {"role": "model"}, "ports": [{"port": 8080, "targetPort": 8080}]}})
    return f"http://model.{namespace}.svc.cluster.local:8080/"


def node_addresses(core) -> list[str]:
    """host:port of every node's agent (its kubelet endpoint), the node an episode may run on."""
    out = []
    for n in core.list_node().items:
        ip = next(a.address for a in n.status.addresses if a.type == "InternalIP")
        out.append(f"{ip}:{n.status.daemon_endpoints.kubelet_endpoint.port}")
    return out


def test_declared_egress_opens_exactly_the_model_endpoint(operator_process, namespace, core, kube_namespace):
    node = core.list_node().items[0]
    servers = start_servers(core, kube_namespace, [server_pod("model", node.metadata.name, {"role": "model"}),
                                                   server_pod("decoy", node.metadata.name, {"role": "decoy"})])
    model, decoy = servers["model"].status.pod_ip, servers["decoy"].status.pod_ip
    model_dns = model_service(core, kube_namespace)
    # The control: from an unrestricted pod, the model answers by name (the Service works).
    assert probe(core, kube_namespace, [f"http=model.{kube_namespace}.svc.cluster.local:8080"]) != {}
    rule = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": kube_namespace}},
                    "podSelector": {"matchLabels": {"role": "model"}}}],
            "ports": [{"protocol": "TCP", "port": 8080}]}
    env = [{"name": "MODEL", "value": f"http://{model}:8080/"}, {"name": "MODEL_DNS", "value": model_dns},
           {"name": "DECOY", "value": f"http://{decoy}:8080/"}, {"name": "LINGER", "value": str(LINGER)},
           {"name": "NODES", "value": ",".join(node_addresses(core))}]
    names = {}
    for mode in MODES:
        isolation = {"egress": [rule]} if mode == "egress" else {"network": mode}
        names[mode] = unique(f"net-{mode.lower()}")
        apply(episode_batch(names[mode], PROBE, episodes=2, env=env, isolation=isolation), namespace)

    def episode_ips():
        ips = {}
        for mode, name in names.items():
            body = get(name, namespace) or {}
            st = body.get("status") or {}
            if not st.get("jobName"):
                return None
            pods = core.list_namespaced_pod(st.get("sandboxNamespace", namespace),
                                            label_selector=f"job-name={st['jobName']}").items
            running = [p.status.pod_ip for p in pods if p.status.phase == "Running" and p.status.pod_ip]
            if len(running) < 2:
                return None
            ips[mode] = running
        return ips
    ips = wait_for(episode_ips, timeout=120, what="every episode listening")
    # Ingress: a pod from another namespace knocks on every episode while they listen.
    knocked = probe(core, kube_namespace, [f"http={ip}:8081" for addrs in ips.values() for ip in addrs])
    assert all(v.startswith("error") for v in knocked.values()), knocked
    assert episode_ips() == ips, "an episode stopped listening before the knock was over (raise LINGER)"

    for mode, name in names.items():
        wait_finished(name, namespace, timeout=180, operator=operator_process)
        rows = results(name, namespace)["pods"]
        assert [r["extra"]["seen"] for r in rows] == [EXPECTED[mode]] * 2, (mode, MODES[mode])
        assert [r["extra"]["knocks"] for r in rows] == [["127.0.0.1"]] * 2, f"{mode}: ingress reached an episode"


# -- the policy holds until the last pod is gone -------------------------------------------------

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
    # The decoy counts what reaches it (the control: an unrestricted pod gets through; tried up to
    # five times, a second apart, as a path that must work on a machine loaded by other tests).
    assert probe(core, kube_namespace, [f"http={ip}:8080"], attempts=5)[f"http={ip}:8080"].startswith("ok")
    control = set(_hits(core, "decoy", kube_namespace))
    assert control

    name = unique("stubborn")
    apply(episode_batch(name, STUBBORN, episodes=2, episodeTimeoutSeconds=300,
                        env=[{"name": "DECOY", "value": f"http://{ip}:8080/"}],
                        isolation={"namespace": sandbox}), namespace)
    # jobName is named from Provisioning on, sandboxNamespace only once the sandbox is begun
    # (docs/design.md §5.7): a status of the first kind would send the test to the wrong namespace.
    body = wait_for(lambda: (b := get(name, namespace)) and (st := b.get("status") or {}).get("jobName")
                    and st.get("sandboxNamespace") and b, timeout=60, what="the batch's sandbox and Job")
    sandbox_ns, job = body["status"]["sandboxNamespace"], body["status"]["jobName"]
    pods = lambda: core.list_namespaced_pod(sandbox_ns, label_selector=f"job-name={job}").items  # noqa: E731

    def knocking():
        found = [p for p in pods() if p.status.phase == "Running" and p.status.pod_ip]
        return len(found) == 2 and all(
            "blocked" in (core.read_namespaced_pod_log(p.metadata.name, sandbox_ns) or "") for p in found) and found
    running = wait_for(knocking, timeout=240, what="both episodes knocking on the decoy")
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


# -- what the cluster can tell about the declared peers -------------------------------------------

QUIET = r'''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
time.sleep(float(os.environ["LINGER"]))
emit("reward", reward=1)
'''


def test_a_peer_that_selects_no_pod_is_a_visible_warning_not_a_failure(operator_process, namespace, core, kube_namespace):
    node = core.list_node().items[0].metadata.name
    start_servers(core, kube_namespace, [server_pod("model", node, {"role": "model"})])
    here = {"matchLabels": {"kubernetes.io/metadata.name": kube_namespace}}
    rule = {"to": [{"namespaceSelector": here, "podSelector": {"matchLabels": {"role": "model"}}},    # the server
                   {"namespaceSelector": here, "podSelector": {"matchLabels": {"role": "modle"}}},    # a typo
                   {"podSelector": {"matchLabels": {"role": "model"}}},                               # the sandbox's
                   {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "no-such-ns"}}}],
            "ports": [{"protocol": "TCP", "port": 8080}]}
    name = unique("egress-empty")
    apply(episode_batch(name, QUIET, episodes=1, env=[{"name": "LINGER", "value": "8"}],
                      isolation={"egress": [rule]}), namespace)
    body = wait_status(name, namespace, lambda st: st.get("phase") == "Running", timeout=90, operator=operator_process)
    message = body["status"]["message"]
    assert message.startswith("Episodes are running; warning: declared egress selects no pod at the start"), message
    assert "egress[0].to[0]" not in message
    assert f"egress[0].to[1]: podSelector role=modle matches no running pod in namespace {kube_namespace}" in message
    assert f"egress[0].to[2]: a podSelector without a namespaceSelector selects pods of the episodes' own namespace, " \
           f"the sandbox {body['status']['sandboxNamespace']}" in message
    assert "egress[0].to[3]: namespaceSelector kubernetes.io/metadata.name=no-such-ns matches no namespace" in message
    assert condition(body, "Reconciling")["message"] == message
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json", "--field-selector",
                                f"involvedObject.name={name},reason=EgressPeerSelectsNothing").stdout)["items"]
    assert [(e["type"], e["message"] in message) for e in events] == [("Warning", True)], events
    assert "EgressPeerSelectsNothing" in kubectl("describe", "rolloutbatch", name, "-n", namespace).stdout
    final = wait_finished(name, namespace, timeout=120, operator=operator_process)
    assert final["status"]["phase"] == "Succeeded", final["status"]     # a warning, never a failure


def test_an_ip_block_of_cluster_ips_is_refused_before_anything_is_created(operator_process, namespace, core):
    cluster_ip = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    cidrs = [c for item in json.loads(kubectl("get", "servicecidrs", "-o", "json").stdout)["items"]
             for c in item["spec"]["cidrs"]]
    name = unique("egress-clusterip")
    apply(episode_batch(name, QUIET, episodes=1, env=[{"name": "LINGER", "value": "0"}], isolation={"egress": [
        {"to": [{"ipBlock": {"cidr": f"{cluster_ip}/32"}}], "ports": [{"protocol": "TCP", "port": 443}]}]}), namespace)
    body = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(body, "Stalled")
    assert stalled["reason"] == "InvalidSpec", body["status"]
    assert stalled["message"].startswith(f"spec.isolation.egress[0].to[0].ipBlock: {cluster_ip}/32 lies inside the "
                                         f"cluster's Service CIDR {cidrs[0]}"), stalled["message"]
    assert "ipBlocks match pod IPs after a Service's DNAT" in stalled["message"]
    assert "podSelector/namespaceSelector" in stalled["message"]
    assert "sandboxNamespace" not in body["status"] and "jobUID" not in body["status"]
    sandbox = naming.sandbox_namespace(BatchRef(namespace, name, body["metadata"]["uid"]))
    assert get(sandbox, "", kind="namespace") is None
    assert not json.loads(kubectl("get", "jobs,networkpolicies", "-n", namespace, "-o", "json").stdout)["items"]
