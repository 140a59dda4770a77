"""``make demo``: the guide's shipping-fix task as a parallel and a serial batch, side by side.

Installs the CRD, starts the operator in the background (log: .devcluster/logs/operator-demo.log)
unless one already leads (the installed one of ``make install``, or ``make operator``: its Lease is
held and renewed), in which case the demo says so and uses it instead of starting a second,
creates a fresh namespace ``demo-<random>``, runs examples/shipping-fix-parallel.yaml and then,
once it has finished, examples/shipping-fix-serial.yaml, then the model in the loop: the scripted
policy server (examples/policy-server.yaml, namespace ``models``) and
examples/shipping-fix-model.yaml, whose agents ask it for their fix. It prints the summaries
side by side with the guide's metric names, exports each batch's results directory to demo-output/<namespace>/<batch>/, deletes
the batches (their sandbox namespaces go with them) and stops the operator. Exit code 1 when a
batch did not succeed. ``--keep`` leaves the namespace and batches in place for a look around.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
STATE = ROOT / ".devcluster"
CRD = ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml"
EXAMPLES = ("shipping-fix-parallel.yaml", "shipping-fix-serial.yaml", "shipping-fix-model.yaml")
MODEL_EXAMPLE, MODEL_SERVER, MODEL_NAMESPACE = "shipping-fix-model.yaml", "policy-server.yaml", "models"


def kubectl_cmd() -> list[str]:
    local = STATE / "bin" / "localkube"
    return [str(local), "kubectl"] if local.exists() else ["kubectl"]


def kubectl(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(kubectl_cmd() + list(args), capture_output=True, text=True, timeout=timeout)


def start_policy_server() -> bool:
    """Apply the stand-in model endpoint and wait for it; True when the demo created its namespace."""
    fresh = not kubectl("get", "namespace", MODEL_NAMESPACE, "-o", "name").stdout.strip()
    for args in (["apply", "-f", str(ROOT / "examples" / MODEL_SERVER)],
                 ["rollout", "status", "deployment/policy-server", "-n", MODEL_NAMESPACE, "--timeout=120s"]):
        run = kubectl(*args)
        if run.returncode != 0:
            raise SystemExit(f"demo: kubectl {args[0]} of the policy server failed: {run.stderr.strip()}")
    return fresh


def install_crd() -> None:
    for args in (["apply", "--server-side", "--force-conflicts", "-f", str(CRD)],
                 ["wait", "--for=condition=Established", "crd/rolloutbatches.rl.agentruntime.io", "--timeout=60s"]):
        run = subprocess.run(kubectl_cmd() + args, capture_output=True, text=True, timeout=90)
        if run.returncode != 0:
            raise SystemExit(f"demo: kubectl {args[0]} of the CRD failed: {run.stderr.strip()}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Operator:
    """``rolloutbatch operator`` as a background process group of its own."""

    def __init__(self, log_path: pathlib.Path) -> None:
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start it and wait until it leads (or another operator does: it then waits as a standby)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        liveness = _free_port()
        cmd = [sys.executable, "-m", "rolloutbatch.cli.main", "operator", "--metrics-address", "127.0.0.1",
               "--metrics-port", str(_free_port()), "--liveness-port", str(liveness)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"demo: the operator exited with {self.proc.returncode}; see {self.log_path}")
            try:
                role = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{liveness}/readyz", timeout=1).read())
            except (OSError, ValueError):
                time.sleep(0.3)
                continue
            if role.get("role") == "leader" or (role.get("role") == "standby" and role.get("holder")):
                return   # a standby of a live leader: the batches are reconciled all the same
            time.sleep(0.3)
        self.stop()
        raise SystemExit(f"demo: the operator did not become ready in 60s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def live_leader(api) -> str | None:
    """The identity holding the operators' Lease, when it is renewed (judged by the wall clock:
    the devcluster runs on this machine), else None."""
    from rolloutbatch.core import leadership
    from rolloutbatch.kube import leases

    lease = leases.get_lease(api, leadership.DEFAULT_NAMESPACE, leadership.LEASE_NAME)
    if lease is None:
        return None
    record = leadership.Record.from_spec(lease.get("spec"))
    return leadership.live_holder(record, datetime.datetime.now(datetime.timezone.utc))


def print_summary(console, handles) -> None:
    """The guide's metrics of the demo's batches, side by side (stacked on a narrow console)."""
    from rolloutbatch.cli import render

    render.print_summary(console, [(h.name, render.summary(h.status)) for h in handles],
                         title="the guide's metrics, side by side")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from rolloutbatch.cli.common import positive
    from rolloutbatch.cli.export import export
    from rolloutbatch.cli.watch import follow
    from rolloutbatch.kube import resources
    from rolloutbatch.kube.errors import KubeError
    from rolloutbatch.sdk import Client, is_succeeded

    parser = argparse.ArgumentParser(prog="python -m rolloutbatch.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the demo namespace and its batches in place")
    parser.add_argument("--timeout", type=positive, default=600, help="seconds to wait for each batch (default 600)")
    parser.add_argument("--output", default=str(ROOT / "demo-output"), help="where results directories go")
    args = parser.parse_args(argv)

    os.environ.setdefault("KUBECONFIG", str(STATE / "kubeconfig"))
    console = Console(highlight=False)
    try:
        client = Client()
        client.api.get("/version", "reach the devcluster")
    except (KubeError, OSError, Exception) as exc:  # noqa: BLE001 - any failure here means "no cluster"
        console.print(f"demo: cannot reach the cluster ({exc}); start it with `make cluster`")
        return 1

    console.print("[bold]1.[/] installing the RolloutBatch CRD")
    install_crd()
    operator = Operator(STATE / "logs" / "operator-demo.log")
    leader = live_leader(client.api)
    if leader:
        # Never a second reconciler beside it: both would write the same results and count the
        # same episodes (docs/design.md §5.15).
        from rolloutbatch.core.leadership import holder_pod
        console.print(f"[bold]2.[/] an operator already leads ({holder_pod(leader)}, lease "
                      "rolloutbatch-system/rolloutbatch-operator): using it, not starting another")
    else:
        console.print(f"[bold]2.[/] starting the operator (log: {operator.log_path})")
        operator.start()
    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    handles = []
    model_namespace_ours = False
    try:
        client.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": namespace}}, f"create namespace {namespace}")
        client.namespace = namespace
        console.print(f"[bold]3.[/] namespace {namespace}")
        for n, example in enumerate(EXAMPLES, 4):
            if example == MODEL_EXAMPLE:
                console.print(f"   the model in the loop: examples/{MODEL_SERVER} "
                              f"(a scripted stand-in for vLLM/SGLang, namespace {MODEL_NAMESPACE})")
                model_namespace_ours = start_policy_server()
            obj = yaml.safe_load((ROOT / "examples" / example).read_text())
            handle = client.submit(obj)
            console.print(f"[bold]{n}.[/] applied examples/{example} -> rolloutbatch {handle.name} "
                          f"({obj['spec']['episodes']} episodes, parallelism {obj['spec']['parallelism']})")
            follow([handle], console, timeout=args.timeout)
            handles.append(handle)

        # Ready is declared when every episode is final; the Job controller completes the Job a
        # moment later, and jobCompleteSeconds follows in the status (bounded wait).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any("jobCompleteSeconds" not in h.refresh()
                                                   for h in handles):
            time.sleep(0.5)
        print_summary(console, handles)
        out_root = pathlib.Path(args.output) / namespace
        for h in handles:
            target = out_root / h.name
            export(client, h.obj, target)
            s = h.status
            console.print(f"{h.name}: {s.get('phase')} - {s.get('message') or ''}", soft_wrap=True)
            kept = "" if args.keep else " (deleted with the batch at the end; --keep keeps it)"
            console.print(f"  results: exported to {target}/; ConfigMap {namespace}/{s.get('resultsConfigMap')}{kept}",
                          soft_wrap=True)
        ok = all(is_succeeded(h.status) for h in handles)
        if args.keep:
            console.print(f"kept namespace {namespace}: `kubectl get rb -n {namespace}`; deleting these batches "
                          f"needs the operator running (`rolloutbatch cleanup NAME -n {namespace}`)")
        return 0 if ok else 1
    except TimeoutError as exc:
        console.print(f"demo: {exc}; operator log: {operator.log_path}")
        return 1
    finally:
        if not args.keep:
            for h in handles:
                try:
                    h.delete(wait=True, timeout=120)
                except (KubeError, TimeoutError) as exc:
                    console.print(f"demo: cleanup of {h.name}: {exc}")
            try:
                client.api.delete(resources.object_path("Namespace", namespace), f"delete namespace {namespace}")
            except KubeError:
                pass
            if model_namespace_ours:
                kubectl("delete", "namespace", MODEL_NAMESPACE, "--wait=false")
        operator.stop()


if __name__ == "__main__":
    sys.exit(main())
