"""The rolloutbatch package's import graph, read from its source with ``ast`` (nothing is imported).

Imports inside functions count: a deferred import still runs when its function does, so it
belongs to whatever calls that function. Importing ``a.b.c`` runs ``a`` and ``a.b`` first, so a
module's closure holds its parent packages too.

The package has two parts, and the split is computed here, never listed by hand:

- the light part, what ``pip install rolloutbatch`` must run: ``rolloutbatch.sdk`` and
  ``rolloutbatch.cli`` with everything they import (``core``, ``kube``, ...), on Python 3.10;
- the rest: the operator (``runner``, ``service``, ``handlers``, ``metrics``, ...), which needs
  the ``operator`` extra and Python 3.11.

The one door from the light part into the rest is ``rolloutbatch operator``: ``cli.main`` imports
``rolloutbatch.runner`` only for that command, behind a check that the extra is installed. The walk
stops at that edge (``OPERATOR_ENTRY``) and at no other.
"""
from __future__ import annotations

import ast
import pathlib
import sys

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "operator"
PACKAGE = SOURCE / "rolloutbatch"
LIGHT_ROOTS = ("rolloutbatch.sdk", "rolloutbatch.cli")
OPERATOR_ENTRY = ("rolloutbatch.cli.main", "rolloutbatch.runner")


def modules() -> dict[str, pathlib.Path]:
    """Dotted module name -> its file, for every module of the package."""
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


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(name, path, set(found)) for name, path in found.items()}


def _parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def closure(roots: set[str], edges: dict[str, set[str]], cut: tuple[str, str] | None = None) -> set[str]:
    """Every module importing ``roots`` runs, their parent packages included; ``cut`` is an edge not followed."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += {t for t in edges[name] if (name, t) != cut} | _parents(name)
    return seen


def light_modules(edges: dict[str, set[str]] | None = None) -> set[str]:
    """The modules ``pip install rolloutbatch`` runs: the SDK, the CLI and all they import."""
    edges = graph() if edges is None else edges
    roots = {name for name in edges if any(name == r or name.startswith(r + ".") for r in LIGHT_ROOTS)}
    return closure(roots, edges, cut=OPERATOR_ENTRY)


def third_party(names: set[str]) -> dict[str, str]:
    """Top-level import name of every non-stdlib, non-rolloutbatch import -> one module importing it."""
    paths = modules()
    out = {}
    for name in sorted(names):
        for node in ast.walk(ast.parse(paths[name].read_text(), str(paths[name]))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [node.module]
            else:
                continue
            for target in targets:
                top = target.partition(".")[0]
                if top != "rolloutbatch" and top not in sys.stdlib_module_names:
                    out.setdefault(top, name)
    return out
