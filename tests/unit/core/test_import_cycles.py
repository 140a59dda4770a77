"""No import circle inside the rolloutbatch package: its modules form a layered graph.

Imports inside functions count too: deferring an import hides a circle from Python, not from
whoever has to change the two modules.
"""
import ast
import graphlib
import pathlib

SOURCE = pathlib.Path(__file__).resolve().parents[3] / "operator"
PACKAGE = SOURCE / "rolloutbatch"


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The rolloutbatch modules ``name`` imports (``from pkg import submodule`` is the submodule)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:   # `import a.b.c` of a name: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


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
