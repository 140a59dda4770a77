"""Follow batches until they finish: a live rich progress bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rolloutbatch.cli.render import finished_count, number, progress_line
from rolloutbatch.core import vocabulary as v
from rolloutbatch.sdk import BatchHandle, is_finished


def _fields(status: dict) -> dict:
    return {
        "phase": status.get("phase") or v.PENDING,
        "ready": status.get("readyEpisodes") or 0,
        "failed": status.get("failedEpisodes") or 0,
        "lost": status.get("lostEpisodes") or 0,
        "reward": number(status.get("rewardSum") or 0),
    }


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
                console.print(line, highlight=False, soft_wrap=True)
                last[h.name] = line
        if not _pending(handles):
            return
        _check_deadline(handles, deadline)
        time.sleep(interval)


def _follow_live(handles: Sequence[BatchHandle], console, deadline: float, interval: float) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[phase]:<12} ready {task.fields[ready]:>4}  failed {task.fields[failed]:>4}  "
                   "lost {task.fields[lost]:>4}  reward {task.fields[reward]:>8}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False, refresh_per_second=4) as progress:
        tasks = {}
        for h in handles:
            total = (h.obj.get("spec") or {}).get("episodes") or h.status.get("episodes")
            tasks[h.name] = progress.add_task(h.name, total=total, **_fields(h.status))
        while True:
            for h in _pending(handles):
                h.refresh()
                s = h.status
                progress.update(tasks[h.name], completed=finished_count(s), total=s.get("episodes") or None, **_fields(s))
            if not _pending(handles):
                return
            _check_deadline(handles, deadline)
            time.sleep(interval)
