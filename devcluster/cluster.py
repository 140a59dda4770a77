"""Launch, stop and inspect the devcluster: a real Kubernetes control plane on this machine.

    python -m devcluster.cluster up [--nodes N]     start everything (no-op when already up;
                                                    with etcd+apiserver alive it only starts
                                                    the missing components)
    python -m devcluster.cluster down               stop everything, wipe cluster data
    python -m devcluster.cluster status             one line per component
    python -m devcluster.cluster restart COMPONENT  stop + start one component (chaos tests)
    python -m devcluster.cluster stop COMPONENT     stop one component (e.g. a node's kubelet)

Components, each its own OS process in its own session (process group), started in this order:
`etcd`, `kube-apiserver`, `kube-controller-manager`, `kube-scheduler`, `coredns`, `kueue`
(Kueue's controller with its CRDs, webhooks and one queue: kueue.py), then one
`kubelet-devnode-<i>` (a real node: containerd + kubelet, realnode.py) and `kube-proxy-devnode-<i>`
per node, and once the nodes are registered one `kube-router-devnode-<i>` (NetworkPolicy) per node;
the last three run in the node's network namespace (network.py sets those up before etcd starts
and removes them at `down`). The Kubernetes parts are subcommands of the `localkube` multi-call
binary (devcluster/localkube, built by `make localkube`; kube-router is its `kube-router-netpol`,
upstream's policy controller compiled against the same Kubernetes libraries; the kubelet is its
`kubelet`); containerd, runc and gVisor are built by `make runtime` and the images by `make
images` (docs/real-node.md). One process per component because
running them in one process trips upstream's one-signal-handler panic (k8s.io/apiserver's
SetupSignalHandler) and the logging re-apply check (k8s.io/component-base/logs).

State lives in `.devcluster/` at the repository root (derived from this file's location):

    pki/                  CA, apiserver, admin, service-account and kubelet-serving keys (pki.py)
    kubeconfig            admin kubeconfig (O=system:masters), the only identity anyone uses
    state.json            ports, node names and capacity of the running cluster
    logs/<component>.log  stdout+stderr of every component
    pids/<component>.pid  process ids (each is also its process-group id)
    etcd/                 etcd data
    nodes/<node>/         each real node's containerd and kubelet state (realnode.py)
    images/               the images every node imports at start (images.py)

Every `up` after a `down` is a FRESH cluster: `down` wipes etcd data and node directories, so tests
never see objects left by an earlier run. The PKI is kept (regenerating it is cheap but would
invalidate kubeconfigs other processes still hold). Ports are chosen free at `up` and recorded in
state.json; `restart` reuses them so clients' kubeconfigs stay valid.

Tunables (environment):
    DEVCLUSTER_NODES              number of nodes (default 2; `--nodes` wins)
    DEVCLUSTER_NODE_PODS          pods per node (kubelet's maxPods, default 250); CPU and memory
                                  are the machine's, as each kubelet reads them
    DEVCLUSTER_NODE_MONITOR_GRACE KCM --node-monitor-grace-period (default 20s: node-loss tests
                                  stay quick; upstream's default is 50s since 1.32, see the
                                  kube-controller-manager reference)
    DEVCLUSTER_LOCALKUBE          path of the localkube binary (default .devcluster/bin/localkube)
    DEVCLUSTER_UP_TIMEOUT         seconds to wait for the whole cluster (default 180)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from devcluster import kueue, network, nodeconfig, realnode, realnode_files
from devcluster.pki import Pki, ensure_pki

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".devcluster"
PKI_DIR = STATE / "pki"
LOGS = STATE / "logs"
PIDS = STATE / "pids"
ETCD_DATA = STATE / "etcd"
NODES_DIR = STATE / "nodes"
KUBECONFIG = STATE / "kubeconfig"
STATE_FILE = STATE / "state.json"
SCHED_CONFIG = STATE / "kube-scheduler.yaml"
NODE_KUBECONFIG = STATE / "kubeconfig-nodes"   # same identity, the apiserver as nodes see it
COREFILE = STATE / "Corefile"
NETWORK_FILE = STATE / "network.json"          # outlives state.json until the network is gone
BIN = STATE / "bin"

#: Marker put in every component's environment: `down` finds stray descendants (shims a node's
#: containerd started in their own session) by it, even after their parent died.
MARKER_ENV = "DEVCLUSTER_STATE"

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
KUBELET_PREFIX = "kubelet-"    # a real node: containerd + kubelet (realnode.py)
#: Per-node network components, each in its node's network namespace.
PROXY_PREFIX = "kube-proxy-"
ROUTER_PREFIX = "kube-router-"
PER_NODE_PREFIXES = (KUBELET_PREFIX, PROXY_PREFIX, ROUTER_PREFIX)
KUBELET_HEALTHZ_PORT = 10248
RUNTIME_BIN = STATE / "bin" / "runtime"
IMAGES_DIR = STATE / "images"
KUEUE_DIR = STATE / "bin" / "kueue"           # `make kueue`: the binary, its CRDs and webhooks
KUEUE_CONFIG = STATE / "kueue.yaml"
KUBE_PROXY_HEALTH_PORT = 10256
KUBE_ROUTER_HEALTH_PORT = 20244

#: KCM controllers we run. Explicit rather than `*` to spare CPU on a 2-core machine; the list is
#: what Jobs, garbage collection, namespaces, node loss, service accounts, quotas and the
#: operator's own objects need (controller names as printed by `kube-controller-manager --help`).
KCM_CONTROLLERS = (
    "job-controller",
    "cronjob-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "resourcequota-controller",
    "ttl-after-finished-controller",
    "clusterrole-aggregation-controller",
    "replicaset-controller",
    "deployment-controller",
    "endpointslice-controller",   # Services: kube-proxy and CoreDNS read EndpointSlices
    "disruption-controller",
)

#: Admission plugins passed explicitly (upstream's defaults, `kube-apiserver --help`) so the
#: behaviour the tests rely on does not hinge on a default list: PodSecurity (PSA labels),
#: ResourceQuota, RuntimeClass (pod overhead), ServiceAccount (token volume), DefaultTolerationSeconds
#: (300s tolerations for not-ready/unreachable), TaintNodesByCondition (not-ready taint on new nodes).
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
)

#: Taints KCM's node-lifecycle controller manages from the Ready condition.
NODE_LIFECYCLE_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}

RUNTIME_CLASS = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": nodeconfig.HANDLER_CUBE},
    "handler": nodeconfig.HANDLER_CUBE,
    "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
}
#: Plain runc beside it (what pods without a runtimeClassName get on real nodes too).
RUNC_RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                      "metadata": {"name": nodeconfig.HANDLER_RUNC}, "handler": nodeconfig.HANDLER_RUNC}


class ClusterError(RuntimeError):
    """A component did not come up (message includes its log tail)."""


# --------------------------------------------------------------------------------------------
# small utilities


def log(msg: str) -> None:
    print(f"[devcluster] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.25,
               on_timeout: Callable[[], str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - "not yet" for any probe error
            pass
        if time.monotonic() > deadline:
            extra = on_timeout() if on_timeout else ""
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


def log_tail(component: str, lines: int = 30) -> str:
    path = LOGS / f"{component}.log"
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"\n--- {path}: missing"
    body = "\n".join(text[-lines:])
    return f"\n--- last {lines} lines of {path}:\n{body}"


def localkube() -> Path:
    path = Path(os.environ.get("DEVCLUSTER_LOCALKUBE", STATE / "bin" / "localkube"))
    if not path.is_file():
        raise ClusterError(f"{path} is missing: build it with `make localkube`")
    return path


# --------------------------------------------------------------------------------------------
# processes


def _proc_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie (our children get reparented; init reaps)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # state is the field after the parenthesised comm (which may contain spaces)
    state = stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3]
    return state not in (b"Z", b"X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _signature(component: str) -> str:
    """A word of the component's command line (guards against pid reuse)."""
    if component == "kueue":
        return str(KUEUE_DIR / "kueue")   # before and after devcluster.kueue execs it
    for prefix in PER_NODE_PREFIXES:
        if component.startswith(prefix):
            return component[len(prefix):]
    return component


