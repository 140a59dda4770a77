"""Bench helpers: API access, watches with local receipt times, the operator and proxy processes.

Times the bench reports are local wall-clock receipt times (``time.time()`` when a watch event
arrived): the API's own timestamps (creationTimestamp, condition times, startedAt, finishedAt) have
one-second resolution, too coarse for sub-second stages. Episode ``ready``/``reward`` events carry
their own float ``at`` (same machine, same clock).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pykube

ROOT = pathlib.Path(__file__).resolve().parents[1]
STATE = ROOT / ".devcluster"
# BENCH_RESULTS: another directory for a run's files, relative to the checkout (e.g.
# bench/results/containerd: the real nodes' run beside the node agent's figures)
RESULTS = ROOT / os.environ.get("BENCH_RESULTS", "bench/results")
GROUP = "/apis/rl.agentruntime.io/v1alpha1"
BATCH_NAME_LABEL = "rl.agentruntime.io/batch-name"

TRIVIAL = ('import json, os, time\n'
           'eid = os.environ["EPISODE_ID"]\n'
           'print(json.dumps({"event": "ready", "at": time.time(), "episode_id": eid}), flush=True)\n'
           'print(json.dumps({"event": "reward", "at": time.time(), "episode_id": eid, "reward": 1.0}), flush=True)\n')

# The same episode on the preferred channel (README "Two channels"): its events go to the termination
# message, which the kubelet puts into the pod status, so the operator judges it without a log read.
TRIVIAL_TERMINATION_MESSAGE = (
    'import json, os, time\n'
    'eid = os.environ["EPISODE_ID"]\n'
    'with open("/dev/termination-log", "w") as f:\n'
    '    f.write(json.dumps({"event": "ready", "at": time.time(), "episode_id": eid}) + "\\n")\n'
    '    f.write(json.dumps({"event": "reward", "at": time.time(), "episode_id": eid, "reward": 1.0}) + "\\n")\n')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_ts(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Kube:
    """Direct access to the devcluster's apiserver (admin kubeconfig), plain dicts."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        self.kubeconfig = kubeconfig or str(STATE / "kubeconfig")
        self.http = pykube.HTTPClient(pykube.KubeConfig.from_file(self.kubeconfig), timeout=60)
        self.url = self.http.url

    def _check(self, r):
        if r.status_code >= 400:
            raise RuntimeError(f"{r.request.method} {r.url}: {r.status_code} {r.text[:300]}")
        return r

    def get(self, path: str, **params) -> dict | None:
        r = self.http.session.get(self.url + path, params=params or None)
        if r.status_code == 404:
            return None
        return self._check(r).json()

    def text(self, path: str, **params) -> str:
        return self._check(self.http.session.get(self.url + path, params=params or None)).text

    def create(self, path: str, body: dict) -> dict:
        return self._check(self.http.session.post(self.url + path, json=body)).json()

    def delete(self, path: str) -> None:
        r = self.http.session.delete(self.url + path, json={"propagationPolicy": "Background"})
        if r.status_code != 404:
            self._check(r)

    def wait_gone(self, path: str, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get(path) is None:
                return True
            time.sleep(0.5)
        return False

    def request_totals(self) -> float:
        """Sum of kube-apiserver's apiserver_request_total (every client; no user-agent label)."""
        total = 0.0
        for line in self.text("/metrics").splitlines():
            if line.startswith("apiserver_request_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return total


class Watch(threading.Thread):
    """A watch stream; calls ``on_event(t_local, type, obj)`` for every event, reconnecting."""

    def __init__(self, kube: Kube, path: str, on_event, **params) -> None:
        super().__init__(daemon=True)
        self.kube, self.path, self.on_event, self.params = kube, path, on_event, params
        self.stopped = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        rv = None
        while not self.stopped.is_set():
            params = {"watch": "1", "allowWatchBookmarks": "false", "timeoutSeconds": "3600", **self.params}
            if rv:
                params["resourceVersion"] = rv
            try:
                with self.kube.http.session.get(self.kube.url + self.path, params=params, stream=True,
                                                timeout=(10, None)) as r:
                    self.ready.set()
                    for line in r.iter_lines():
                        if self.stopped.is_set():
                            return
                        if not line:
                            continue
                        now = time.time()
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            rv = None
                            break
                        rv = event["object"]["metadata"].get("resourceVersion") or rv
                        self.on_event(now, event["type"], event["object"])
            except Exception:  # reconnect
                time.sleep(0.2)

    def stop(self) -> None:
        self.stopped.set()


def start_watch(kube: Kube, path: str, on_event, **params) -> Watch:
    w = Watch(kube, path, on_event, **params)
    w.start()
    w.ready.wait(10)
    time.sleep(0.05)
    return w


class PodTracker:
    """First local receipt time of each pod lifecycle step, from a pod watch."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.lock = threading.Lock()

    def __call__(self, now: float, type_: str, pod: dict) -> None:
        name = pod["metadata"]["name"]
        with self.lock:
            rec = self.pods.setdefault(name, {"name": name, "namespace": pod["metadata"]["namespace"],
                                              "seen_created": now})
            rec["object"] = pod
            if pod["spec"].get("nodeName"):
                rec.setdefault("seen_scheduled", now)
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                state = cs.get("state") or {}
                if "running" in state or "terminated" in state:
                    rec.setdefault("seen_started", now)
                if "terminated" in state:
                    rec.setdefault("seen_finished", now)
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                rec.setdefault("seen_phase_done", now)


def episode_events(kube: Kube, namespace: str, pod: str) -> dict:
    """The ready/reward event times from a pod's log (None when unreadable)."""
    try:
        text = kube.text(f"/api/v1/namespaces/{namespace}/pods/{pod}/log", limitBytes="65536")
    except RuntimeError:
        return {}
    out = {}
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") in ("ready", "reward"):
            out[ev["event"] + "_at"] = ev.get("at")
            if ev["event"] == "reward":
                out["reward"] = ev.get("reward")
    return out


def pod_api_times(pod: dict) -> dict:
    status = pod.get("status") or {}
    out = {"api_created": parse_ts(pod["metadata"].get("creationTimestamp"))}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            out["api_scheduled"] = parse_ts(cond.get("lastTransitionTime"))
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        out["api_started"] = parse_ts(term.get("startedAt"))
        out["api_finished"] = parse_ts(term.get("finishedAt"))
        out["exit_code"] = term.get("exitCode")
    out["node"] = pod["spec"].get("nodeName")
    out["index"] = (pod["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
    return out


def pct(values, q: float) -> float | None:
    """Linear-interpolated percentile (the guide's definition)."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    pos = (len(vals) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(vals) - 1)
    return round(vals[lo] + (vals[hi] - vals[lo]) * (pos - lo), 4)


def summary(values) -> dict:
    vals = [v for v in values if v is not None]
    return {"n": len(vals), "p50": pct(vals, 0.5), "p95": pct(vals, 0.95),
            "min": round(min(vals), 4) if vals else None, "max": round(max(vals), 4) if vals else None}


# --- processes ----------------------------------------------------------------------------------

def proc_cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status(pid: int, key: str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


class Proxy:
    """bench/apiproxy.py as a subprocess, and a kubeconfig pointing at it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.kubeconfig = STATE / "bench-proxy.kubeconfig"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "bench", "user": {"token": "unused-by-the-proxy"}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}]}))
        log = open(STATE / "logs" / "bench-proxy.log", "ab")
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "apiproxy.py"),
                                      str(STATE / "kubeconfig"), str(self.port)], stdout=log, stderr=log,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.counts()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("proxy did not start")

    def counts(self) -> list[dict]:
        return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/__bench/counts", timeout=5).read())

    def reset(self) -> None:
        urllib.request.urlopen(f"http://127.0.0.1:{self.port}/__bench/reset", timeout=5).read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:  # aiohttp waits for open watch streams
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_operator(name: str, kubeconfig: str | None = None, extra: tuple[str, ...] = ()):
    sys.path.insert(0, str(ROOT))
    from tests.support.operator import OperatorProcess
    env = {"KUBECONFIG": kubeconfig} if kubeconfig else {}
    op = OperatorProcess(name=name, extra_args=extra, env=env)
    op.start()
    return op


