"""The live progress of ``watch`` and ``submit --watch``: one line per batch, at any width.

The counts (finished/episodes, running, failed, lost, reward) are what a person watches for, so
they are never cut: as the terminal narrows, decoration goes first (the elapsed time, then the
bar), then words get shorter (labels, then the phase), then the batch's name is shortened, and
at last a batch takes several lines. Every line fits the width. ``running`` is the live count
(``status.runningEpisodes``); ``readyEpisodes`` trails while episodes run (an episode's ready
event is read when its pod ends), so it is not shown.

rich's Progress columns do not degrade this way: at 80 columns they cut the text column and
dropped the counts after it (a table of columns shrinks each one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from rolloutbatch.cli.render import progress_counts, waiting_note

BAR_MIN, BAR_MAX = 10, 40
NAME_MIN = 8               # a name is shortened to no less than this (with "…")
PHASE_WIDTH = 10           # the longest phase, "Collecting": names and bars stay aligned
LONG = ("running", "failed", "lost", "reward")
SHORT = ("run", "fail", "lost", "rwd")
# (bar, elapsed, phase, labels, shorten name): the richest first
LAYOUTS = (
    (True, True, True, LONG, False),
    (True, False, True, LONG, False),
    (False, False, True, LONG, False),
    (False, False, True, SHORT, False),
    (False, False, False, SHORT, False),
    (False, False, False, SHORT, True),
)
Segment = tuple[str, str]  # (text, rich style)


def elapsed_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def count_tokens(status: Mapping | None, labels: Sequence[str]) -> list[str]:
    """The counts, each one whole token."""
    c = progress_counts(status)
    values = (c["running"], c["failed"], c["lost"], c["reward"])
    return [f"{c['finished']}/{c['total']}"] + [f"{label} {value}" for label, value in zip(labels, values)]


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells (a wide character counts two), ending "…" when cut."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)).rstrip() + "…"


def _lines_for(rows: Sequence[tuple[str, Mapping]], width: int, elapsed: float,
               layout: tuple) -> list[list[Segment]] | None:
    """One line per batch in ``layout``, or None when one of them does not fit ``width``."""
    bar, clock, phase, labels, shorten = layout
    name_width = max(cell_len(name) for name, _ in rows)
    tails = []
    for _, status in rows:
        parts = count_tokens(status, labels)
        if phase:
            parts.insert(1, f"{progress_counts(status)['phase']:<{PHASE_WIDTH}}")
        if clock:
            parts.append(elapsed_text(elapsed))
        tails.append(" ".join(parts))
    tail_width = max(cell_len(t) for t in tails)
    room = width - tail_width - 1                       # for the name (and the bar): one space before the tail
    bar_width = 0
    if bar:
        bar_width = min(BAR_MAX, room - name_width - 1)
        if bar_width < BAR_MIN:
            return None
    elif shorten:
        name_width = min(name_width, room)
        if name_width < NAME_MIN:
            return None
    elif name_width > room:
        return None
    lines = []
    for (name, status), tail in zip(rows, tails):
        line: list[Segment] = [(f"{_cut(name, name_width):<{name_width}}", "bold")]
        if bar:
            c = progress_counts(status)
            total = c["total"] if isinstance(c["total"], int) else 0
            done = round(bar_width * c["finished"] / total) if total > 0 else 0
            done = max(0, min(bar_width, done))
            line += [(" ", ""), ("━" * done, "bar.complete"), ("━" * (bar_width - done), "bar.back")]
        line += [(" ", ""), (tail, "")]
        lines.append(line)
    return lines


def _folded(name: str, status: Mapping, width: int) -> list[list[Segment]]:
    """The last resort: the name on a line of its own, then the counts, as many to a line as fit."""
    lines: list[list[Segment]] = [[(_cut(name, width), "bold")]]
    current = ""
    tokens = []
    for token in count_tokens(status, SHORT):     # a token wider than a line (a reward of 1e17) is cut up
        tokens += [token[i:i + width - 1] for i in range(0, len(token), width - 1)]
    for token in tokens:
        candidate = f"{current} {token}" if current else f" {token}"
        if current and cell_len(candidate) > width:
            lines.append([(current, "")])
            candidate = f" {token}"
        current = candidate
    lines.append([(current, "")])
    return lines


def _noted(per_batch: Sequence[list[list[Segment]]], rows: Sequence[tuple[str, Mapping]],
           width: int) -> list[list[Segment]]:
    """Each batch's lines, and under those of one that waits to start a line saying why
    (render.waiting_note), cut to the width."""
    lines: list[list[Segment]] = []
    for batch_lines, (_, status) in zip(per_batch, rows):
        lines += batch_lines
        note = waiting_note(status)
        if note:
            lines.append([(_cut(f"  {note}", width), "dim")])
    return lines


def layout(rows: Sequence[tuple[str, Mapping]], width: int, elapsed: float = 0.0
           ) -> tuple[int, list[list[Segment]]]:
    """(the layout's rank, 0 the richest, len(LAYOUTS) folded; the lines) for ``width`` columns."""
    for rank, candidate in enumerate(LAYOUTS):
        lines = _lines_for(rows, width, elapsed, candidate)
        if lines is not None:
            return rank, _noted([[line] for line in lines], rows, width)
    return len(LAYOUTS), _noted([_folded(name, status, width) for name, status in rows], rows, width)


def plain_lines(rows: Sequence[tuple[str, Mapping]], width: int, elapsed: float = 0.0) -> list[str]:
    return ["".join(text for text, _ in line) for line in layout(rows, width, elapsed)[1]]


class ProgressBoard:
    """A rich renderable of the batches' progress, laid out for the console's width at each refresh."""

    def __init__(self, handles: Sequence, clock: Callable[[], float] = time.monotonic) -> None:
        self.handles, self.clock = handles, clock
        self.started = clock()

    def __rich_console__(self, console, options):
        rows = [(h.name, h.status) for h in self.handles]
        for line in layout(rows, options.max_width, self.clock() - self.started)[1]:
            text = Text(no_wrap=True, overflow="fold")
            for part, style in line:
                text.append(part, style=style or None)
            yield text