def read_pid(component: str) -> int | None:
    try:
        pid = int((PIDS / f"{component}.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if _proc_alive(pid) and _signature(component) in _cmdline(pid):
        return pid
    return None


def spawn(component: str, argv: list[str], fresh_log: bool) -> int:
    """Start `argv` in its own session with output to logs/<component>.log; record the pid.

    start_new_session=True: the component survives this launcher's exit and gets its own
    process group, which `stop` signals as a whole.
    """
    LOGS.mkdir(parents=True, exist_ok=True)
    PIDS.mkdir(parents=True, exist_ok=True)
    logfile = open(LOGS / f"{component}.log", "w" if fresh_log else "a")
    logfile.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} started: {' '.join(argv)}\n")
    logfile.flush()
    env = dict(os.environ)
    env[MARKER_ENV] = str(STATE)
    env["KUBECONFIG"] = str(KUBECONFIG)
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    logfile.close()
    (PIDS / f"{component}.pid").write_text(f"{proc.pid}\n")
    # Never waited for: once this launcher exits, init adopts and reaps the component.
    return proc.pid


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _descendants(pid: int) -> set[int]:
    children = _children_map()
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _ancestors(pid: int) -> set[int]:
    chain = set()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            break
        pid = int(stat[stat.rindex(b")") + 2:].split()[1])
    return chain


def _marked_processes() -> set[int]:
    """Every live process whose environment carries our state-dir marker."""
    needle = f"{MARKER_ENV}={STATE}".encode()
    found = set()
    spared = _ancestors(os.getpid())  # never the launcher itself or whatever runs it
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and _proc_alive(int(entry)):
            found.add(int(entry))
    return found


def _kill_group_and_pids(pgid: int | None, pids: set[int], sig: int) -> None:
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), sig)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_grace(component: str) -> float:
    """Seconds between SIGTERM and SIGKILL. The apiserver stops listening at once but then
    waits for its clients' long-running watches to drain (observed >10s), and etcd for the
    apiserver's gRPC streams (~7s): nothing in a throwaway cluster is worth that wait. A
    node gets longer: it stops every container first."""
    if component.startswith(KUBELET_PREFIX):
        return 30.0   # kubelet, every container, containerd and its shims (realnode.power_off)
    return 5.0


