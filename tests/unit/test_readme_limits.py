"""README's "Limits an episode can hit" says the numbers the core enforces: each row names its
constant, and its value is that constant's."""
from __future__ import annotations

import importlib
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
# Every limit an episode can hit: the table must list each of these.
REQUIRED = {
    "core.vocabulary.LOG_LIMIT_BYTES", "core.vocabulary.LOG_TAIL_BYTES", "core.vocabulary.SUCCESS_LOG_TAIL_BYTES",
    "core.events.MAX_LINE_BYTES", "core.events.MAX_EVENTS_PER_KIND", "core.events.MAX_TERMINATION_MESSAGE_BYTES",
    "core.events.MAX_EXTRA_FIELD_BYTES", "core.events.MAX_EXTRA_BYTES", "core.events.MAX_DROPPED_NAMES",
    "core.model.MAX_ABS_REWARD", "core.verdict.CLOCK_SKEW_TOLERANCE_SECONDS", "core.results.GZIP_ABOVE",
    "core.result_shards.SHARD_BYTES",
}
UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024 ** 2, "s": 1, "": 1}


def table_rows() -> list[list[str]]:
    text = README.read_text()
    section = text.split("### Limits an episode can hit", 1)[1].split("\n#", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def value_of(cell: str) -> float:
    power = re.fullmatch(r"10\^(\d+)", cell)
    if power:
        return 10.0 ** int(power.group(1))
    found = re.fullmatch(r"([\d,]+(?:\.\d+)?)\s*(bytes|KiB|MiB|s|)", cell)
    assert found, f"unreadable value {cell!r}"
    return float(found.group(1).replace(",", "")) * UNITS[found.group(2)]


def constant(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(f"rolloutbatch.{module}"), name)


def test_every_limit_is_listed_with_the_constants_value():
    rows = table_rows()
    named = {}
    for row in rows:
        found = re.match(r"`(core\.[a-z_]+\.[A-Z_]+)`", row[2])
        assert found, f"row names no core constant: {row}"
        named[found.group(1)] = row[1]
    assert REQUIRED <= set(named), f"limits missing from README: {sorted(REQUIRED - set(named))}"
    wrong = {name: (cell, constant(name)) for name, cell in named.items() if value_of(cell) != constant(name)}
    assert not wrong, f"README says other numbers than the core: {wrong}"


def test_the_settings_read_the_tail_the_core_keeps():
    from rolloutbatch.core import vocabulary as v
    from rolloutbatch.service.context import Settings

    assert Settings().log_tail_bytes == v.LOG_TAIL_BYTES >= v.SUCCESS_LOG_TAIL_BYTES
    assert Settings().log_limit_bytes == v.LOG_LIMIT_BYTES


def test_every_test_file_the_readme_names_exists():
    """The threat tables cite the tests that prove each row: a renamed file leaves a dangling one."""
    import re
    root = pathlib.Path(__file__).resolve().parents[2]
    named = set(re.findall(r"`(tests/[\w/]+\.py)`", (root / "README.md").read_text()))
    assert named and sorted(p for p in named if not (root / p).exists()) == []
