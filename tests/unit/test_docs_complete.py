"""The documentation against the code: every stall reason is named where a user decodes
`status.reason`, the design's command list is the CLI's, and what the CRD tells `kubectl explain`
about egress peers is what parse_spec refuses."""
from __future__ import annotations

import argparse
import pathlib
import re

import pytest

from rolloutbatch.cli.main import build_parser
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.crd import openapi_schema
from rolloutbatch.core.spec import SpecError, parse_spec

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DESIGN = (ROOT / "docs" / "design.md").read_text()


def _stall_section() -> str:
    return README.split("### Why a batch stalls", 1)[1].split("\n## ", 1)[0]


def test_why_a_batch_stalls_names_every_stall_reason():
    """README's "Why a batch stalls" is where a user decodes `status.reason`: every reason."""
    section = _stall_section()
    missing = [str(r) for r in v.STALL_REASONS if f"`{r}`" not in section]
    assert missing == [], f"README's 'Why a batch stalls' misses stall reasons: {missing}"


def test_readme_names_every_stall_reason_somewhere():
    missing = [str(r) for r in v.STALL_REASONS if f"`{r}`" not in README]
    assert missing == [], f"stall reasons README never names: {missing}"


def _subcommands() -> set[str]:
    parser = build_parser(operator=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name for name, p in sub.choices.items() if p.prog.endswith(" " + name)} - {"ls"}


def test_design_commands_section_lists_every_subcommand():
    """docs/design.md §10 lists every subcommand the CLI has."""
    listed = re.search(r"`rolloutbatch ([a-z|]+)`", DESIGN.split("## 10. Commands", 1)[1]).group(1).split("|")
    assert sorted(_subcommands() - set(listed)) == [], f"§10 lists {listed}; the CLI has {sorted(_subcommands())}"


def test_crd_egress_peer_description_says_operator_stamped_labels_name_nothing():
    """A selector on a label the operator stamps is refused, and `kubectl explain` says so."""
    base = {"episodes": 1, "task": {"files": {"episode.py": "x"}}}
    peer = {"namespaceSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "rolloutbatch"}}}
    with pytest.raises(SpecError):
        parse_spec(dict(base, isolation={"egress": [{"to": [peer]}]}))
    spec = openapi_schema()["properties"]["spec"]
    text = spec["properties"]["isolation"]["properties"]["egress"]["items"]["properties"]["to"]["description"]
    assert re.search(r"stamp|managed-by|operator's own", text), text


def test_the_typed_row_names_every_field_a_row_can_have():
    """README: rows are typed (rolloutbatch.sdk.Row). EpisodeResult.to_row wrote `channel` and
    `agent` (a verified episode's record), which the TypedDict lacked: a type-checked trainer's
    row["channel"] was an error."""
    import typing

    from rolloutbatch.core.model import EpisodeResult
    from rolloutbatch.sdk import Row
    full = EpisodeResult(index=0, pod="p", node="n", image_id="i", outcome="failed", reason="NonZeroExit", message="m",
                         reward=1.0, pod_created=1.0, ready_at=2.0, reward_at=3.0, pod_to_ready_seconds=1.0,
                         log_tail="t", extra={"a": 1}, flags=("f",), channel="log",
                         agent={"exit_code": 0, "timed_out": False}, session={"commands": 1})
    written = set(full.to_row(0.0))
    assert written - set(typing.get_type_hints(Row)) == set()