def stop_component(component: str, grace: float | None = None) -> bool:
    """SIGTERM the component's process group (and any descendants that left it), wait up to
    `grace` seconds, then SIGKILL whatever is left. Returns True if something was running."""
    grace = stop_grace(component) if grace is None else grace
    pidfile = PIDS / f"{component}.pid"
    pid = read_pid(component)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    family = _descendants(pid)  # sandboxes may have their own sessions: remember them now
    _kill_group_and_pids(pid, set(), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (_proc_alive(pid) or any(map(_proc_alive, family))):
        time.sleep(0.1)
    leftovers = {p for p in family | {pid} if _proc_alive(p)}
    if leftovers:
        log(f"{component}: SIGKILL {sorted(leftovers)}")
        _kill_group_and_pids(pid, leftovers, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(map(_proc_alive, leftovers)):
            time.sleep(0.05)
    pidfile.unlink(missing_ok=True)
    return True


# --------------------------------------------------------------------------------------------
# configuration


@dataclass
class State:
    """What `up` decided; persisted in state.json so `restart` and `status` rebuild the same
    command lines (same ports, same nodes)."""

    etcd_port: int
    etcd_peer_port: int
    apiserver_port: int
    kcm_port: int
    scheduler_port: int
    nodes: dict[str, int]  # node name -> kubelet port
    node_pods: str
    node_monitor_grace: str
    network: dict | None = None   # network.Plan.to_json()
    dns_ready_port: int = 0
    kueue_webhook_port: int = 0
    kueue_health_port: int = 0

    def save(self) -> None:
        STATE_FILE.write_text(json.dumps(self.__dict__, indent=2) + "\n")

    @classmethod
    def load(cls) -> "State | None":
        try:
            return cls(**json.loads(STATE_FILE.read_text()))
        except (FileNotFoundError, TypeError, ValueError):
            return None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def plan(self) -> network.Plan:
        return network.Plan.from_json(self.network)

    def components(self) -> list[str]:
        out = list(CONTROL_PLANE) + ["coredns", "kueue"] + [KUBELET_PREFIX + n for n in self.nodes]
        out += [PROXY_PREFIX + n for n in self.nodes] + [ROUTER_PREFIX + n for n in self.nodes]
        return out


def new_state(nodes: int) -> State:
    taken: set[int] = set()

    def pick() -> int:
        while True:
            p = free_port()
            if p not in taken:
                taken.add(p)
                return p

    # Kubelets get free ports too, not 10250: several devclusters (one per checkout) may run on
    # one machine, and the apiserver finds each kubelet's port in its Node's
    # status.daemonEndpoints.kubeletEndpoint anyway.
    node_ports = {f"devnode-{i}": pick() for i in range(1, nodes + 1)}
    return State(
        etcd_port=pick(),
        etcd_peer_port=pick(),
        apiserver_port=pick(),
        kcm_port=pick(),
        scheduler_port=pick(),
        nodes=node_ports,
        node_pods=os.environ.get("DEVCLUSTER_NODE_PODS", "250"),
        node_monitor_grace=os.environ.get("DEVCLUSTER_NODE_MONITOR_GRACE", "20s"),
        network=network.new_plan(STATE, list(node_ports)).to_json(),
        dns_ready_port=pick(),
        kueue_webhook_port=pick(),
        kueue_health_port=pick(),
    )


def write_kubeconfig(pki: Pki, state: State, path: Path = KUBECONFIG, server: str | None = None) -> None:
    """Admin kubeconfig with embedded certificates (portable: no relative paths to resolve)."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {
            "server": server or state.server,
            "certificate-authority-data": b64(pki.ca_crt),
        }}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": b64(pki.admin_crt),
            "client-key-data": b64(pki.admin_key),
        }}],
        "contexts": [{"name": "devcluster", "context": {
            "cluster": "devcluster", "user": "admin", "namespace": "default"}}],
        "current-context": "devcluster",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")  # JSON is valid YAML
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def write_corefile(state: State) -> None:
    """Cluster DNS for cluster.local only: no `forward`, so no name leads outside the cluster."""
    plan = state.plan
    COREFILE.write_text(
        ".:53 {\n"
        f"    bind {plan.host_ip}\n"
        "    errors\n"
        f"    ready 127.0.0.1:{state.dns_ready_port}\n"
        "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n"
        f"        kubeconfig {KUBECONFIG}\n"
        "        pods insecure\n"
        "    }\n"
        "    cache 5\n"
        "}\n")


def write_scheduler_config() -> None:
    """The scheduler's client QPS/burst only exist in its config file (no flags): raise them so
    a 100-pod batch binds in about a second instead of being throttled at the default 50/100."""
    SCHED_CONFIG.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "clientConnection:\n"
        f"  kubeconfig: {KUBECONFIG}\n"
        "  qps: 200\n"
        "  burst: 400\n"
        "leaderElection:\n"
        "  leaderElect: false\n"
    )


def _restarting(component: str) -> list[str]:
    """Run the rest of the argv again a second after it exits, as a DaemonSet would: kube-proxy
    exits by design when its Node is deleted (node-loss tests do that). SIGTERM to the process
    group ends both the loop and the component."""
    return ["/bin/sh", "-c", 'while :; do "$@"; sleep 1; done', component]


def command(component: str, state: State, pki: Pki) -> list[str]:
    """The argv of one component (flags as each component's upstream reference documents them)."""
    lk = str(localkube())
    kc = str(KUBECONFIG)
    if component == "etcd":
        return [
            lk, "etcd",
            "--name=devcluster",
            f"--data-dir={ETCD_DATA}",
            f"--listen-client-urls=http://127.0.0.1:{state.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{state.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{state.etcd_peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{state.etcd_peer_port}",
            f"--initial-cluster=devcluster=http://127.0.0.1:{state.etcd_peer_port}",
            # test data is throwaway: skipping fsync makes every write ~10x cheaper (envtest)
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=4294967296",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=5m",
            "--log-level=warn",
        ]
    if component == "kube-apiserver":
        return [
            lk, "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{state.etcd_port}",
            "--bind-address=127.0.0.1",
            # the `kubernetes` Service's endpoint: our veth's address, DNATed to 127.0.0.1
            f"--advertise-address={state.plan.host_ip}",
            f"--secure-port={state.apiserver_port}",
            f"--tls-cert-file={pki.apiserver_crt}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_crt}",
            # published in kube-system/extension-apiserver-authentication; without it KCM and
            # the scheduler log "missing content for CA bundle ... requestheader" at start-up.
            # Only a cert with CN=front-proxy-client could use it, and we never issue one.
            f"--requestheader-client-ca-file={pki.ca_crt}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={state.plan.service_cidr}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # kubelets report their node netns address and a per-node port; Hostname would
            # not resolve, so logs must go to InternalIP
            "--kubelet-preferred-address-types=InternalIP",
            # pods can reach a node's address: its kubelet API (logs, exec) admits only client certs of our CA
            f"--kubelet-client-certificate={pki.admin_crt}",
            f"--kubelet-client-key={pki.admin_key}",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            # one client machine, bursty tests: no API priority & fairness, no inflight caps
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--profiling=false",
            "--v=1",
        ]
    if component == "kube-controller-manager":
        return [
            lk, "kube-controller-manager",
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={state.kcm_port}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            f"--controllers={','.join(KCM_CONTROLLERS)}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_crt}",
            "--node-monitor-period=2s",
            f"--node-monitor-grace-period={state.node_monitor_grace}",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--concurrent-job-syncs=20",
            "--concurrent-gc-syncs=40",
            "--v=1",
        ]
    if component == "kube-scheduler":
        return [
            lk, "kube-scheduler",
            f"--config={SCHED_CONFIG}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={state.scheduler_port}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--v=1",
        ]
    if component == "coredns":
        return [lk, "coredns", f"-conf={COREFILE}"]
    if component == "kueue":
        config = kueue.configuration(webhook_port=state.kueue_webhook_port, health_port=state.kueue_health_port,
                                     cert_dir=pki.webhook_dir)
        KUEUE_CONFIG.write_text(json.dumps(config, indent=2) + "\n")
        return ["unshare", "--mount", "--propagation", "private",
                sys.executable, "-m", "devcluster.kueue", f"--certs={pki.webhook_dir}", f"--scratch={STATE / 'kueue-etc'}",
                "--", str(KUEUE_DIR / "kueue"), f"--config={KUEUE_CONFIG}", f"--kubeconfig={kc}"]
    plan = state.plan
    if component.startswith(PROXY_PREFIX):
        node = component[len(PROXY_PREFIX):]
        return _restarting(component) + [
            "nsenter", f"--net={network.NETNS_DIR / plan.node_ns(node)}",
            lk, "kube-proxy",
            f"--kubeconfig={NODE_KUBECONFIG}",
            "--hostname-override", node,  # a separate argv word: read_pid() looks for it
            "--proxy-mode=iptables",
            f"--cluster-cidr={plan.cluster_cidr}",
            # conntrack sysctls are global (init netns only): leave them as they are, as kind does
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            f"--healthz-bind-address={plan.node_ip(node)}:{KUBE_PROXY_HEALTH_PORT}",
            "--metrics-bind-address=127.0.0.1:10249",
            f"--nodeport-addresses={plan.node_ip(node)}/32",
            "--v=1",
        ]
    if component.startswith(ROUTER_PREFIX):
        node = component[len(ROUTER_PREFIX):]
        return _restarting(component) + [
            "nsenter", f"--net={network.NETNS_DIR / plan.node_ns(node)}",
            # kube-router's policy controller alone, embedded in localkube (netpol.go there):
            # no routing, service proxy or BGP to switch off
            lk, "kube-router-netpol",
            f"--kubeconfig={NODE_KUBECONFIG}",
            "--hostname-override", node,  # a separate argv word: read_pid() looks for it
            f"--service-cluster-ip-range={plan.service_cidr}",
            f"--health-port={KUBE_ROUTER_HEALTH_PORT}",
            "--v=1",
        ]
    if component.startswith(KUBELET_PREFIX):
        node = component[len(KUBELET_PREFIX):]
        real = _real_node(node, state)
        realnode.sweep(real.paths.root, real.cgroup_root)   # a start after a SIGKILL: power-off first
        launch = realnode_files.write(real, state_node_kubeconfig=NODE_KUBECONFIG,
                                      localkube=Path(lk), pki=pki, runtime_bin=RUNTIME_BIN,
                                      cni_bin=BIN / "cni", images=sorted(IMAGES_DIR.glob("*.tar")),
                                      containerd_log=LOGS / f"containerd-{node}.log")
        return [
            "nsenter", f"--net={network.NETNS_DIR / plan.node_ns(node)}",
            "unshare", "--mount", "--propagation", "slave",
            sys.executable, "-m", "devcluster.realnode", str(launch),
            "--node", node,  # a separate argv word: read_pid() looks for it
        ]
    raise ClusterError(f"unknown component {component!r}")


# --------------------------------------------------------------------------------------------
# health probes


def _https_get(url: str, pki: Pki, verify: bool = True, timeout: float = 3.0) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt)) if verify else ssl._create_unverified_context()  # noqa: S323
    ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


#: our probes go straight to our own addresses, whatever *_proxy says
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(component: str, state: State, pki: Pki) -> bool:
    try:
        if component == "etcd":
            with urllib.request.urlopen(f"http://127.0.0.1:{state.etcd_port}/health", timeout=3) as r:
                return json.loads(r.read()).get("health") == "true"
        if component == "kube-apiserver":
            return _https_get(f"{state.server}/readyz", pki)[0] == 200
        if component == "kube-controller-manager":
            # KCM/scheduler serve self-signed certs from an in-memory CA: don't verify
            return _https_get(f"https://127.0.0.1:{state.kcm_port}/healthz", pki, verify=False)[0] == 200
        if component == "kube-scheduler":
            return _https_get(f"https://127.0.0.1:{state.scheduler_port}/healthz", pki, verify=False)[0] == 200
        if component.startswith(KUBELET_PREFIX):
            return node_ready(component[len(KUBELET_PREFIX):])
        if component == "coredns":
            with _NO_PROXY.open(f"http://127.0.0.1:{state.dns_ready_port}/ready", timeout=3) as r:
                return r.status == 200
        if component == "kueue":
            with _NO_PROXY.open(f"http://127.0.0.1:{state.kueue_health_port}/readyz", timeout=3) as r:
                return r.status == 200
        for prefix, port in ((PROXY_PREFIX, KUBE_PROXY_HEALTH_PORT), (ROUTER_PREFIX, KUBE_ROUTER_HEALTH_PORT)):
            if component.startswith(prefix):
                ip = state.plan.node_ip(component[len(prefix):])
                with _NO_PROXY.open(f"http://{ip}:{port}/healthz", timeout=3) as r:
                    return r.status == 200
    except (OSError, ValueError):
        return False
    return False


_API_CLIENT = None


def _api():
    """(kubernetes.client module, a shared ApiClient for the admin kubeconfig)."""
    global _API_CLIENT
    from kubernetes import client, config

    if _API_CLIENT is None:
        _API_CLIENT = config.new_client_from_config(config_file=str(KUBECONFIG))
    return client, _API_CLIENT


def node_ready(name: str) -> bool:
    """Ready=True and no not-ready taint: TaintNodesByCondition puts `not-ready:NoSchedule` on
    every new Node and only KCM's node-lifecycle controller removes it, so Ready alone does not
    mean pods can schedule (Kubernetes docs, "Taint Nodes by Condition"). Same for `unreachable`
    after a kubelet restart. A Node not found is not ready: a restarted kubelet registers it again
    (the lost-node chaos test deletes it, as a cloud provider does with a vanished VM)."""
    from kubernetes.client.rest import ApiException

    client, api = _api()
    try:
        node = client.CoreV1Api(api).read_node(name, _request_timeout=5)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    taints = {t.key for t in (node.spec.taints or [])}
    return ready and not taints & NODE_LIFECYCLE_TAINTS and not node.spec.unschedulable


def default_service_account_exists() -> bool:
    """ServiceAccount admission rejects pods until KCM created `default`."""
    client, api = _api()
    client.CoreV1Api(api).read_namespaced_service_account("default", "default", _request_timeout=5)
    return True


def ensure_kube_dns(plan: network.Plan) -> None:
    """Service kube-system/kube-dns at the cluster DNS address, its one endpoint CoreDNS on our
    veth's address (CoreDNS runs beside the apiserver, not as a pod: node chaos cannot stop it)."""
    from kubernetes.client.rest import ApiException

    client, api = _api()
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
    svc = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "kube-dns", "namespace": "kube-system",
                        "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
           "spec": {"clusterIP": plan.dns_ip, "ports": [dict(p, targetPort=53) for p in ports]}}
    eps = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": "kube-dns-devcluster", "namespace": "kube-system",
                        "labels": {"kubernetes.io/service-name": "kube-dns",
                                   "endpointslice.kubernetes.io/managed-by": "devcluster.rolloutbatch.io"}},
           "addressType": "IPv4", "ports": ports,
           "endpoints": [{"addresses": [plan.host_ip], "conditions": {"ready": True}}]}
    for create in (lambda: client.CoreV1Api(api).create_namespaced_service("kube-system", svc, _request_timeout=10),
                   lambda: client.DiscoveryV1Api(api).create_namespaced_endpoint_slice("kube-system", eps, _request_timeout=10)):
        try:
            create()
        except ApiException as e:
            if e.status != 409:
                raise


