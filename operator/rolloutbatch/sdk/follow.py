"""Following a batch as it runs: sans-IO state machines fed by either client's watches.

:class:`ListWatch` is one resumable list+watch of a collection: it says which request comes
next (a list, page by page, or a watch from the last resourceVersion), reads the answers, and
after a dropped connection resumes from where it was. A 410 Gone (the watch's version or the
list's continue token expired) means a list from the first page; the follower's dedup makes the
rows seen again harmless. :class:`Follower` turns the
events of two of them, the batch (by name) and its results ConfigMaps (by the batch-UID
label: the head and every shard), into outputs: the new status, each episode's row exactly
once, and each group once all its samples have rows. A relist, a resumed watch or an operator
that restarted and rewrote its ConfigMaps redelivers rows; the follower keeps the indexes it
handed out, so none comes twice. None goes missing: the operator writes the final results
before the final status (docs/design.md §5), and when the batch is final the follower reads the
head and every shard its index lists once more, by name (a *sweep*, ``result_ops.read_results``)
before it ends, since the two watches are not ordered with each other and a neighbour can strip
a ConfigMap's labels. A final batch whose listed ConfigMaps are then gone or not the
operator's, with rows still lacking, ends in ResultsIncomplete rather than short. The sweep
asks again after a transient error as a watch does (``is_retryable``, ``backoff``), within the
caller's timeout: a 503 there is no reason to end a stream that already handed out rows.

Trust: anyone with ConfigMap rights in the namespace can write a ConfigMap with the batch's
label and names. A ConfigMap's rows count only once its digest is the one recorded under its
name in the batch's status (``resultsDigests``, which only the operator writes), as seen in the
latest status the follower has. The status lags each results write by one call, so a ConfigMap
seen before its digest is recorded is kept (the newest object per name, at most
``MAX_PENDING`` names) and checked again whenever the status changes; one evicted from there
is found again by the sweep, which reads every ConfigMap afresh against the newest status. What
is still not recorded after the sweep is ignored (``Follower.unverified`` names it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any

from rolloutbatch.core import lifecycle, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.groups import group_and_sample, group_count, group_entry, group_members
from rolloutbatch.core.results import configmap_digest, decode_results, vouched_digests
from rolloutbatch.kube import resources
from rolloutbatch.sdk.timeouts import checked_timeout
from rolloutbatch.kube.errors import BadRequest, ConfigError, Forbidden, Gone, KubeError, NotFound, Unauthorized
from rolloutbatch.sdk.ops import Op, ResultsIncomplete, Sleep, is_finished
from rolloutbatch.sdk.result_ops import ResultsRead, read_results
from rolloutbatch.sdk.types import Group, Row

WATCH_SECONDS = 60        # the server ends each watch after this; we resume from the last version
FATAL = (Unauthorized, Forbidden, NotFound, ConfigError, BadRequest)   # retrying the same watch cannot help
# The 4xx worth asking again: a timeout, a conflict, an expired version (relisted), a rate limit.
# Any other 4xx (400, 401, 403, 404, 413, 422...) is the same answer to the same request.
RETRYABLE_4XX = frozenset({408, 409, 410, 429})
# ConfigMaps kept until the status records them: a results write puts the head and a shard or
# two ahead of the status; more (forgeries, say) evict the oldest, which the sweep reads again.
MAX_PENDING = 16


LISTED = "LISTED"   # ListWatch.on_list's last event: the uids of the whole list


class ListWatch:
    """One resumable list+watch of ``path`` with a label or field selector."""

    def __init__(self, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
                 watch_seconds: int = WATCH_SECONDS) -> None:
        self.path = path
        self.selectors = {k: s for k, s in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if s}
        self.watch_seconds = watch_seconds
        self.version: str | None = None     # None: a list comes next
        self._continue: str | None = None
        self._listed: set[str] = set()     # the uids of the list being read, page by page
        self.failures = 0
        self.gones = 0                      # 410s since the last watch event
        self.resumes = 0                    # watches started from a kept version (for tests)

    @property
    def listing(self) -> bool:
        return self.version is None

    def list_params(self) -> dict[str, Any]:
        # No resourceVersion (nor resourceVersionMatch): the API server then serves a consistent
        # read, as of etcd now (a quorum read, or its watch cache once caught up to it: KEP-2340),
        # which LISTED's "not in the list: deleted" needs. resourceVersion=0 would be any cache's
        # view, possibly older than the caller's own create. A continue page is read at the first
        # page's version.
        params: dict[str, Any] = dict(self.selectors, limit=100)
        if self._continue:
            params["continue"] = self._continue
        return params

    def on_list(self, page: Mapping) -> list[tuple[str, dict]]:
        """A page's items as ADDED events; after the last page, a LISTED event with the uids of the
        whole list (an object deleted while the watch was down brings no DELETED: a relist after a
        410 Gone is how it is learnt)."""
        meta = page.get("metadata") or {}
        if self._continue is None:
            self._listed = set()
        self._continue = meta.get("continue") or None
        items = page.get("items") or []
        self._listed |= {uid for item in items if isinstance(uid := (item.get("metadata") or {}).get("uid"), str)}
        self.failures = 0
        events = [("ADDED", item) for item in items]
        if not self._continue:
            self.version = meta.get("resourceVersion") or "0"
            events.append((LISTED, {"uids": frozenset(self._listed)}))
        return events

    def watch_params(self) -> dict[str, Any]:
        return dict(self.selectors, watch="true", resourceVersion=self.version, allowWatchBookmarks="true",
                    timeoutSeconds=self.watch_seconds)

    def started(self) -> None:
        self.resumes += 1

    def on_line(self, line: bytes | str) -> tuple[str, dict] | None:
        """One line of a watch: an event for the follower, or None (bookmark, blank, expired)."""
        if not line:
            return None
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:       # too old: on_error relists
                raise Gone(f"watch of {self.path}: {obj.get('message')}", status=410)
            raise KubeError(f"watch of {self.path}: {obj.get('message')}", status=obj.get("code"))
        self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
        self.failures = self.gones = 0
        return (kind, obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None

    def on_error(self, exc: BaseException) -> float | None:
        """Seconds to wait before the next request, or None when the error is final."""
        if isinstance(exc, Gone):
            # The version or the continue token is too old: resending either gets 410 again.
            self.version = self._continue = None
            self.gones += 1
            # At once the first time; a 410 again before any watch event waits like other errors.
            return 0.0 if self.gones == 1 else backoff(self.gones - 1)
        if not is_retryable(exc):
            return None
        self.failures += 1
        return backoff(self.failures)


def backoff(failures: int) -> float:
    """The pause before asking again after ``failures`` failures in a row: a watch's, a sweep's."""
    return min(0.25 * 2 ** failures, 5.0)


def is_final_4xx(exc: BaseException) -> bool:
    """A client error that asking again unchanged cannot fix (not 408, 409, 410 nor 429)."""
    status = getattr(exc, "status", None) if isinstance(exc, KubeError) else None
    return type(status) is int and 400 <= status < 500 and status not in RETRYABLE_4XX


def is_retryable(exc: BaseException) -> bool:
    """Worth asking again as is: no connection, a 5xx, a 408, 409, 410 or 429."""
    return not isinstance(exc, FATAL) and not is_final_4xx(exc)


def _row(raw: Any, episodes: int) -> Row | None:
    """A row worth handing out: an object with an index in range and a known outcome."""
    if not isinstance(raw, dict):
        return None
    index = raw.get("index")
    if type(index) is not int or not 0 <= index < episodes or raw.get("outcome") not in v.OUTCOMES:
        return None
    return raw  # type: ignore[return-value]


def awaits_job_complete(status: Mapping) -> bool:
    """A final batch whose status still lacks ``jobCompleteSeconds`` though its Job will complete:
    the operator can publish the phase one patch before it (it needs the Job's own completion). A
    stopped batch's Job is suspended, a stalled one's deleted: neither completes."""
    phase = status.get("phase")
    return bool(phase in v.TERMINAL_PHASES and lifecycle.job_will_complete(phase, status.get("reason"))
                and status.get("jobName") and status.get("jobCompleteSeconds") is None)


class Follower:
    """The events of one batch (and its results ConfigMaps) in, ``(kind, value)`` outputs out:
    ``("status", dict)``, ``("row", Row)``, ``("group", Group)``."""

    def __init__(self, batch: Mapping, *, rows: bool = True, groups: bool = False, settle_seconds: float = 0.0,
                 watch_seconds: int | None = None) -> None:
        checked_timeout(settle_seconds, zero_ok=True, name="settle")   # a NaN never settles
        # None: WATCH_SECONDS; a 0 is refused, not taken for the default
        checked_timeout(watch_seconds, name="watch_seconds", none_ok=True)
        # the API's timeoutSeconds is whole seconds (a fraction is a 400): rounded up
        watch_seconds = WATCH_SECONDS if watch_seconds is None else math.ceil(watch_seconds)
        meta, spec = batch["metadata"], batch.get("spec") or {}
        self.name, self.namespace, self.uid = meta["name"], meta["namespace"], meta["uid"]
        self.episodes = spec.get("episodes") if type(spec.get("episodes")) is int else 0
        k = spec.get("samplesPerInput")
        self.k = k if type(k) is int and k >= 1 else 1
        self.status: dict = dict(batch.get("status") or {})
        self._vouched: tuple[dict, Mapping[str, frozenset[str]]] | None = None   # (status, what it vouches for)
        self.want_rows, self.want_groups = rows or groups, groups
        self.rows: dict[int, Row] = {}
        self.delivered: set[int] = set()          # groups handed out
        self.deleted = False
        self.swept = False
        # name -> (digest, object) of results ConfigMaps whose digest the status does not record
        # (yet), oldest first
        self.pending: dict[str, tuple[str, dict]] = {}
        self.unverified: list[str] = []           # ignored at the sweep: never recorded by the status
        self.lacking: list[str] = []              # listed at the sweep, but gone or not the operator's
        self.settle_seconds = settle_seconds
        self._final_at: float | None = None
        self.batch_watch = ListWatch(resources.collection_path("RolloutBatch", self.namespace),
                                     field_selector=f"metadata.name={self.name}", watch_seconds=watch_seconds)
        self.results_watch = ListWatch(resources.collection_path("ConfigMap", self.namespace),
                                       label_selector=f"{naming.LABEL_BATCH_UID}={self.uid}",
                                       watch_seconds=watch_seconds) if self.want_rows else None

    def watches(self) -> list[ListWatch]:
        return [w for w in (self.batch_watch, self.results_watch) if w is not None]

    # -- inputs
    def feed(self, watch: ListWatch, kind: str, obj: dict) -> list[tuple[str, Any]]:
        if watch is self.batch_watch:
            return self._batch(kind, obj)
        if kind == LISTED:   # a results ConfigMap gone is the sweep's to find
            return []
        return self._configmap(kind, obj)

    def _batch(self, kind: str, obj: dict) -> list[tuple[str, Any]]:
        if kind == LISTED:   # a whole list of the name without our uid: deleted meanwhile
            self.deleted = self.deleted or self.uid not in obj["uids"]
            return []
        if (obj.get("metadata") or {}).get("uid") != self.uid or kind == "DELETED":
            # A namesake with another uid means ours was deleted and the name reused.
            self.deleted = self.deleted or kind == "DELETED" or bool((obj.get("metadata") or {}).get("uid"))
            return []
        status = dict(obj.get("status") or {})
        if status == self.status:
            return []
        self.status = status
        out: list[tuple[str, Any]] = [("status", dict(status))]
        digests = self._digests()
        for name, (digest, cm) in list(self.pending.items()):
            if digest in digests.get(name, ()):
                del self.pending[name]
                out += self._rows_of(cm)
        return out

    def _digests(self) -> Mapping[str, frozenset[str]]:
        """What the status vouches for, worked out once per status (not per ConfigMap event)."""
        if self._vouched is None or self._vouched[0] is not self.status:
            self._vouched = (self.status, vouched_digests(self.status))
        return self._vouched[1]

    def _configmap(self, kind: str, obj: dict, by_name: bool = False) -> list[tuple[str, Any]]:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = meta.get("name")
        # The label only filters watch events; one read by name counts by its digest alone.
        if kind == "DELETED" or not isinstance(name, str):
            return []
        if not by_name and labels.get(naming.LABEL_BATCH_UID) != self.uid:
            return []
        digest = configmap_digest(obj)
        # Only the newest object of a name is kept: an older one is no longer what the status will record.
        self.pending.pop(name, None)
        if digest not in self._digests().get(name, ()):
            self.pending[name] = (digest, obj)
            while len(self.pending) > MAX_PENDING:
                del self.pending[next(iter(self.pending))]
            return []
        return self._rows_of(obj)

    def _rows_of(self, obj: dict) -> list[tuple[str, Any]]:
        """The new rows (and completed groups) of a ConfigMap the status vouches for."""
        document = decode_results(obj)
        if document is None or document.get("uid") != self.uid:
            return []
        pods = document.get("pods")
        out: list[tuple[str, Any]] = []
        touched: list[int] = []
        for raw in pods if isinstance(pods, list) else []:
            row = _row(raw, self.episodes)
            if row is None or row["index"] in self.rows:
                continue
            self.rows[row["index"]] = row
            out.append(("row", row))
            touched.append(group_and_sample(row["index"], self.k)[0])
        if self.want_groups:
            for g in dict.fromkeys(touched):
                if g not in self.delivered and all(i in self.rows for i in group_members(g, self.k)):
                    out.append(("group", self.group(g)))
        return out

    def sweep(self, deadline: float | None = None) -> Op:
        """The sweep's reads (``swept_with`` takes their answer). A transient error (no
        connection, a 5xx, a 429) is asked again as the watches ask again, all reads anew after
        the watches' pause, while the pause ends before ``deadline`` (``time.monotonic``; None: no
        bound); an error that asking again cannot fix, or the last one at the deadline, is raised."""
        failures = 0
        while True:
            try:
                return (yield from read_results({"metadata": {"name": self.name, "namespace": self.namespace,
                                                              "uid": self.uid}, "status": self.status}))
            except KubeError as exc:
                failures += 1
                pause = backoff(failures)
                if not is_retryable(exc) or (deadline is not None and time.monotonic() + pause >= deadline):
                    raise
                yield Sleep(pause)

    def swept_with(self, read: ResultsRead) -> list[tuple[str, Any]]:
        """The head and listed shards, read by name after the batch turned final."""
        out: list[tuple[str, Any]] = []
        if read.fresh and read.status != self.status:
            out += self._batch("MODIFIED", {"metadata": {"uid": self.uid}, "status": read.status})
        names = [read.head, *read.listed()]
        for name in names:
            if read.got.get(name) is not None:
                out += self._configmap("ADDED", read.got[name], by_name=True)
        # Not what the operator last wrote, by the newest status: never its rows.
        self.unverified = sorted(self.pending)
        # A head the status never vouched for was never the operator's to write (a batch stalled
        # before its first results write): whatever sits at that name (an earlier namesake's
        # retained set, a forgery) is nothing this batch lacks.
        never_written = read.head not in self._digests()
        self.lacking = [n for n in names if not (read.recorded(n) and (read.docs.get(n) or {}).get("uid") == self.uid)
                        and not (n == read.head and never_written)]
        self.swept = True
        return out

    def incomplete_error(self) -> ResultsIncomplete | None:
        """The error a swept final batch ends in when rows lack and listed ConfigMaps are gone or
        not the operator's (their rows would be missing without a word)."""
        if not self.swept or self.complete or not self.lacking:
            return None
        return ResultsIncomplete(
            f"RolloutBatch {self.namespace}/{self.name} is final, but results ConfigMaps {', '.join(self.lacking)} "
            f"are gone or not what the operator wrote (status.resultsDigests): {len(self.rows)} of "
            f"{self.episodes} rows received", shards=self.lacking)

    def group(self, g: int) -> Group:
        self.delivered.add(g)
        entry = group_entry(g, self.k, self.rows)
        members = [self.rows[i] for i in group_members(g, self.k) if i in self.rows]
        return {**entry, "rows": members}  # type: ignore[typeddict-item]

    def leftover_groups(self) -> list[tuple[str, Any]]:
        """Groups a finished batch left without every row (final False), so none is silently lost."""
        if not self.want_groups:
            return []
        return [("group", self.group(g)) for g in range(group_count(self.episodes, self.k)) if g not in self.delivered]

    # -- state
    @property
    def final(self) -> bool:
        return is_finished(self.status)

    @property
    def complete(self) -> bool:
        return len(self.rows) >= self.episodes

    def needs_sweep(self) -> bool:
        return self.want_rows and self.final and not self.swept and not self.complete

    def done(self, now: float | None = None, *, out_of_time: bool = False) -> bool:
        """Whether following ends here; ``out_of_time``: the caller's timeout has run out, which
        cuts the settle short (a final batch is finished, not timed out). A batch deleted (or
        replaced by a namesake) ends the follow: before it was seen final in NotFound
        (``end_error``), after that with the final status held, once swept, without the settle
        (a deleted object's jobCompleteSeconds never lands)."""
        if not self.final:
            return self.deleted
        if self.needs_sweep():
            return False
        if self.deleted:
            return True
        now = time.monotonic() if now is None else now
        if self._final_at is None:
            self._final_at = now
        # a waiter gives the last timing field a moment to land (awaits_job_complete)
        return not awaits_job_complete(self.status) or out_of_time or now - self._final_at >= self.settle_seconds

    def end_error(self) -> KubeError | None:
        """The error a follow that is ``done`` ends in, or None: NotFound when the batch was
        deleted before it was seen final (a batch deleted after that, by its
        ttlSecondsAfterFinished or the trainer's other thread, has its final status to give), else
        ``incomplete_error``."""
        if self.deleted and not self.final:
            return self.deleted_error()
        return self.incomplete_error()

    def deleted_error(self) -> NotFound:
        return NotFound(f"RolloutBatch {self.namespace}/{self.name} was deleted while it was followed",
                        status=404, reason="NotFound")

    def timeout_error(self, timeout: float) -> TimeoutError:
        s = self.status
        return TimeoutError(f"RolloutBatch {self.namespace}/{self.name} not finished after {timeout:g}s "
                            f"(phase {s.get('phase') or v.PENDING}, {s.get('progress') or '-'}; "
                            f"{len(self.rows)} rows received)")