# --- machine ------------------------------------------------------------------------------------

def _cmd(*args: str) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout.strip()
    except OSError:
        return ""


def machine_info() -> dict:
    mem = 0
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
    cpu_model = ""
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    version = _cmd(str(STATE / "bin" / "localkube"), "kubectl", "--kubeconfig", str(STATE / "kubeconfig"),
                   "version", "-o", "json")
    try:
        server = json.loads(version)["serverVersion"]["gitVersion"]
    except (ValueError, KeyError):
        server = None
    import kopf
    state = {}
    try:
        state = json.loads((STATE / "state.json").read_text())
    except (OSError, ValueError):
        pass
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(), "cpu_model": cpu_model, "memory_bytes": mem,
        "memory_gib": round(mem / 2**30, 1), "kernel": platform.release(),
        "python": platform.python_version(), "go": _cmd("go", "version"),
        "kubernetes": server,
        # the nodes' runtime as they report it (containerd://2.4.x on the real nodes)
        "container_runtimes": sorted(set(_cmd(str(STATE / "bin" / "localkube"), "kubectl", "--kubeconfig",
                                              str(STATE / "kubeconfig"), "get", "nodes", "-o",
                                              "jsonpath={.items[*].status.nodeInfo.containerRuntimeVersion}").split())), "kopf": kopf.__version__ if hasattr(kopf, "__version__") else None,
        "devcluster": {k: state.get(k) for k in ("node_pods",)} | {
            "nodes": len(state.get("nodes") or {})},
        "git_commit": _cmd("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD") or None,
        # tracked files changed since that commit (bench/results excluded: the run writes there)
        "git_dirty": [line.split(maxsplit=1)[-1] for line in _cmd("git", "-C", str(ROOT), "status", "--porcelain",
                                                 "--untracked-files=no").splitlines()
                      if not line.split(maxsplit=1)[-1].startswith("bench/results/")],
    }


def write_result(name: str, doc: dict) -> pathlib.Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"[bench] wrote {path}", flush=True)
    return path


def unique(prefix: str) -> str:
    import uuid
    return f"{prefix}-{uuid.uuid4().hex[:5]}"