def kubectl_apply(objects: list[dict]) -> None:
    """Server-side apply of ``objects`` with localkube's kubectl (CRs included, which the typed
    client cannot create)."""
    text = "\n---\n".join(json.dumps(o) for o in objects)
    out = subprocess.run([str(localkube()), "kubectl", "apply", "--server-side", "--force-conflicts",
                          "--field-manager=devcluster", "-f", "-"],
                         input=text, text=True, capture_output=True, timeout=60,
                         env={**os.environ, "KUBECONFIG": str(KUBECONFIG)})
    if out.returncode:
        raise ClusterError(f"kubectl apply: {out.stderr.strip() or out.stdout.strip()}")


def ensure_kueue_crds() -> None:
    """Kueue's CRDs, Established before its controller starts watching them."""
    if not (KUEUE_DIR / "kueue").is_file():
        raise ClusterError(f"Kueue missing in {KUEUE_DIR}: build it with `make kueue`")
    crds = kueue.crds(p.read_text() for p in sorted((KUEUE_DIR / "crds").glob("*.yaml")))
    kubectl_apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kueue.NAMESPACE}}, *crds])
    names = [f"crd/{c['metadata']['name']}" for c in crds]
    out = subprocess.run([str(localkube()), "kubectl", "wait", "--for=condition=Established", "--timeout=60s", *names],
                         text=True, capture_output=True, timeout=90, env={**os.environ, "KUBECONFIG": str(KUBECONFIG)})
    if out.returncode:
        raise ClusterError(f"Kueue's CRDs not Established: {out.stderr.strip()}")


