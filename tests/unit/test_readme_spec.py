"""README's spec table says the defaults the CRD states: every field the CRD defaults is listed,
with that default (the CRD's come from core.defaults, so the table follows them); its status
table, its condition reasons and its episode reason table say the phases and reasons of core.vocabulary."""
from __future__ import annotations

import pathlib
import re

from rolloutbatch.core import vocabulary as v
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


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n### {title}\n")
    return text[start:text.index("\n### ", start + 1)]


def test_the_status_table_lists_every_phase_in_order():
    row = next(line for line in _section("status").splitlines() if line.startswith("| `phase`"))
    listed = [p for p in re.findall(r"`(\w+)`", row) if p != "phase"]
    assert listed[:len(v.PHASES)] == list(v.PHASES), row


def test_the_condition_reasons_listed_are_a_batchs():
    """The reasons a user matches in alerts or `kubectl get rb -o jsonpath`: a batch's own
    (core.vocabulary BatchReason, StallReason), not an episode row's (JobFailed was listed)."""
    listed = re.search(r"Reasons\s+include(.*?)\.\n", _section("Conditions and printer columns"), re.S).group(1)
    reasons = re.findall(r"`(\w+)`", listed)
    assert reasons and [r for r in reasons if r not in (*v.BATCH_REASONS, *v.STALL_REASONS)] == [], reasons


def episode_reason_rows() -> dict[str, str]:
    """Reason -> meaning, from the table headed `| reason | meaning |` in "The episode contract"."""
    text = README.read_text()
    start = text.index("| reason | meaning |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        for reason in cells[0].replace("`", "").split(","):
            rows[reason.strip()] = cells[1]
    return rows


def test_the_episode_reason_table_lists_exactly_the_episode_reasons():
    """A trainer filters rows on reason: every reason a row can carry has its line, and no other."""
    assert sorted(episode_reason_rows()) == sorted(v.EPISODE_REASONS)


def test_the_reason_the_table_gives_for_the_batch_deadline_is_the_one_rows_carry():
    """An episode the batch's activeDeadlineSeconds ends is judged BatchTimeout, not Timeout."""
    from rolloutbatch.core.verdict import judge_episode
    from rolloutbatch.core.pod_reading import pod_facts
    from tests.unit.core.test_verdict import DEADLINE, READY, killed_pod, log_of

    result = judge_episode(pod_facts(killed_pod()), log_of(READY), batch_deadline_at=DEADLINE)
    assert result.reason == v.EP_BATCH_TIMEOUT
    said = [reason for reason, meaning in episode_reason_rows().items() if "batch deadline" in meaning
            or "activeDeadlineSeconds" in meaning]
    assert said == [result.reason], f"README names {said} for the batch deadline; the row says {result.reason}"
