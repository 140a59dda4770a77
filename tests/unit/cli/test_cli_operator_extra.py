"""`rolloutbatch operator` without its extra, or below its Python, ends with one line naming the fix.

The light install (``pip install rolloutbatch``) has every other command; tests/unit/test_light_install.py
runs it in a fresh venv. Here the same two refusals without one: kopf hidden from the import system,
and a floor above the running interpreter.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from rolloutbatch.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("missing", ["kopf", "prometheus_client"])
def test_a_missing_operator_dependency_names_the_extra(missing):
    # None in sys.modules makes `import kopf` raise ModuleNotFoundError, as on a light install.
    code = (f"import sys; sys.modules[{missing!r}] = None\n"
            "from rolloutbatch.cli.main import main\nsys.exit(main(['operator', '--help']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr == (f"rolloutbatch operator: error: {missing} is not installed: the operator's dependencies "
                           "are an extra (pip install 'rolloutbatch[operator]')\n")


def test_other_commands_do_not_need_the_extra():
    code = ("import sys; sys.modules['kopf'] = sys.modules['prometheus_client'] = None\n"
            "from rolloutbatch.cli.main import main\nsys.exit(main(['get', '--help']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc


def test_below_the_operators_python_floor(monkeypatch, capsys):
    monkeypatch.setattr(main, "OPERATOR_PYTHON", (sys.version_info.major, sys.version_info.minor + 1))
    with pytest.raises(SystemExit) as exc:
        main.main(["operator", "--help"])
    floor = f"{sys.version_info.major}.{sys.version_info.minor + 1}"
    assert exc.value.code == (f"rolloutbatch operator: error: needs Python >= {floor} (this is "
                              f"{sys.version.split()[0]}); the SDK and the other commands run here")
    assert capsys.readouterr().out == ""


def test_the_floor_is_kopfs():
    # The pinned kopf's own Requires-Python is what the check stands for.
    from importlib.metadata import metadata
    assert metadata("kopf")["Requires-Python"] == ">=" + ".".join(map(str, main.OPERATOR_PYTHON))