def ensure_kueue_objects(state: State, pki: Pki) -> None:
    """Once Kueue serves: its webhook configurations, then the devcluster's queue (its
    ClusterQueue goes through those webhooks)."""
    hooks = kueue.webhook_configurations((KUEUE_DIR / "webhooks.yaml").read_text(), port=state.kueue_webhook_port,
                                         ca_pem=pki.ca_crt.read_bytes())
    kubectl_apply(hooks)
    # the apiserver may need a moment to load a new webhook configuration (and Kueue its cert)
    wait_until(lambda: _try_apply(kueue.queue_objects()), 60, "Kueue's ResourceFlavor, ClusterQueue and LocalQueue", 1.0,
               on_timeout=lambda: log_tail("kueue"))


def _try_apply(objects: list[dict]) -> bool:
    try:
        kubectl_apply(objects)
    except ClusterError as e:
        log(f"retrying: {e}")
        return False
    return True


def ensure_runtime_class() -> None:
    """RuntimeClass `cube` with a pod overhead, as in the guide (the RuntimeClass admission
    plugin copies the overhead into every pod that names it), and `runc`."""
    from kubernetes.client.rest import ApiException

    client, api = _api()
    for runtime_class in (RUNTIME_CLASS, RUNC_RUNTIME_CLASS):
        try:
            client.NodeV1Api(api).create_runtime_class(runtime_class, _request_timeout=10)
        except ApiException as e:
            if e.status != 409:
                raise


