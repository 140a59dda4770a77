"""`pip install rolloutbatch` alone, no extra: the SDK and the CLI work, the operator says what it lacks.

Really installed: the wheel is built from this checkout and installed with its dependencies from
the package index into a fresh venv, where the package (not the source tree) answers. Then pip's
resolver is asked, without installing, whether the same wheel resolves for Python 3.10 (none is
on this machine: tests/unit/test_python_floor.py checks the code itself), and that the operator
extra does not (its pinned kopf requires 3.11). That resolver check sees each candidate's
Requires-Python and wheel tags as 3.10 would, but evaluates environment markers for the running
interpreter (aiohttp's 3.10-only async-timeout is not in its answer).

Slow (~1 min, most of it pip); a pip failure is a test failure, never a skip.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import venv

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
OPERATOR_ONLY = ("kopf", "prometheus_client")


def pip(py: pathlib.Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([str(py), "-m", "pip", "--disable-pip-version-check", *args],
                         capture_output=True, text=True, timeout=900)
    if check and run.returncode != 0:
        pytest.fail(f"pip {' '.join(args)} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}", pytrace=False)
    return run


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheels")
    pip(sys.executable, "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT))
    (found,) = out.glob("rolloutbatch-*.whl")
    return found


@pytest.fixture(scope="module")
def light_env(wheel, tmp_path_factory) -> pathlib.Path:
    env_dir = tmp_path_factory.mktemp("light") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip(env_dir / "bin" / "python", "install", "-q", str(wheel))
    return env_dir


def run(exe: pathlib.Path, *args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_sdk_imports_without_the_operators_dependencies(light_env, tmp_path):
    script = ("import importlib.util, json, rolloutbatch, rolloutbatch.sdk, rolloutbatch.sdk.aio\n"
              "from rolloutbatch.sdk import AsyncClient, Client, build_batch\n"
              f"print(json.dumps({{'file': rolloutbatch.__file__, 'missing': [m for m in {OPERATOR_ONLY!r} "
              "if importlib.util.find_spec(m) is None]}))")
    done = run(light_env / "bin" / "python", "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["file"].startswith(str(light_env)), "the installed package answered, not the source tree"
    assert answer["missing"] == list(OPERATOR_ONLY), "the light install pulled in an operator dependency"


@pytest.mark.parametrize("args", [["--help"], ["get", "--help"], ["submit", "--help"], ["--version"]])
def test_the_cli_runs(light_env, tmp_path, args):
    done = run(light_env / "bin" / "rolloutbatch", *args, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout and not done.stderr, done


def test_the_kubectl_plugin_runs(light_env, tmp_path):
    done = run(light_env / "bin" / "kubectl-rolloutbatch", "--help", cwd=tmp_path)
    assert done.returncode == 0 and "kubectl rolloutbatch" in done.stdout, done


def test_the_operator_names_its_extra(light_env, tmp_path):
    done = run(light_env / "bin" / "rolloutbatch", "operator", "--help", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done
    assert done.stderr == ("rolloutbatch operator: error: kopf is not installed: the operator's dependencies are "
                           "an extra (pip install 'rolloutbatch[operator]')\n")


def resolve(wheel_spec: str, python: str, tmp_path: pathlib.Path, check: bool = True):
    report = tmp_path / f"report-{python}.json"
    done = pip(sys.executable, "install", "--dry-run", "--ignore-installed", "--quiet", "--python-version", python,
               "--only-binary=:all:", "--report", str(report), wheel_spec, check=check)
    return done, (json.loads(report.read_text()) if done.returncode == 0 else None)


def test_the_light_install_resolves_for_python_3_10(wheel, tmp_path):
    _, report = resolve(str(wheel), "3.10", tmp_path)
    names = {item["metadata"]["name"].lower().replace("_", "-") for item in report["install"]}
    assert {"rolloutbatch", "pykube-ng", "requests", "pyyaml", "rich", "aiohttp"} <= names, names
    assert not names & {"kopf", "prometheus-client"}, names


def test_the_operator_extra_refuses_python_3_10(wheel, tmp_path):
    done, _ = resolve(f"{wheel}[operator]", "3.10", tmp_path, check=False)
    assert done.returncode != 0 and "No matching distribution found for kopf" in done.stderr, done
    assert "Requires-Python >=3.11" in done.stderr, done.stderr
