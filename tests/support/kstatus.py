"""kstatus verdicts (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute) for Python tests.

The Go helper in tests/kstatus/ is its own module (go.mod, go.sum; GOTOOLCHAIN=local). It is built
once into ``.devcluster/bin/kstatus`` (git-ignored) and rebuilt only when a source is newer than
the binary. Compute is the same library Flux's kustomize-controller, kpt and cli-utils' apply
waiters use to decide whether an object is Current, InProgress or Failed.

    compute(obj_dict) -> {"status": "Current", "message": "Resource is Ready"}
    flux_health(obj_dict, current=..., failed=..., in_progress=...) -> {"status": "Failed", ...}

``flux_health`` evaluates Flux kustomize-controller ``healthCheckExprs`` with cel-go (see
tests/kstatus/main.go for the exact semantics); an evaluation error (e.g. no status yet) comes
back as status "Error" with the message in "error" (Flux keeps waiting in that case).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tests" / "kstatus"
BIN = REPO / ".devcluster" / "bin" / "kstatus"
SOURCES = ("main.go", "go.mod", "go.sum")


def go_available() -> bool:
    return shutil.which("go") is not None


def _stale() -> bool:
    if not BIN.exists():
        return True
    built = BIN.stat().st_mtime
    return any((SRC / s).stat().st_mtime > built for s in SOURCES)


def build(force: bool = False) -> Path:
    """Build the helper if it is missing or older than its sources; returns the binary path."""
    if not force and not _stale():
        return BIN
    BIN.parent.mkdir(parents=True, exist_ok=True)
    lock_path = BIN.parent / ".kstatus.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test workers build once
        if not force and not _stale():
            return BIN
        env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod", CGO_ENABLED="0")
        tmp = BIN.with_name(f".kstatus.{os.getpid()}.tmp")
        proc = subprocess.run(
            ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "."],
            cwd=SRC, env=env, capture_output=True, text=True, timeout=900,
        )
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"building the kstatus helper failed:\n{proc.stderr}")
        os.replace(tmp, BIN)
    return BIN


def _run(args: list[str], obj: dict[str, Any]) -> tuple[subprocess.CompletedProcess[str], dict]:
    binary = build()
    proc = subprocess.run([str(binary), *args], input=json.dumps(obj, default=str),
                          capture_output=True, text=True, timeout=30)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"kstatus helper: rc={proc.returncode} {proc.stdout!r} {proc.stderr!r}")


def flux_health(obj: dict[str, Any], *, current: str, failed: str = "",
                in_progress: str = "") -> dict[str, str]:
    """Flux healthCheckExprs verdict: InProgress, Failed, Current, or Error (+ "error")."""
    _, verdict = _run(["-flux-current", current, "-flux-failed", failed,
                       "-flux-inprogress", in_progress], obj)
    return verdict


def compute(obj: dict[str, Any]) -> dict[str, str]:
    """The kstatus verdict for one object (as the API returns it, e.g. a kubernetes client dict)."""
    proc, verdict = _run([], obj)
    if proc.returncode != 0 or verdict.get("error"):
        raise RuntimeError(f"kstatus helper: {verdict.get('error') or proc.stderr}")
    return {"status": verdict["status"], "message": verdict["message"]}
