"""The dependencies in pyproject.toml are exactly what the package's two parts import.

- ``[project].dependencies`` (``pip install rolloutbatch``) == what the SDK and the CLI import,
  with everything they import in turn (``tests/support/package_imports.py`` walks the source);
- the ``operator`` extra == what the rest of the package (the operator) imports beyond that.

An undeclared import works only while something else happens to pull the package in; a declared
package nothing imports (the kubernetes client once) is installed into every image for nothing;
and an operator dependency in the base makes every trainer install kopf.
"""
import re
import tomllib

from tests.support import package_imports as pi

PROJECT = tomllib.loads((pi.SOURCE.parent / "pyproject.toml").read_text())["project"]
# Distributions whose import name is not their project name.
MODULE_OF = {"pykube-ng": "pykube", "pyyaml": "yaml", "prometheus-client": "prometheus_client"}
OPERATOR_LAYERS = ("rolloutbatch.runner", "rolloutbatch.service", "rolloutbatch.handlers", "rolloutbatch.metrics",
                   "rolloutbatch.metrics_collectors")


def declared(requirements: list[str]) -> dict[str, str]:
    """Import name -> the requirement declaring it."""
    out = {}
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0).lower().replace("_", "-")
        out[MODULE_OF.get(name, name.replace("-", "_"))] = requirement
    return out


def compare(have: dict[str, str], need: dict[str, str], where: str) -> None:
    undeclared = {name: module for name, module in need.items() if name not in have}
    unused = {name: requirement for name, requirement in have.items() if name not in need}
    assert not undeclared, f"imported but not in {where}: {undeclared}"
    assert not unused, f"in {where} but imported by nothing that needs it: {unused}"


def test_the_light_part_is_the_sdk_and_the_cli_without_the_operator():
    edges = pi.graph()
    light = pi.light_modules(edges)
    assert {"rolloutbatch.sdk.aio", "rolloutbatch.cli.main", "rolloutbatch.kube.client",
            "rolloutbatch.core.spec", "rolloutbatch"} <= light   # the walk sees the package
    assert not {m for m in light if m.startswith(OPERATOR_LAYERS)}, "the SDK or the CLI imports the operator"
    # The only way from the light part into the rest is `rolloutbatch operator`.
    doors = {(m, t) for m in light for t in edges[m] if t not in light}
    assert doors == {pi.OPERATOR_ENTRY}, doors


def test_closure_follows_parent_packages_and_not_the_cut():
    edges = {"p": set(), "p.a": {"p.b"}, "p.b": set(), "p.c": {"q"}, "q": set(), "p.s": set(), "p.s.x": {"p.c"}}
    assert pi.closure({"p.s.x"}, edges) == {"p.s.x", "p.s", "p", "p.c", "q"}
    assert pi.closure({"p.s.x"}, edges, cut=("p.c", "q")) == {"p.s.x", "p.s", "p", "p.c"}


def test_base_dependencies_are_exactly_what_the_sdk_and_the_cli_import():
    need = pi.third_party(pi.light_modules())
    assert {"yaml", "rich", "aiohttp", "pykube"} <= set(need)
    assert "kopf" not in need and "prometheus_client" not in need
    compare(declared(PROJECT["dependencies"]), need, "[project].dependencies")


def test_the_operator_extra_is_exactly_what_the_operator_adds():
    light = pi.light_modules()
    base = declared(PROJECT["dependencies"])
    need = {name: module for name, module in pi.third_party(set(pi.modules()) - light).items() if name not in base}
    assert {"kopf", "prometheus_client"} <= set(need)
    compare(declared(PROJECT["optional-dependencies"]["operator"]), need, "the operator extra")


def test_the_kubernetes_client_is_a_test_dependency_only():
    assert "kubernetes" not in declared(PROJECT["dependencies"])
    assert "kubernetes" not in declared(PROJECT["optional-dependencies"]["operator"])
    assert any(r.startswith("kubernetes") for r in PROJECT["optional-dependencies"]["dev"])
