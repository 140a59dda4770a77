"""Follow batches until they finish: a live progress board on a terminal (``cli.progress_board``),
plain lines elsewhere."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rolloutbatch.cli.render import progress_line
from rolloutbatch.sdk import BatchHandle, is_finished


def follow(handles: Sequence[BatchHandle], console, *, timeout: float = 3600, interval: float = 1.0) -> None:
    """Poll every handle's status until all are finished; raises TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    if console.is_terminal:
        _follow_live(handles, console, deadline, interval)
    else:
        _follow_plain(handles, console, deadline, interval)
    for h in handles:
        h.settle()


def _pending(handles: Sequence[BatchHandle]) -> list[BatchHandle]:
    return [h for h in handles if not is_finished(h.status)]


def _check_deadline(handles: Sequence[BatchHandle], deadline: float, timeout_hint: str = "") -> None:
    if time.monotonic() >= deadline:
        names = ", ".join(f"{h.namespace}/{h.name}" for h in _pending(handles))
        raise TimeoutError(f"still running when the watch timed out: {names}{timeout_hint}")


def _follow_plain(handles: Sequence[BatchHandle], console, deadline: float, interval: float) -> None:
    last: dict[str, str] = {}
    while True:
        for h in _pending(handles):
            h.refresh()
            line = progress_line(h.name, h.status)
            if last.get(h.name) != line:
                console.print(line, highlight=False, soft_wrap=True, markup=False)
                last[h.name] = line
        if not _pending(handles):
            return
        _check_deadline(handles, deadline)
        time.sleep(interval)


def _follow_live(handles: Sequence[BatchHandle], console, deadline: float, interval: float) -> None:
    from rich.live import Live

    from rolloutbatch.cli.progress_board import ProgressBoard

    for h in _pending(handles):
        h.refresh()   # the first frame shows the batches as they are, not as submitted
    with Live(ProgressBoard(handles), console=console, transient=False, refresh_per_second=4) as live:
        while True:
            live.refresh()
            if not _pending(handles):
                return
            _check_deadline(handles, deadline)
            time.sleep(interval)
            for h in _pending(handles):
                h.refresh()
