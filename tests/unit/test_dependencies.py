"""The runtime dependencies in pyproject.toml are exactly the packages operator/rolloutbatch imports.

An undeclared import works only while something else happens to pull the package in; a declared
package nothing imports (the kubernetes client once) is installed into every image for nothing.
"""
import ast
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "rolloutbatch"
# Distributions whose import name is not their project name.
MODULE_OF = {"pykube-ng": "pykube", "pyyaml": "yaml", "prometheus-client": "prometheus_client"}


def declared() -> dict[str, str]:
    """Import name -> the requirement declaring it, from [project].dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0).lower().replace("_", "-")
        out[MODULE_OF.get(name, name.replace("-", "_"))] = requirement
    return out


def imported() -> dict[str, str]:
    """Top-level third-party import name -> one module importing it (imports inside functions too)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top != "rolloutbatch" and top not in sys.stdlib_module_names:
                    out.setdefault(top, str(path.relative_to(ROOT)))
    return out


def test_runtime_dependencies_are_exactly_the_runtime_imports():
    have, need = declared(), imported()
    assert {"kopf", "yaml", "rich"} <= set(need)   # the walk sees the package
    undeclared = {name: where for name, where in need.items() if name not in have}
    unused = {name: requirement for name, requirement in have.items() if name not in need}
    assert not undeclared, f"imported but not in [project].dependencies: {undeclared}"
    assert not unused, f"in [project].dependencies but imported by nothing under operator/rolloutbatch: {unused}"


def test_the_kubernetes_client_is_a_test_dependency_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "kubernetes" not in declared()
    assert any(r.startswith("kubernetes") for r in project["optional-dependencies"]["dev"])
