"""The --watch progress at any width from 20 to 300 columns: never wider than the terminal, the
counts (finished/episodes, running, failed, lost, reward) never dropped, decoration (elapsed
time, bar, long labels, phase) given up first."""
from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from rolloutbatch.cli import progress_board as board
from rolloutbatch.cli.render import number, waiting_note
from rolloutbatch.cli.watch import follow
from rolloutbatch.sdk import BatchHandle
from tests.unit.cli.test_cli_watch import FakeClient

LONG_RUN = {"phase": "Running", "episodes": 1000, "succeededEpisodes": 100, "failedEpisodes": 3, "lostEpisodes": 2,
            "readyEpisodes": 0, "runningEpisodes": 200, "rewardSum": 99.5}


def test_at_80_columns_the_running_count_and_every_count_show():
    done = dict(LONG_RUN, phase="Succeeded", conditions=[{"type": "Ready", "status": "True"}])
    handle = BatchHandle(FakeClient([LONG_RUN, done]), {"metadata": {"name": "shipping-fix-parallel", "namespace": "n",
                                                                     "uid": "u"}, "spec": {"episodes": 1000}})
    out = io.StringIO()
    follow([handle], Console(file=out, force_terminal=True, width=80, color_system=None), timeout=5, interval=0)
    frames = [f for f in out.getvalue().replace("\x1b[2K", "").split("\r") if "shipping-fix-parallel" in f]
    first = frames[0]
    assert "105/1000" in first and "run 200" in first and "fail 3" in first and "lost 2" in first \
        and "99.5" in first, first
    assert "ready 0" not in out.getvalue()


def test_roomy_terminals_get_the_bar_and_the_words():
    lines = board.plain_lines([("shipping-fix-parallel", LONG_RUN)], 120, elapsed=83)
    assert len(lines) == 1 and "━" in lines[0] and "running 200" in lines[0] and "0:01:23" in lines[0]


NAMES = st.from_regex(r"[a-z]([-a-z0-9]{0,53}[a-z0-9])?", fullmatch=True)


@st.composite
def statuses(draw):
    episodes = draw(st.integers(min_value=1, max_value=100_000))
    succeeded = draw(st.integers(min_value=0, max_value=episodes))
    failed = draw(st.integers(min_value=0, max_value=episodes - succeeded))
    lost = draw(st.integers(min_value=0, max_value=episodes - succeeded - failed))
    running = draw(st.integers(min_value=0, max_value=episodes - succeeded - failed - lost))
    reward = draw(st.one_of(st.integers(min_value=0, max_value=succeeded),
                            st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda x: round(x, 3))))
    phase = draw(st.sampled_from(["Pending", "Provisioning", "Queued", "Running", "Collecting", "Succeeded",
                                  "Failed"]))
    status = {"phase": phase, "episodes": episodes, "succeededEpisodes": succeeded, "failedEpisodes": failed,
              "lostEpisodes": lost, "runningEpisodes": running, "rewardSum": reward}
    if draw(st.booleans()):     # why it waits (shown under a batch that has not started): any text
        status.update(reason=draw(st.sampled_from(["WaitingForPool", "Provisioning", ""])), message=draw(st.text()))
    return status


def lines_of(status: dict) -> int:
    """A batch's lines in a one-line layout: its own, and one saying why it waits."""
    return 1 + (waiting_note(status) is not None)


def counts_shown(text: str, status: dict) -> bool:
    finished = status["succeededEpisodes"] + status["failedEpisodes"] + status["lostEpisodes"]
    tokens = text.split()
    wanted = [f"{finished}/{status['episodes']}", str(status["runningEpisodes"]), str(status["failedEpisodes"]),
              str(status["lostEpisodes"]), number(status["rewardSum"])]
    return all(w in tokens for w in wanted)


ROWS = st.lists(st.tuples(NAMES, statuses()), min_size=1, max_size=4, unique_by=lambda r: r[0])


@settings(max_examples=300, deadline=None)
@given(ROWS, st.integers(min_value=20, max_value=300), st.floats(min_value=0, max_value=400_000))
def test_never_wider_than_the_terminal_and_no_count_dropped(rows, width, elapsed):
    rank, lines = board.layout(rows, width, elapsed)
    texts = ["".join(part for part, _ in line) for line in lines]
    assert all(cell_len(t) <= width for t in texts), (width, texts)
    if rank < len(board.LAYOUTS):
        assert len(texts) == sum(lines_of(status) for _, status in rows)   # one line per batch (and its note)
        start = 0
        for name, status in rows:
            assert counts_shown(texts[start], status), (texts[start], status)
            start += lines_of(status)
    else:                                                  # folded: each batch's lines hold its counts
        blocks, start = [], 0
        for name, status in rows:
            n = len(board._folded(name, status, width)) + lines_of(status) - 1
            blocks.append((status, " ".join(texts[start:start + n])))
            start += n
        assert all(counts_shown(text, status) for status, text in blocks)
    bar, clock, phase, labels, _ = board.LAYOUTS[min(rank, len(board.LAYOUTS) - 1)]
    # decoration goes before words: a bar or the clock only with the long labels and the phase
    assert not (bar or clock) or (labels == board.LONG and phase)


@settings(max_examples=100, deadline=None)
@given(ROWS, st.integers(min_value=20, max_value=299), st.integers(min_value=1, max_value=100))
def test_a_wider_terminal_never_shows_less(rows, width, more):
    assert board.layout(rows, min(300, width + more))[0] <= board.layout(rows, width)[0]


def test_huge_rewards_still_fit():
    status = {"phase": "Running", "episodes": 100_000, "succeededEpisodes": 100_000, "rewardSum": 1e17}
    for width in range(20, 40):
        assert all(cell_len(t) <= width for t in board.plain_lines([("a" * 55, status)], width))


def test_through_rich_at_every_width():
    rows = [("shipping-fix-parallel", LONG_RUN), ("shipping-fix-serial", dict(LONG_RUN, phase="Collecting"))]

    class Handle:
        def __init__(self, name, status):
            self.name, self.status = name, status

    live = board.ProgressBoard([Handle(n, s) for n, s in rows], clock=lambda: 0.0)
    for width in range(20, 301):
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(live)
        text = out.getvalue()
        assert all(cell_len(line) <= width for line in text.splitlines()), (width, text)
        assert text.count("105/1000") == 2 and text.count("200") >= 2 and text.count("99.5") == 2, (width, text)
