"""Run the real operator as a subprocess against the devcluster, for end-to-end tests.

The operator is started exactly as a user would (`rolloutbatch operator`), with its log in
.devcluster/logs/, so a failing test can show what the operator said. Chaos tests use
``kill()`` (SIGKILL) and ``start()`` to restart it. Every operator competes for the one
leader-election Lease: ``start()`` returns once this one leads (after a predecessor's SIGKILL,
when its lease has expired: up to 15 s more), ``start(leader=False)`` once it answers at all
(a standby of the failover tests); ``readyz()`` says which it is.

Under pytest-xdist the workers share one operator (``shared_operator``): the first worker starts
it, the others attach to it, and the controller stops it when the run ends. A shared operator
cannot be stopped or restarted by a test: such tests are marked ``exclusive`` and run apart.
"""
from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import json
import urllib.error
import urllib.request

from tests.support import workers

ROOT = pathlib.Path(__file__).resolve().parents[2]
STATE = ROOT / ".devcluster"
CRD = ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml"
POOL_CRD = CRD.parent / "rl.agentruntime.io_rolloutpools.yaml"


# For an operator a test kills (ROLLOUTBATCH_CRASH_AT, kill()) and its successor: the Lease it leaves
# says 5 s, so its successor waits 5 s instead of the default 15 (it goes by the duration the
# holder wrote). Only for operators that live seconds to tens of seconds: a 4 s renew deadline is
# tight on a loaded 2-core machine (wait_crashed tells a lost lease, exit 1, from the crash).
QUICK_LEASE = ("--leader-election-lease-duration", "5", "--leader-election-renew-deadline", "4",
               "--leader-election-retry-period", "1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kubectl(*args: str, input: str | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    """The devcluster's own kubectl (localkube's matching client) with the test kubeconfig."""
    binary = STATE / "bin" / "localkube"
    cmd = [str(binary), "kubectl", *args] if binary.exists() else ["kubectl", *args]
    out = subprocess.run(cmd, input=input, text=True, capture_output=True, timeout=timeout)
    if check and out.returncode:
        # CalledProcessError's message leaves stderr out: a failing test must say what kubectl said
        raise KubectlError(out.returncode, cmd, out.stdout, out.stderr)
    return out


#: The operator's identity in every install (manifests/rbac/service_account.yaml, the Helm chart).
OPERATOR_SA = "system:serviceaccount:rolloutbatch-system:rolloutbatch-operator"
CHART = ROOT / "charts" / "rolloutbatch"


def can_i(verb: str, resource: str, *where: str, who: str = OPERATOR_SA) -> bool:
    """`kubectl auth can-i` as ``who`` (the operator's ServiceAccount by default)."""
    out = kubectl("auth", "can-i", verb, resource, *where, f"--as={who}", check=False)
    assert out.stdout.strip() in ("yes", "no"), (verb, resource, out.stdout, out.stderr)
    return out.stdout.strip() == "yes"


def helm(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """The Helm built from devcluster/helm (`make helm`, a prerequisite of make test), against the devcluster."""
    binary = STATE / "bin" / "helm"
    assert binary.exists(), f"{binary} is missing: run `make helm`"
    cmd = [str(binary), "--kubeconfig", str(STATE / "kubeconfig"), *args]
    out = subprocess.run(cmd, text=True, capture_output=True, timeout=timeout)
    if check and out.returncode:
        raise KubectlError(out.returncode, cmd, out.stdout, out.stderr)
    return out


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return f"{super().__str__()}: {(self.stderr or '').strip()[-2000:]}"


def rollout(namespace: str, deployment: str, selector: str, timeout: int = 120) -> None:
    """Wait for ``deployment``'s rollout; when it times out, once more after deleting its pods that
    are not Ready (each said with its node and conditions). A fresh pod of the devcluster can stay
    unreachable on its node: twice in CI runs of 2026-12-07 every probe of one new operator pod on
    one node timed out for minutes (no answer, not a refusal) while the node's other pods answered
    and the same image ran on the other node. Why is not yet explained (the node's pod network
    dropping the new pod's traffic, or the operator's event loop, which answers the probes, too
    busy as it starts). Its replacement (a new sandbox and address) is the one retry; an operator
    that cannot start fails both tries."""
    status = ("rollout", "status", f"deployment/{deployment}", "-n", namespace, f"--timeout={timeout}s")
    try:
        kubectl(*status, timeout=timeout + 30)
        return
    except KubectlError:
        pods = json.loads(kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
        stuck = [p for p in pods if not p["metadata"].get("deletionTimestamp") and not any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in (p.get("status") or {}).get("conditions") or [])]
        if not stuck:
            raise
        for pod in stuck:
            name = pod["metadata"]["name"]
            logs = [kubectl("logs", "-n", namespace, name, *previous, "--tail=40", check=False)
                    for previous in ((), ("--previous",))]
            print(f"rollout of {deployment}: pod {name} on {pod['spec'].get('nodeName')} not Ready: "
                  f"{(pod.get('status') or {}).get('conditions')}; its log:\n{logs[0].stdout}{logs[0].stderr}"
                  f"its previous container's:\n{logs[1].stdout}{logs[1].stderr}deleted, its replacement waited for",
                  file=sys.stderr)
        kubectl("delete", "pod", "-n", namespace, "--wait=false", *(p["metadata"]["name"] for p in stuck))
    kubectl(*status, timeout=timeout + 30)


def install_crd() -> None:
    """Both CRDs: RolloutBatch and RolloutPool (the operator serves both)."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD), "-f", str(POOL_CRD))
    kubectl("wait", "--for=condition=Established", "crd/rolloutbatches.rl.agentruntime.io",
            "crd/rolloutpools.rl.agentruntime.io", "--timeout=60s")


class OperatorProcess:
    def __init__(self, name: str = "operator", extra_args: tuple[str, ...] = (), env: dict | None = None) -> None:
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.log_path = STATE / "logs" / f"{name}.log"
        self.extra_args = extra_args
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.shared = False

    def describe(self) -> dict:
        """What another test process needs to use this running operator (``attached``)."""
        return {"name": self.log_path.stem, "metrics_port": self.metrics_port,
                "liveness_port": self.liveness_port, "pid": self.proc.pid}

    @classmethod
    def attached(cls, described: dict) -> "OperatorProcess":
        """An operator another test process started and owns (``describe``): read-only here."""
        operator = cls(described["name"])
        operator.metrics_port, operator.liveness_port = described["metrics_port"], described["liveness_port"]
        operator.shared = True
        return operator

    def _own(self) -> None:
        if self.shared:
            raise RuntimeError("the operator is shared by every pytest-xdist worker: a test that stops or "
                               "restarts it needs the cluster to itself (mark it `exclusive`, run without -n)")

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, leader: bool = True) -> None:
        self._own()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "rolloutbatch.cli.main", "operator",
               "--metrics-port", str(self.metrics_port), "--liveness-port", str(self.liveness_port),
               "--metrics-address", "127.0.0.1", *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env={**os.environ, **self.env}, start_new_session=True)
        deadline = time.monotonic() + 90   # 60 s to start, and a dead predecessor's lease to expire
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            body = self.readyz()
            if (body.get("role") == "leader" and body.get("reconciling")) or (body.get("role") == "standby"
                                                                               and not leader):
                return
            time.sleep(0.2)
        self.kill()   # never left running beside the next test's operator
        raise RuntimeError(f"operator did not become {'the leader' if leader else 'live'}:\n{self.log_tail()}")

    def wait_role(self, role: str, timeout: float) -> float:
        """Seconds until /readyz says ``role`` ("leader": and its kopf reconciles; "standby")."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.log_path.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            body = self.readyz()
            if body.get("role") == role and (role != "leader" or body.get("reconciling")):
                return time.monotonic() - started
            time.sleep(0.2)
        raise AssertionError(f"{self.log_path.name} not {role} within {timeout:g}s:\n{self.log_tail()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def readyz(self) -> dict:
        """/readyz's body ({"role": "leader" | "standby", "holder": ...}), {} while it does not answer."""
        try:
            response = urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/readyz", timeout=2)
        except urllib.error.HTTPError as exc:   # 503: starting, or a leader whose kopf is starting
            response = exc
        except OSError:
            return {}
        try:
            return json.loads(response.read())
        except ValueError:
            return {}

    def kill(self) -> None:
        """SIGKILL: no cleanup, no final patch: what a crash looks like."""
        self._own()
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        self._own()
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> str:
        return urllib.request.urlopen(self.metrics_url, timeout=5).read().decode()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no operator log)"


def shared_operator(directory: pathlib.Path) -> OperatorProcess:
    """The one operator of a pytest-xdist run, its state in ``directory`` (shared by the workers):
    the first worker to come installs the CRDs and starts it, the others attach to it."""
    state = directory / "operator.json"
    with workers.held("operator", directory):
        if state.exists():
            return OperatorProcess.attached(json.loads(state.read_text()))
        install_crd()
        operator = OperatorProcess("operator-tests")
        operator.start()
        state.write_text(json.dumps(operator.describe()))
        operator.shared = True   # this worker's tests may no more stop it than another's
        return operator


def stop_shared_operator(directory: pathlib.Path, grace: float = 20) -> None:
    """Stop the operator ``shared_operator`` started (the run's controller calls this last): SIGTERM,
    SIGKILL after ``grace`` seconds. Its worker has exited, so it is nobody's child here."""
    state = directory / "operator.json"
    if not state.exists():
        return
    pid = json.loads(state.read_text())["pid"]
    state.unlink()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.2)
        if not _running(pid):
            return


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan waits for init to reap it)."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
