"""The benchmark's figures have one home: the "Current figures" table of bench/README.md.

Each line of that table names the file of bench/results/ and the key its figure is rounded from,
so the text cannot drift from what was recorded: a figure typed wrong, or a results file rerun
without its line, fails here, and so does a "met" or "missed" that its target contradicts.
README.md and docs/ link to the table instead of restating it: a figure copied there would go
stale the next time the benchmark runs (the README once said a 30,000-episode batch and a ratio
were met while docs/design.md said the run was not done and the ratio missed). So no decimal
figure of the table may appear in them, nor a per-episode cost or a ratio to a bare Job written
as a number (a target, "<= 2 ms", is not a measurement and may).
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH_README = REPO / "bench" / "README.md"
RESULTS = REPO / "bench" / "results"
ELSEWHERE = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_NUMBER = re.compile(r"^(?P<number>\d[\d,]*(?:\.\d+)?)(?: (?P<unit>[A-Za-z]+))?$")
_TARGET = re.compile(r"^<= (?P<bound>\d+(?:\.\d+)?)(?: [A-Za-z]+)?: (?P<verdict>met|missed)$")
_SOURCE = re.compile(r"^`(?P<file>[^`]+\.json)` `(?P<path>[^`]+)`$")


def _table() -> list[dict[str, str]]:
    """The rows of the "Current figures" table, as {what, figure, source, target}."""
    text = BENCH_README.read_text()
    section = text.split("\n## Current figures\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| what ") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 4, f"a line of the table has 4 cells: {line}"
        rows.append(dict(zip(("what", "figure", "source", "target"), cells)))
    return rows


def _recorded(source: str):
    m = _SOURCE.match(source)
    assert m, f"'recorded in' names a results file and a key path: {source!r}"
    value = json.loads((RESULTS / m["file"]).read_text())
    for key in m["path"].split("/"):
        if key == "*":
            assert isinstance(value, dict) and len(value) == 1, f"{source}: '*' stands for a single key"
            (value,) = value.values()
        else:   # a list's item by its index (a run of `--repeats`: runs/0)
            value = value[int(key)] if isinstance(value, list) and key.isdigit() else value[key]
    return value


def _rounded(value: float, like: str) -> Decimal:
    """``value`` rounded half-up to the decimals ``like`` is written with (from its decimal text:
    6.355 is 6.36 as anyone reading the file rounds it, not the binary float's 6.35)."""
    places = len(like.partition(".")[2])
    return Decimal(str(value)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


TABLE = _table()


def test_the_table_is_there_and_linked_from_the_readme():
    assert len(TABLE) >= 20
    readme = (REPO / "README.md").read_text()
    assert "bench/README.md#current-figures" in readme


@pytest.mark.parametrize("row", TABLE, ids=[r["what"][:60] for r in TABLE])
def test_each_figure_is_what_its_results_file_records(row):
    recorded = _recorded(row["source"])
    figure = row["figure"]
    if figure in ("yes", "no"):
        assert recorded is (figure == "yes"), f"{row['what']}: {row['source']} records {recorded!r}"
        return
    m = _NUMBER.match(figure)
    assert m, f"{row['what']}: a figure is a number with an optional unit, or yes/no: {figure!r}"
    written = m["number"].replace(",", "")
    assert isinstance(recorded, (int, float)) and not isinstance(recorded, bool), row["source"]
    assert _rounded(recorded, written) == Decimal(written), \
        f"{row['what']}: the table says {figure}, {row['source']} records {recorded}"
    if row["target"]:
        t = _TARGET.match(row["target"])
        assert t, f"{row['what']}: a target reads '<= N[ unit]: met' or '... missed': {row['target']!r}"
        met = Decimal(str(recorded)) <= Decimal(t["bound"])
        assert t["verdict"] == ("met" if met else "missed"), \
            f"{row['what']}: {recorded} against {row['target']}"


def _figures_to_keep_home() -> list[str]:
    """The table's figures that cannot be mistaken for anything else: a decimal, or a number with
    its unit (an episode count such as 30,000 is also a batch's size, said everywhere)."""
    out = []
    for row in TABLE:
        m = _NUMBER.match(row["figure"])
        if m and ("." in m["number"] or m["unit"]):
            out.append(m["number"])
    return out


# Benchmark measurements by their wording: a cost per episode, a rate, a ratio to a bare Job,
# written with a number that is not a target's bound ("<= 2 ms").
_START = r"(?<![\w.,])(?<!<= )(?<!≤ )"   # a whole number, not a target's bound
_PER_EPISODE = r"(?: [\w-]+){0,3} (?:per|/) (?:[\w-]+ )?episode"   # "per termination-message episode"
_MEASUREMENT = re.compile(
    _START + r"\d+(?:\.\d+)? ?ms" + _PER_EPISODE
    + r"|" + _START + r"\d+(?:\.\d+)? (?:API )?requests?" + _PER_EPISODE
    + r"|" + _START + r"\d+(?:\.\d+)? episodes/s"
    + r"|" + _START + r"\d+\.\d+x (?:a |the )?bare")


@pytest.mark.parametrize("path", ELSEWHERE, ids=[str(p.relative_to(REPO)) for p in ELSEWHERE])
def test_other_docs_link_to_the_figures_instead_of_restating_them(path):
    text = path.read_text()
    where = path.relative_to(REPO)

    def line(m: re.Match) -> int:
        return text.count("\n", 0, m.start()) + 1

    found = [f"{where}:{line(m)} states {number}, a figure of the table"
             for number in _figures_to_keep_home()
             for m in re.finditer(rf"(?<![\d.,]){re.escape(number)}(?![\d])", text)]
    found += [f"{where}:{line(m)} states a measurement: {' '.join(m.group(0).split())!r}"
              for m in _MEASUREMENT.finditer(text)]
    found = list(dict.fromkeys(found))
    assert not found, ("bench/README.md's 'Current figures' holds the benchmark's figures; link to it "
                       "instead:\n" + "\n".join(found))
