"""The demo's and the CLI's summaries are readable at any width and in a pipe: no metric name cut."""
from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from rolloutbatch import demo
from rolloutbatch.cli import render
from rolloutbatch.cli.summary import print_summaries

ROOT = pathlib.Path(__file__).resolve().parents[3]
NAMES = [name for name, _ in render.SUMMARY_FIELDS]
STATUS = {"phase": "Succeeded", "episodes": 10, "succeededEpisodes": 10, "failedEpisodes": 0, "rewardSum": 9.75,
          "rewardMean": 0.975, "batchToAllReadySeconds": 12.345, "batchToAllRewardsSeconds": 41.5,
          "jobCompleteSeconds": 43.25, "podToReadySeconds": {"p50": 1.234, "p95": 2.5, "max": 3.125},
          "message": "10 of 10 episodes succeeded"}


class Handle:
    def __init__(self, name):
        self.name, self.namespace, self.status, self.obj = name, "demo-abc123", dict(STATUS), {}


HANDLES = [Handle(n) for n in ("shipping-fix-parallel", "shipping-fix-serial", "shipping-fix-model")]


def demo_summary(console):
    demo.print_summary(console, HANDLES)


def cli_summary(console):
    print_summaries(console, HANDLES)


def assert_readable(text: str) -> None:
    lines = text.splitlines()
    for name in NAMES:
        assert any(name in line for line in lines), f"{name} cut or missing in:\n{text}"
    assert "…" not in text
    for handle in HANDLES:
        assert handle.name in text


def assert_fits(text: str, width: int) -> None:
    # The table's lines fit (the CLI's one-line status messages are soft-wrapped on purpose, so not
    # those); only a lone word longer than the console, a metric name or a batch's name, goes
    # past its edge, whole.
    for line in text.splitlines():
        if any(n in line for n in NAMES if "_" in n) or any(h.name in line for h in HANDLES):
            if not line.strip().startswith(tuple(f"{h.namespace}/" for h in HANDLES)):
                assert len(line) <= width or len(line.split()) == 1, (width, line)


@pytest.mark.parametrize("render_summary", [demo_summary, cli_summary], ids=["demo", "cli"])
@pytest.mark.parametrize("width", [20, 29, 40, 60, 80, 100, 200])
def test_every_metric_name_is_whole_at_any_width(render_summary, width):
    out = io.StringIO()
    render_summary(Console(file=out, width=width, highlight=False))
    assert_readable(out.getvalue())
    assert_fits(out.getvalue(), width)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([demo_summary, cli_summary]), st.integers(20, 300),
       st.lists(st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40),
                min_size=1, max_size=4, unique=True))
@example(demo_summary, 44, [":V:"]).via("a name rich read as an emoji code")
@example(cli_summary, 44, [":v:", "[b]x"]).via("emoji code and markup in names")
def test_every_metric_name_is_whole_at_any_width_for_any_batches(render_summary, width, names):
    handles = [Handle(name) for name in names]
    out = io.StringIO()
    console = Console(file=out, width=width, highlight=False, markup=False)
    if render_summary is demo_summary:
        demo.print_summary(console, handles)
    else:
        print_summaries(console, handles)
    text = out.getvalue()
    lines = text.splitlines()
    for name in NAMES:
        assert any(name in line for line in lines), f"{name} cut or missing at width {width}:\n{text}"
    assert "…" not in text
    for handle in handles:
        assert any(handle.name in line for line in lines), handle.name


@pytest.mark.parametrize("render_summary", [demo_summary, cli_summary], ids=["demo", "cli"])
def test_every_metric_name_is_whole_through_a_file(render_summary, tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)   # a pipe or a CI log: rich falls back to 80 columns
    path = tmp_path / "summary.log"
    with path.open("w") as file:
        console = Console(file=file, highlight=False)
        assert not console.is_terminal
        render_summary(console)
    assert_readable(path.read_text())


def test_the_cli_console_piped_to_a_process():
    code = ("from tests.unit.cli.test_summary_width import HANDLES, print_summaries;"
            "from rolloutbatch.cli.common import make_console; print_summaries(make_console(), HANDLES)")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=ROOT).stdout
    assert_readable(out)


def test_side_by_side_when_it_fits():
    out = io.StringIO()
    demo_summary(Console(file=out, width=200, highlight=False))
    row = next(line for line in out.getvalue().splitlines() if "batch_to_all_ready_seconds" in line)
    assert row.count("12.345") == len(HANDLES)