# --------------------------------------------------------------------------------------------
# commands


def _start(component: str, state: State, pki: Pki, fresh_log: bool, timeout: float) -> None:
    t0 = time.monotonic()
    pid = spawn(component, command(component, state, pki), fresh_log)

    def check() -> bool:
        if not _proc_alive(pid):
            raise ClusterError(f"{component} exited during start-up{log_tail(component)}")
        return healthy(component, state, pki)

    deadline = time.monotonic() + timeout
    while True:
        if check():
            break
        if time.monotonic() > deadline:
            raise ClusterError(f"{component} not healthy after {timeout:.0f}s{log_tail(component)}")
        time.sleep(0.2)
    log(f"{component} up (pid {pid}, {time.monotonic() - t0:.1f}s)")


def _export_line() -> str:
    return f"export KUBECONFIG={KUBECONFIG}"


def is_up(state: State | None, pki: Pki) -> bool:
    if state is None:
        return False
    if any(read_pid(c) is None for c in state.components()):
        return False
    return healthy("kube-apiserver", state, pki)


def up(nodes: int) -> int:
    t0 = time.monotonic()
    timeout = float(os.environ.get("DEVCLUSTER_UP_TIMEOUT", "180"))
    STATE.mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(PKI_DIR)
    state = State.load()
    if is_up(state, pki):
        log("already up")
        print(_export_line())
        return 0
    if (state is not None and state.network is not None and read_pid("etcd")
            and read_pid("kube-apiserver") and healthy("kube-apiserver", state, pki)):
        # etcd and the apiserver hold the cluster: keep them (and every object) and only start
        # what is missing, e.g. a kubelet a chaos test stopped.
        missing = [c for c in state.components() if read_pid(c) is None]
        log(f"repairing: starting {', '.join(missing)}")
        for comp in missing:
            _start(comp, state, pki, False, timeout)
        print(_export_line())
        return 0
    if state is not None or any(PIDS.glob("*.pid")):
        log("partial or stale cluster found: stopping it first")
        down(quiet=True)
    if nodes:
        missing = [p.name for p in realnode_files.runtime_binaries(RUNTIME_BIN) if not p.is_file()]
        if missing:
            raise ClusterError(f"{', '.join(missing)} missing in {RUNTIME_BIN}: build them with `make runtime`")
        if not any(IMAGES_DIR.glob("*.tar")):
            raise ClusterError(f"no images in {IMAGES_DIR}: build them with `make images`")
    localkube()  # fail early with the build hint

    state = new_state(nodes)
    state.save()
    plan = state.plan
    NETWORK_FILE.write_text(json.dumps(plan.to_json()) + "\n")
    # nodes and pods reach the apiserver at our veth's address or the `kubernetes` ClusterIP
    pki = ensure_pki(PKI_DIR, extra_ips=(plan.host_ip, plan.kubernetes_ip))
    write_kubeconfig(pki, state)
    write_kubeconfig(pki, state, NODE_KUBECONFIG, f"https://{plan.host_ip}:{state.apiserver_port}")
    write_scheduler_config()
    write_corefile(state)
    ETCD_DATA.mkdir(parents=True, exist_ok=True)
    os.chmod(ETCD_DATA, 0o700)  # etcd refuses/complains about group-readable data dirs
    NODES_DIR.mkdir(parents=True, exist_ok=True)
    try:
        t_net = time.monotonic()
        network.up(plan, state.apiserver_port)
        log(f"network {plan.supernet} up ({plan.prefix}, {time.monotonic() - t_net:.1f}s)")
        _start("etcd", state, pki, True, 30)
        _start("kube-apiserver", state, pki, True, 120)
        # KCM and scheduler come up in parallel: both are slow-ish to start on 2 cores
        kcm_pid = spawn("kube-controller-manager",
                        command("kube-controller-manager", state, pki), True)
        sched_pid = spawn("kube-scheduler", command("kube-scheduler", state, pki), True)
        ensure_runtime_class()
        ensure_kube_dns(plan)
        ensure_kueue_crds()
        net_pids = {"coredns": spawn("coredns", command("coredns", state, pki), True),
                    "kueue": spawn("kueue", command("kueue", state, pki), True)}
        for name in (KUBELET_PREFIX + n for n in state.nodes):
            spawn(name, command(name, state, pki), True)
        for name in (PROXY_PREFIX + n for n in state.nodes):
            net_pids[name] = spawn(name, command(name, state, pki), True)
        for comp, pid in (("kube-controller-manager", kcm_pid), ("kube-scheduler", sched_pid)):
            wait_until(lambda c=comp, p=pid: _alive_or_raise(c, p) and healthy(c, state, pki),
                       60, f"{comp} /healthz", on_timeout=lambda c=comp: log_tail(c))
        deadline = t0 + timeout
        for node in state.nodes:
            comp = KUBELET_PREFIX + node
            pid = read_pid(comp) or -1
            wait_until(lambda c=comp, p=pid, n=node: _alive_or_raise(c, p) and node_ready(n),
                       max(5.0, deadline - time.monotonic()),
                       f"node {node} Ready without the not-ready taint",
                       on_timeout=lambda c=comp: log_tail(c) + log_tail("kube-controller-manager", 10))
        # kube-router reads its Node at start-up: only now
        for name in (ROUTER_PREFIX + n for n in state.nodes):
            net_pids[name] = spawn(name, command(name, state, pki), True)
        for comp, pid in net_pids.items():
            wait_until(lambda c=comp, p=pid: _alive_or_raise(c, p) and healthy(c, state, pki),
                       max(5.0, deadline - time.monotonic()), f"{comp} healthy",
                       on_timeout=lambda c=comp: log_tail(c))
        wait_until(default_service_account_exists, max(5.0, deadline - time.monotonic()),
                   "ServiceAccount default/default",
                   on_timeout=lambda: log_tail("kube-controller-manager"))
        ensure_kueue_objects(state, pki)
    except BaseException:
        log("start-up failed; stopping what was started (logs are kept in .devcluster/logs)")
        down(quiet=True, wipe=False)
        raise
    log(f"cluster up in {time.monotonic() - t0:.1f}s: {state.server}, "
        f"{len(state.nodes)} node(s)")
    print(_export_line())
    return 0


