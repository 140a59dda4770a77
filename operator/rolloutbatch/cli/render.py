"""Text rendering: kubectl-style tables, summaries in the guide's metric names, -o json|yaml."""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rolloutbatch.cli.common import dump_yaml
from rolloutbatch.core import strictjson
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.crd import PRINTER_COLUMNS
from rolloutbatch.core.crd_pool import POOL_PRINTER_COLUMNS
from rolloutbatch.core.escapes import escaped


def _columns(printer_columns: Sequence[Mapping]) -> tuple[tuple[str, str, bool], ...]:
    """A CRD's additionalPrinterColumns as (header, path in the object, wide only)."""
    return tuple((c["name"].upper(), c["jsonPath"].lstrip("."), c.get("priority", 0) > 0) for c in printer_columns)


# What `kubectl get rb` prints, and `rolloutbatch pools` as `kubectl get rp` does: the CRDs' own columns.
COLUMNS = _columns(PRINTER_COLUMNS)
POOL_COLUMNS = _columns(POOL_PRINTER_COLUMNS)

# The guide's result names, and where each lives in RolloutBatch status.
SUMMARY_FIELDS: tuple[tuple[str, str], ...] = (
    ("phase", "phase"),
    ("episodes", "episodes"),
    ("successful_episodes", "succeededEpisodes"),
    ("failed_episodes", "failedEpisodes"),
    ("reward_sum", "rewardSum"),
    ("reward_mean", "rewardMean"),
    ("batch_to_all_ready_seconds", "batchToAllReadySeconds"),
    ("pod_to_ready_p50_seconds", "podToReadySeconds.p50"),
    ("pod_to_ready_p95_seconds", "podToReadySeconds.p95"),
    ("pod_to_ready_max_seconds", "podToReadySeconds.max"),
    ("batch_to_all_rewards_seconds", "batchToAllRewardsSeconds"),
    ("client_job_complete_seconds", "jobCompleteSeconds"),
)
# A pooled batch's claim figures, shown only for a batch with a pool.
POOL_SUMMARY_FIELDS: tuple[tuple[str, str], ...] = (
    ("pool_hits", "pool.hits"),
    ("pool_misses", "pool.misses"),
    ("claim_p50_seconds", "pool.claimSeconds.p50"),
    ("claim_p95_seconds", "pool.claimSeconds.p95"),
)


# A path's parts: a key, or a key and the JSONPath filter of a printer column that picks the item
# of a list by one field (`conditions[?(@.type=="Ready")]`).
_PART = re.compile(r'([^.\[]+)(?:\[\?\(@\.(\w+)=="([^"]*)"\)\])?')


def dig(obj: Any, path: str) -> Any:
    for key, field, wanted in _PART.findall(path):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
        if field:
            obj = next((item for item in obj if isinstance(item, Mapping) and item.get(field) == wanted), None) \
                if isinstance(obj, list) else None
    return obj


def number(value: Any, digits: int = 3) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return str(value)


