"""Run the real operator as a subprocess against the devcluster, for end-to-end tests.

The operator is started exactly as a user would (`rolloutbatch operator`), with its log in
.devcluster/logs/, so a failing test can show what the operator said. Chaos tests use
``kill()`` (SIGKILL) and ``start()`` to restart it. Every operator competes for the one
leader-election Lease: ``start()`` returns once this one leads (after a predecessor's SIGKILL,
when its lease has expired: up to 15 s more), ``start(leader=False)`` once it answers at all
(a standby of the failover tests); ``readyz()`` says which it is.
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

ROOT = pathlib.Path(__file__).resolve().parents[2]
STATE = ROOT / ".devcluster"
CRD = ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml"
POOL_CRD = CRD.parent / "rl.agentruntime.io_rolloutpools.yaml"


# For an operator a test kills itself within seconds (ROLLOUTBATCH_CRASH_AT): the Lease it leaves
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

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, leader: bool = True) -> None:
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
        raise RuntimeError(f"operator did not become {'the leader' if leader else 'live'}:\n{self.log_tail()}")

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
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
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
