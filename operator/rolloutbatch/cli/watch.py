"""Follow batches until they finish: a live progress board on a terminal (``cli.progress_board``),
plain lines elsewhere.

A transient failure of a poll (``kube.errors.Unavailable``: a 5xx, a 429, a dropped connection)
is retried with a doubling pause and said on stderr: the batch runs on meanwhile, and one lost
read must not end the watch as if the batch had failed. One that lasts ``OUTAGE_GRACE`` seconds
ends it with :class:`ApiLost`, a ``TimeoutError``: the outcome is unknown, as when the watch times
out (exit 3; re-attach with ``rolloutbatch watch NAME``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from rolloutbatch.cli.common import one_line
from rolloutbatch.cli.render import progress_line
from rolloutbatch.core import lifecycle
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.sdk import BatchHandle, is_finished

OUTAGE_GRACE = 120.0               # seconds the API server may fail every poll before the watch gives up
SETTLE_SECONDS = lifecycle.JOB_END_WAIT_SECONDS   # a final batch's jobCompleteSeconds is waited for so long
RETRY_FIRST, RETRY_MOST = 1.0, 15.0   # the pause after a failed poll, doubling up to RETRY_MOST


class ApiLost(TimeoutError):
    """The API server failed every poll for ``OUTAGE_GRACE`` seconds: the batches' outcome is unknown."""


class _Outage:
    """Since when the polls fail, and the next pause."""

    def __init__(self, grace: float) -> None:
        self.grace, self.since, self.pause = grace, None, RETRY_FIRST

    def answered(self) -> None:
        if self.since is not None:
            print("rolloutbatch: the API server answers again", file=sys.stderr)
        self.since, self.pause = None, RETRY_FIRST

    def failed(self, exc: Unavailable) -> float:
        """The pause before the next poll; ApiLost once the outage lasted ``grace``."""
        now = time.monotonic()
        self.since = now if self.since is None else self.since
        why = one_line(exc, 200)
        if now - self.since >= self.grace:
            raise ApiLost(f"the API server failed every read for {now - self.since:.0f}s ({why})")
        pause, self.pause = self.pause, min(self.pause * 2, RETRY_MOST)
        print(f"rolloutbatch: reading the batch failed ({why}); retrying in {pause:g}s, for up to "
              f"{self.grace:g}s in all", file=sys.stderr)
        return pause


def follow(handles: Sequence[BatchHandle], console, *, timeout: float = 3600, interval: float = 1.0,
           grace: float | None = None) -> None:
    """Poll every handle's status until all are finished; raises TimeoutError after ``timeout``,
    ApiLost (a TimeoutError) when every poll failed for ``grace`` seconds (OUTAGE_GRACE)."""
    deadline = time.monotonic() + timeout
    outage = _Outage(OUTAGE_GRACE if grace is None else grace)
    if console.is_terminal:
        _follow_live(handles, console, deadline, interval, outage)
    else:
        _follow_plain(handles, console, deadline, interval, outage)
    settled_by = min(deadline, time.monotonic() + SETTLE_SECONDS)   # one wait for them all, within the timeout
    for h in handles:
        h.settle(max(0.0, settled_by - time.monotonic()))


def _pending(handles: Sequence[BatchHandle]) -> list[BatchHandle]:
    return [h for h in handles if not is_finished(h.status)]


def _refreshed(handles: Sequence[BatchHandle], outage: _Outage) -> float | None:
    """Read each handle again; None, or the pause before trying again after a transient failure."""
    for h in handles:
        try:
            h.refresh()
        except Unavailable as exc:
            return outage.failed(exc)
    outage.answered()
    return None


def _check_deadline(handles: Sequence[BatchHandle], deadline: float, timeout_hint: str = "") -> None:
    if time.monotonic() >= deadline:
        names = ", ".join(f"{h.namespace}/{h.name}" for h in _pending(handles))
        raise TimeoutError(f"still running when the watch timed out: {names}{timeout_hint}")


def _sleep(interval: float, pause: float | None, deadline: float) -> None:
    time.sleep(interval if pause is None else min(pause, max(deadline - time.monotonic(), 0.0)))


def _follow_plain(handles: Sequence[BatchHandle], console, deadline: float, interval: float,
                  outage: _Outage) -> None:
    last: dict[str, str] = {}
    while True:
        pending = _pending(handles)
        pause = _refreshed(pending, outage)
        for h in pending:
            line = progress_line(h.name, h.status)
            if last.get(h.name) != line:
                console.print(line, highlight=False, soft_wrap=True, markup=False)
                last[h.name] = line
        if not _pending(handles):
            return
        _check_deadline(handles, deadline)
        _sleep(interval, pause, deadline)


def _follow_live(handles: Sequence[BatchHandle], console, deadline: float, interval: float,
                 outage: _Outage) -> None:
    from rich.live import Live

    from rolloutbatch.cli.progress_board import ProgressBoard

    pause = _refreshed(_pending(handles), outage)   # the first frame shows the batches as they are
    # Live redirects sys.stderr above the board: a retry's line does not break it
    with Live(ProgressBoard(handles), console=console, transient=False, refresh_per_second=4) as live:
        while True:
            live.refresh()
            if not _pending(handles):
                return
            _check_deadline(handles, deadline)
            _sleep(interval, pause, deadline)
            pause = _refreshed(_pending(handles), outage)