def age(timestamp: str | None, now: datetime.datetime | None = None) -> str:
    """kubectl's short human duration since ``timestamp`` (RFC 3339)."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    now = now or datetime.datetime.now(datetime.timezone.utc)
    seconds = int((now - then).total_seconds())
    if seconds < -1:   # more than a clock's skew ahead (apimachinery's duration.HumanDuration)
        return "<invalid>"
    seconds = max(0, seconds)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def row(obj: Mapping, wide: bool = False, now: datetime.datetime | None = None,
        columns: Sequence[tuple[str, str, bool]] = COLUMNS) -> list[str]:
    cells = [str(dig(obj, "metadata.name") or "")]
    for header, path, wide_only in columns:
        if wide_only and not wide:
            continue
        value = dig(obj, path)
        if path == "status.phase" and not value:
            value = v.PENDING   # the operator never writes Pending: a batch without a status is one (design §3)
        cells.append(age(value, now) if header == "AGE" else safe_line(number(value)))
    return cells


def table(objects: Sequence[Mapping], wide: bool = False, *, all_namespaces: bool = False,
          now: datetime.datetime | None = None, columns: Sequence[tuple[str, str, bool]] = COLUMNS) -> str:
    """Aligned columns, three spaces apart, like ``kubectl get`` (the batches' columns unless told)."""
    headers = ["NAME"] + [h for h, _, wide_only in columns if wide or not wide_only]
    rows = [row(o, wide, now, columns) for o in objects]
    if all_namespaces:
        headers = ["NAMESPACE"] + headers
        rows = [[str(dig(o, "metadata.namespace") or "")] + r for o, r in zip(objects, rows)]
    widths = [max(len(c) for c in column) for column in zip(headers, *rows)]
    lines = ["   ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [headers, *rows]]
    return "\n".join(lines)


def serialize(objects: Sequence[Mapping], fmt: str, *, single: bool) -> str:
    data: Any = objects[0] if single else {"apiVersion": "v1", "kind": "List", "items": list(objects),
                                           "metadata": {"resourceVersion": ""}}
    if fmt == "json":
        return strictjson.dumps(data, indent=4)
    return dump_yaml(data).rstrip("\n")


def show(objects: Sequence[Mapping], output: str | None, *, single: bool, kind_plural: str = "RolloutBatches",
         where: str = "", all_namespaces: bool = False,
         columns: Sequence[tuple[str, str, bool]] = COLUMNS) -> None:
    """``get`` (``single``) or a list, as ``kubectl get`` prints them: JSON, YAML, or the table
    (``-o wide`` adds the wide columns); an empty list is said on stderr (``where``: the namespace)."""
    if output in ("json", "yaml"):
        print(serialize(objects, output, single=single))
    elif not objects and not single:
        print(f"No {kind_plural} found in {'any namespace' if all_namespaces else where}.", file=sys.stderr)
    else:
        print(table(objects, wide=output == "wide", all_namespaces=all_namespaces, columns=columns))


def summary(status: Mapping | None, document: Mapping | None = None) -> dict[str, Any]:
    """The guide's metric names -> values, from status (the results document fills gaps)."""
    status, document = status or {}, document or {}
    out: dict[str, Any] = {}
    pooled = "pool" in status or "pool_hits" in document
    for name, path in (*SUMMARY_FIELDS, *(POOL_SUMMARY_FIELDS if pooled else ())):
        value = dig(status, path)
        if value is None:
            value = document.get(name)
        out[name] = value
    return out


class SummaryTable:
    """The guide's metrics, side by side when that fits the console; else one table per batch,
    else plain lines.

    A rich Table wider than the console is shrunk by cutting its cells ("batch_to_all_rea…"), and a
    pipe or a CI log is 80 columns: so the layout is chosen from the width, and cells never shrink.
    """

    def __init__(self, columns: Sequence[tuple[str, Mapping[str, Any]]], title: str | None = None) -> None:
        self.columns = [(str(heading), values) for heading, values in columns]
        self.title = title
        self.names: list[str] = []
        for _, values in self.columns:
            self.names.extend(n for n in values if n not in self.names)

    def table(self, columns: Sequence[tuple[str, Mapping[str, Any]]], title: str | None = None,
              headings: Sequence[str] | None = None):
        from rich.table import Table
        from rich.text import Text

        # Batch names as Text: a str is read for markup and emoji codes (":v:" drew a hand)
        tbl = Table(title=Text(title) if title is not None else None, show_lines=False)
        tbl.add_column("metric", style="bold", no_wrap=True)
        for heading in headings or [h for h, _ in columns]:
            tbl.add_column(Text(heading), justify="right", no_wrap=True)
        for name in self.names:
            tbl.add_row(name, *[number(values.get(name)) for _, values in columns])
        return tbl

    def __rich_console__(self, console, options):
        from rich.measure import Measurement
        from rich.text import Text

        def fits(renderable) -> bool:
            # Measured unbounded: a bounded measurement is clamped to the width and always "fits".
            return Measurement.get(console, options.update_width(1 << 16), renderable).maximum <= options.max_width

        side_by_side = self.table(self.columns, self.title)
        if fits(side_by_side):
            yield side_by_side
            return
        # The batch's name as the title (it wraps), so a long name does not widen the table.
        one_each = [self.table([column], title=column[0], headings=["value"]) for column in self.columns]
        if all(fits(t) for t in one_each):
            if self.title:
                yield Text(self.title, style="italic", overflow="fold")
            yield from one_each
            return
        if self.title:
            yield Text(self.title, style="italic")
        # Plain lines. A name or a heading is never folded: one longer than the console goes past
        # its edge whole (a terminal wraps it, a file or a pipe has no edge); print with crop=False
        # (print_summary) so that rich does not cut it there either.
        width = max(map(len, self.names), default=0)
        values_width = max((len(number(values.get(n))) for _, values in self.columns for n in self.names), default=0)
        one_line = 2 + width + 1 + values_width <= options.max_width
        for heading, values in self.columns:
            yield Text(heading, style="bold", no_wrap=True, overflow="ignore")
            for name in self.names:
                if one_line:
                    yield Text(f"  {name:<{width}} {number(values.get(name))}", no_wrap=True, overflow="ignore")
                else:
                    yield Text(f"  {name}", no_wrap=True, overflow="ignore")
                    yield Text(f"    {number(values.get(name))}", no_wrap=True, overflow="ignore")


def print_summary(console, columns: Sequence[tuple[str, Mapping[str, Any]]], title: str | None = None) -> None:
    """Print :class:`SummaryTable` so that no metric name is cut, whatever the console's width."""
    console.print(SummaryTable(columns, title), crop=False)


def finished_count(status: Mapping | None) -> int:
    """Episodes with a final outcome: succeeded + failed + lost, as status.progress counts them."""
    s = status or {}
    return sum(int(s.get(key) or 0) for key in ("succeededEpisodes", "failedEpisodes", "lostEpisodes"))


def progress_counts(status: Mapping | None) -> dict[str, Any]:
    """What the progress displays show of a batch. ``running`` is the live count of episode pods
    (``readyEpisodes`` trails while episodes run: a ready event is read when its pod ends)."""
    s = status or {}
    total = s.get("episodes")
    return {"phase": s.get("phase") or v.PENDING, "finished": finished_count(s),
            "total": total if total is not None else "?", "running": s.get("runningEpisodes") or 0,
            "failed": s.get("failedEpisodes") or 0, "lost": s.get("lostEpisodes") or 0,
            "reward": number(s.get("rewardSum") or 0)}


RUNNING_WAITS = (v.REASON_WAITING_FOR_POOL, v.EVENT_UNSCHEDULABLE)   # reasons of a Running batch that waits


def waiting_note(status: Mapping | None) -> str | None:
    """Why a batch waits (its status's reason and message), as one safe line: one that has not
    started (WaitingForPool, Kueue's queue, a sandbox being made), or a running one whose later
    episodes wait for warm pods or a node (WaitingForPool, Unschedulable); else None."""
    s = status or {}
    message, reason = s.get("message"), s.get("reason")
    waits = (s.get("phase") or v.PENDING) in v.WAITING_PHASES or reason in RUNNING_WAITS
    if not waits or not isinstance(message, str) or not message:
        return None
    return safe_line(f"{reason}: {message}" if isinstance(reason, str) and reason else message) or None


def progress_line(name: str, status: Mapping | None) -> str:
    """One plain line of progress (for logs and non-terminal output); while the batch waits to
    start, why (:func:`waiting_note`)."""
    c = progress_counts(status)
    line = (f"{name}: {c['phase']} {c['finished']}/{c['total']} finished, running {c['running']}, "
            f"failed {c['failed']}, lost {c['lost']}, reward {c['reward']}")
    note = waiting_note(status)
    return f"{line} ({note})" if note else line


def safe_line(text: Any) -> str:
    """A message or an Event's text as one line safe for a terminal: whitespace runs (newlines,
    U+2028 among them) made one space, every other control character escaped (core.escapes).
    Such text can quote an episode's bytes, and an Event can be posted by anyone."""
    return escaped(" ".join(str(text).split()))


def format_events(events: Iterable[Mapping]) -> str:
    """Events as ``kubectl get events`` lines, oldest first."""
    def when(e: Mapping) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or dig(e, "metadata.creationTimestamp") or "")

    rows = [["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]]
    for e in sorted(events, key=when):
        obj = e.get("involvedObject") or e.get("regarding") or {}
        rows.append([safe_line(when(e)), safe_line(e.get("type") or ""), safe_line(e.get("reason") or ""),
                     safe_line(f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}"),
                     safe_line(e.get("message") or e.get("note") or "")])
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("   ".join([*(c.ljust(w) for c, w in zip(r[:4], widths)), r[4]]).rstrip() for r in rows) + "\n"
