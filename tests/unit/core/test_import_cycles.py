"""No import circle inside the rolloutbatch package, nor among the scripts beside it (bench/,
devcluster/, the tests): their modules form a layered graph.

Imports inside functions count too: deferring an import hides a circle from Python, not from
whoever has to change the two modules.
"""
import graphlib
import pathlib

import pytest

from tests.support.package_imports import imported, modules

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_resolves_package_and_relative_imports(tmp_path):
    known = {"rolloutbatch", "rolloutbatch.sdk", "rolloutbatch.sdk.ops", "rolloutbatch.cli.batches",
             "rolloutbatch.cli.follow"}
    path = tmp_path / "batches.py"
    path.write_text("from rolloutbatch.sdk import ops, Client\nfrom . import follow\nimport rolloutbatch\n"
                    "def f():\n    from .follow import watch_handles\n")
    assert imported("rolloutbatch.cli.batches", path, known) == {
        "rolloutbatch.sdk.ops", "rolloutbatch.sdk", "rolloutbatch.cli.follow", "rolloutbatch"}


def test_rolloutbatch_has_no_import_circle():
    found = modules()
    assert "rolloutbatch.cli.batches" in found and "rolloutbatch.core.k8s_rules" in found
    graph = {name: imported(name, path, set(found)) for name, path in found.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle: {' -> '.join(exc.args[1])}") from None


def _tree_modules(root: pathlib.Path, package: str | None) -> dict[str, pathlib.Path]:
    """Dotted name -> file for every module under ``root``: ``package.sub.mod`` for a package, or
    the bare file name for a directory of scripts that import each other by it (bench/)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(([package] if package else []) + list(parts)) or package] = path
    return out


@pytest.mark.parametrize("directory, package", [("bench", None), ("devcluster", "devcluster"),
                                                ("tests", "tests")])
def test_the_scripts_beside_the_package_have_no_import_circle(directory, package):
    found = _tree_modules(ROOT / directory, package)
    assert len(found) > 3, directory
    graph = {name: imported(name, path, set(found)) for name, path in found.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle in {directory}/: {' -> '.join(exc.args[1])}") from None


def test_a_circle_between_scripts_is_seen(tmp_path):
    (tmp_path / "run.py").write_text("import modes\n")
    (tmp_path / "modes.py").write_text("def f():\n    from run import main\n")
    found = _tree_modules(tmp_path, None)
    graph = {name: imported(name, path, set(found)) for name, path in found.items()}
    assert graph == {"run": {"modes"}, "modes": {"run"}}
