"""The core is pure: no framework or I/O imports (docs/design.md §2)."""
import ast
import pathlib

CORE = pathlib.Path(__file__).resolve().parents[3] / "operator" / "rolloutbatch" / "core"
FORBIDDEN = {"kopf", "kubernetes", "pykube", "prometheus_client", "requests", "aiohttp", "rolloutbatch.kube",
             "rolloutbatch.handlers", "rolloutbatch.service", "rolloutbatch.metrics", "rolloutbatch.metrics_collectors"}


def imported(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_core_imports_nothing_impure():
    bad = [(p.name, name) for p in CORE.glob("*.py") for name in imported(p)
           if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad
