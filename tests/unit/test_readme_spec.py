"""README's spec table says the defaults the CRD states: every field the CRD defaults is listed,
with that default (the CRD's come from core.defaults, so the table follows them)."""
from __future__ import annotations

import pathlib

from rolloutbatch.core.crd import openapi_schema
from tests.support.crd_schema import defaults

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def spec_rows() -> dict[str, str]:
    """Field path (e.g. ``task.mountPath``) -> its default cell."""
    section = README.read_text().split("\n### spec\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return {row[0].strip("`"): row[1] for row in cells}


def test_every_crd_default_is_in_the_table():
    rows = spec_rows()
    for path, value in defaults(openapi_schema()["properties"]["spec"]):
        if value == {}:
            continue   # an object defaulted so that its fields get theirs
        cell = rows[path]
        if isinstance(value, dict):   # resources: "requests `cpu: 100m, memory: 64Mi`, limits ..."
            for kind, amounts in value.items():
                assert f"{kind} `" + ", ".join(f"{k}: {v}" for k, v in amounts.items()) + "`" in cell, path
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            assert cell == f"`{shown}`", (path, cell, value)
