"""A lean list+watch of the operator's pods (the batches' and the pools') and the batches' jobs,
feeding a callback with raw dicts.

Why not kopf's ``on.event``: kopf wraps, deep-copies and diffs every event of every watched
object and logs each handler call; episode pods produce 8-10 events each, and the benchmark's
profile showed that bookkeeping as the operator's largest CPU cost (bench/README.md); Jobs get a
status update per finished pod, so they cost the same. Children need none of it: the operator
only reads a few fields of each snapshot. This watcher runs in one
thread, filters server-side by label, resumes from the last resourceVersion after a dropped
connection and relists when the server says the version is too old (410 Gone).

The last resourceVersion is the watcher's, moved by every line the server sends (each event and
each BOOKMARK), so a session that breaks (a connection reset, a line cut short) resumes where it
was, not where it began: that would replay up to WATCH_SECONDS of events, take the pools' view
(kube.pool_pods) back to older pod states, and cost a 410 and a relist once compacted.
The version moves when an event is read, before the callback has it: a callback that raises on
an event is logged (the object's namespace/name and version) and the event skipped; the watch
goes on with the next one. Resuming before such an event would hand it over again at every
reconnect, for ever. What was skipped is not lost for good: each event is the whole object, so
its next event, or a relist, brings its state again.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
from collections.abc import Callable

from rolloutbatch.kube.client import Api
from rolloutbatch.kube.errors import Gone, KubeError

log = logging.getLogger(__name__)

OnEvent = Callable[[str, dict], None]   # (event type ADDED|MODIFIED|DELETED, object dict)
PAGE = 500
WATCH_SECONDS = 240                   # the server closes the watch; we resume from the last version
# A watch resumed from a version is answered before the events since that version: the API server
# writes its headers, then what its watch cache kept since (staging/src/k8s.io/apiserver, the
# cacher's initial events). It is reported open at its first line (an event, a BOOKMARK), or
# after this long with none: a backlog would have come by then, so there was none. The rest of
# a backlog follows its first line within milliseconds: a round in those may read the view that
# much behind (its writes stay guarded: deletions carry the version seen, creations are kept).
RESUME_SETTLE_SECONDS = 1.0


class Watcher:
    """Runs ``list`` then ``watch`` of the objects at ``path`` (e.g. ``/api/v1/pods``, all
    namespaces) matching ``selector``, in a daemon thread."""

    def __init__(self, api: Api, path: str, selector: str, on_event: OnEvent,
                 on_listed: Callable[[set[str], float], None] | None = None,
                 on_connected: Callable[[bool], None] | None = None) -> None:
        self.api = api
        self.path = path
        self.selector = selector
        self.on_event = on_event
        self.on_listed = on_listed         # the uids of each whole list (at the start, after a 410 Gone), and
                                           # when it began (time.monotonic)
        self.on_connected = on_connected   # the watch is open and its backlog begun (True), or broke or ended (False)
        self.stopped = threading.Event()
        self.synced = threading.Event()   # the first full list has been delivered
        self._quiet_gones = 0              # 410s since the watch last brought an event
        self._version: str | None = None   # where the watch resumes (None: list first)
        self._thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        backoff = 0.5
        while not self.stopped.is_set():
            try:
                listed = self._version is None
                if listed:
                    self._version = self._list()
                    self.synced.set()
                self._watch(resumed=not listed)
                backoff = 0.5
            except Gone:
                self._version = None  # too old: relist, at once the first time
                if self._quiet_gones:   # again before the watch brought an event: a list that keeps
                    pause = min(0.5 * 2 ** (self._quiet_gones - 1), 10.0)   # expiring must not loop
                    log.warning("Watch of %s: 410 Gone again; relisting in %.1fs", self.path, pause)
                    self.stopped.wait(pause)
                self._quiet_gones += 1
            except (KubeError, OSError, ValueError) as exc:
                log.warning("Watch of %s interrupted (%s); resuming in %.1fs", self.path, exc, backoff)
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception:  # noqa: BLE001 - the watch must outlive any surprise
                log.exception("Watch of %s failed; resuming", self.path)
                self.stopped.wait(backoff)

    def _list(self) -> str:
        params: dict = {"labelSelector": self.selector, "limit": PAGE}
        listed: set[str] = set()
        began = time.monotonic()
        while True:
            page = self.api.get(self.path, f"list {self.path}", **params)
            for item in page.get("items") or []:
                self._deliver("ADDED", item)
                if self.on_listed is not None:
                    listed.add((item.get("metadata") or {}).get("uid") or "")
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                if self.on_listed is not None:
                    self.on_listed(listed, began)
                return meta.get("resourceVersion") or ""
            params["continue"] = meta["continue"]

    def _deliver(self, kind: str, obj: dict) -> None:
        """``on_event``; a failure logged and the event skipped (the module docstring says why)."""
        try:
            self.on_event(kind, obj)
        except Exception:  # noqa: BLE001 - one event the callback cannot take must not stop the watch
            meta = obj.get("metadata") or {}
            log.exception("Watch of %s: skipped %s of %s/%s at resourceVersion %s, which the callback failed on",
                          self.path, kind, meta.get("namespace"), meta.get("name"), meta.get("resourceVersion"))

    def _watch(self, resumed: bool = False) -> None:
        """Watch from ``self._version``, moving it with each line; ``resumed``: a version kept across
        a reconnect, not a list's (the backlog since then may be seconds of changes: see
        RESUME_SETTLE_SECONDS)."""
        response = self.api.raw(
            self.path, f"watch {self.path}", labelSelector=self.selector, watch="true",
            resourceVersion=self._version, allowWatchBookmarks="true", timeoutSeconds=WATCH_SECONDS,
            timeout=(10, WATCH_SECONDS + 30),
        )
        connected = _Connected(self.on_connected, RESUME_SETTLE_SECONDS if resumed else 0.0)
        try:
            for line in response.iter_lines(chunk_size=65536):
                if self.stopped.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(obj.get("message", "watch expired"), status=410)
                    raise KubeError(f"watch error: {obj.get('message')}", status=obj.get("code"))
                self._version = (obj.get("metadata") or {}).get("resourceVersion") or self._version
                self._quiet_gones = 0
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._deliver(kind, obj)
                connected.up()
        finally:
            connected.down()
            response.close()


class _Connected:
    """A watch's on_connected: True at once, or after ``settle`` seconds unless :meth:`up` (its
    first line) comes first; False at its end, after which a timer's late True is dropped."""

    def __init__(self, callback: Callable[[bool], None] | None, settle: float) -> None:
        self._callback = callback or (lambda connected: None)
        self._lock = threading.Lock()
        self._state: bool | None = None   # None: not said yet
        self._timer: threading.Timer | None = None
        if callback is None:
            self._state = False           # nobody to tell: no timer either
        elif settle <= 0:
            self.up()
        else:
            self._timer = threading.Timer(settle, self.up)
            self._timer.daemon = True
            self._timer.start()

    def up(self) -> None:
        if self._state is not None:   # said already (the common case: no lock per line)
            return
        with self._lock:
            if self._state is None:
                self._state = True
                self._callback(True)

    def down(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._state = False
            self._callback(False)


class LoopInbox:
    """Hands items from watch threads to an event loop, one loop wake-up per ``window``.

    ``call_soon_threadsafe`` per watch event wrote to the loop's self-pipe for every one of a
    pod's 8-10 events: a tenth of a termination-message batch's operator CPU (as
    profiled). Items queue here; the first of a burst schedules one delivery ``window`` seconds
    later (the reconciler coalesces its rounds over the same 50 ms), which hands over
    everything queued by then, in order.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[..., None], window: float = 0.05) -> None:
        self._loop, self._deliver, self._window = loop, deliver, window
        self._items: collections.deque[tuple] = collections.deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, *item: object) -> None:
        """From any thread."""
        with self._lock:
            self._items.append(item)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._later)
        except RuntimeError:   # the loop is closed (shutdown): a later put must try again, not pile up
            with self._lock:
                self._scheduled = False
            raise

    def _later(self) -> None:
        self._loop.call_later(self._window, self._drain)

    def _drain(self) -> None:
        with self._lock:
            items = list(self._items)
            self._items.clear()
            self._scheduled = False
        for item in items:
            try:
                self._deliver(*item)
            except Exception:  # noqa: BLE001 - one bad event must not drop the rest of the burst
                log.exception("Delivering a watch event failed")
