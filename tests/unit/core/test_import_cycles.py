"""No import circle inside the rolloutbatch package: its modules form a layered graph.

Imports inside functions count too: deferring an import hides a circle from Python, not from
whoever has to change the two modules.
"""
import graphlib

from tests.support.package_imports import imported, modules


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