def _real_node(node: str, state: State) -> nodeconfig.Node:
    plan = state.plan
    return nodeconfig.Node(
        name=node, ip=plan.node_ip(node), pod_cidr=plan.pod_cidr(node), port=state.nodes[node],
        healthz_port=KUBELET_HEALTHZ_PORT, max_pods=int(state.node_pods),
        cgroup_root=f"/{plan.node_ns(node)}", cluster_dns=plan.dns_ip,
        paths=nodeconfig.NodePaths(NODES_DIR / node))


def _alive_or_raise(component: str, pid: int) -> bool:
    if not _proc_alive(pid):
        raise ClusterError(f"{component} exited{log_tail(component)}")
    return True


def _unmount_leftovers() -> None:
    """Unmount anything a node left mounted under the state dir (lazy, deepest first)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    targets = []
    for line in mounts:
        parts = line.split()
        if len(parts) > 1:
            target = parts[1].replace("\\040", " ")
            if target == str(STATE) or target.startswith(str(STATE) + "/"):
                targets.append(target)
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def down(quiet: bool = False, wipe: bool = True) -> int:
    """Stop everything in reverse start order (kubelets first so they can finish pods while
    the API is still there; etcd last, which every other component needs), then sweep stray
    processes carrying our marker, unmount leftovers and wipe cluster data."""
    state = State.load()
    known = state.components() if state else list(CONTROL_PLANE)
    extra = [p.stem for p in PIDS.glob("*.pid")] if PIDS.exists() else []
    order = [c for c in extra if c.startswith(KUBELET_PREFIX) and c not in known]
    order += [c for c in reversed(known)]
    order += [c for c in extra if c not in order]
    stopped = [c for c in order if stop_component(c)]
    strays = _marked_processes()
    if strays:
        log(f"killing stray processes {sorted(strays)}")
        _kill_group_and_pids(None, strays, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(map(_proc_alive, strays)):
            time.sleep(0.05)
    if state is not None:
        for node in state.nodes:   # one killed with SIGKILL could not power off
            real = _real_node(node, state)
            realnode.sweep(real.paths.root, real.cgroup_root)
    _unmount_leftovers()
    try:
        supernet = network.Plan.from_json(json.loads(NETWORK_FILE.read_text())).supernet
    except (FileNotFoundError, ValueError, KeyError):
        supernet = None
    removed = network.down(network.prefix_for(STATE), supernet)
    NETWORK_FILE.unlink(missing_ok=True)
    if removed and not quiet:
        log(f"network down: {len(removed)} objects removed")
    if wipe:
        shutil.rmtree(ETCD_DATA, ignore_errors=True)
        shutil.rmtree(NODES_DIR, ignore_errors=True)
        shutil.rmtree(STATE / "kueue-etc", ignore_errors=True)   # the overlay over /etc Kueue ran with
        STATE_FILE.unlink(missing_ok=True)
    if not quiet:
        log(f"down (stopped: {', '.join(stopped) or 'nothing was running'})")
    return 0


def status() -> int:
    state = State.load()
    if state is None:
        print("devcluster: not up")
        return 1
    pki = ensure_pki(PKI_DIR)
    ok = True
    for comp in state.components():
        pid = read_pid(comp)
        health = healthy(comp, state, pki) if pid else False
        ok &= bool(health)
        print(f"{comp:36} pid={pid or '-':>7}  {'healthy' if health else 'DOWN'}")
    print(f"server {state.server}  kubeconfig {KUBECONFIG}")
    return 0 if ok else 1


def _known_component(component: str) -> State:
    state = State.load()
    if state is None:
        raise ClusterError("the devcluster is not up")
    if component not in state.components():
        raise ClusterError(f"unknown component {component!r}; known: {', '.join(state.components())}")
    return state


def stop(component: str) -> int:
    _known_component(component)
    log(f"{component}: {'stopped' if stop_component(component) else 'was not running'}")
    return 0


def restart(component: str) -> int:
    """Stop and start one component with the same flags and ports (chaos tests)."""
    state = _known_component(component)
    pki = ensure_pki(PKI_DIR)
    stop_component(component)
    _start(component, state, pki, False, 120)
    return 0


_LOCK_FILE = None


def _lock() -> None:
    """Serialise mutating commands on one state dir (two `up`s racing would each start an etcd;
    an `up` racing a `down` would kill what the other just started). Held until exit."""
    global _LOCK_FILE
    import fcntl

    STATE.mkdir(parents=True, exist_ok=True)
    _LOCK_FILE = open(STATE / ".lock", "w")
    try:
        fcntl.flock(_LOCK_FILE, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log("another devcluster command is running on this state dir; waiting for it")
        fcntl.flock(_LOCK_FILE, fcntl.LOCK_EX)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.cluster",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the devcluster (no-op when it is up)")
    p_up.add_argument("--nodes", type=int, default=int(os.environ.get("DEVCLUSTER_NODES", "2")))
    sub.add_parser("down", help="stop every devcluster process and wipe cluster data")
    sub.add_parser("status", help="show every component")
    for name in ("restart", "stop"):
        p = sub.add_parser(name, help=f"{name} one component")
        p.add_argument("component")
    args = parser.parse_args(argv)
    if args.cmd != "status":
        _lock()
    try:
        if args.cmd == "up":
            return up(args.nodes)
        if args.cmd == "down":
            return down()
        if args.cmd == "status":
            return status()
        if args.cmd == "restart":
            return restart(args.component)
        if args.cmd == "stop":
            return stop(args.component)
    except ClusterError as e:
        log(f"error: {e}")
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
