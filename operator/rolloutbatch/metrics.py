"""Prometheus metrics for the RolloutBatch operator: when each family changes (its names, help
texts, labels and buckets are :mod:`rolloutbatch.metrics_collectors`').

Every collector lives on an injected :class:`CollectorRegistry`, so tests build a fresh registry
and read values with ``registry.get_sample_value``; the operator builds one registry per process.

Label cardinality is bounded: by default the only per-object label is ``namespace`` (the
RolloutBatch's namespace); pod, episode and batch names never become labels. ``batch_label=True``
adds a ``batch`` label to the per-batch series, and :meth:`Metrics.batch_deleted` removes them
again, so a cluster that runs many batches does not accumulate dead series.

The operator calls the methods below from its handlers; they are cheap, thread-safe, idempotent
where a restarted or retried handler may repeat a call (``batch_started``, ``batch_finished``,
``batch_deleted``), and never raise on odd numbers (NaN, infinity, negative durations caused by
clock skew): such observations are dropped or clamped, because a metrics bug must never fail a
batch.
"""

from __future__ import annotations

import errno
import math
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ContextManager

from prometheus_client import (
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from rolloutbatch.metric_buckets import (  # noqa: F401 - the defaults are part of this module's API
    DEFAULT_BATCH_BUCKETS,
    DEFAULT_CLAIM_BUCKETS,
    DEFAULT_DURATION_BUCKETS,
    DEFAULT_HANDLER_BUCKETS,
    DEFAULT_LOG_READ_BUCKETS,
    DEFAULT_REWARD_BUCKETS,
    DEFAULT_STARTUP_BUCKETS,
)
from rolloutbatch.metrics_collectors import (  # noqa: F401 - the names are part of this module's API
    BATCH_RESULTS,
    EPISODE_RESULTS,
    HISTOGRAM_NAMES,
    METRIC_NAMES,
    PREFIX,
    REWARD_SIGNS,
    Collectors,
)

MAX_DELETED_REMEMBERED = 10_000   # deleted batches and pools whose late calls are ignored


@dataclass
class _BatchState:
    uid: str | None = None    # the batch object's (batch_seen): a namesake's calls are not its
    active: bool = False
    finished: bool = False
    running: int = 0
    job_complete_observed: bool = False
    queue_wait_observed: bool = False


def _usable(value: float | None) -> float | None:
    """A value fit to observe: None for missing/NaN/infinite input."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _duration(value: float | None) -> float | None:
    """A duration fit to observe; negative values (clock skew) are clamped to zero."""
    v = _usable(value)
    return None if v is None else max(0.0, v)


class Metrics(Collectors):
    """The operator's collectors, registered on ``registry``.

    ``registry=None`` creates a private registry with the process and platform collectors, so
    ``serve()`` exports ``process_*`` and ``python_info`` as well; pass your own registry to
    control exactly what is exported (tests pass an empty one).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        batch_label: bool = False,
        startup_buckets: Sequence[float] = DEFAULT_STARTUP_BUCKETS,
        reward_buckets: Sequence[float] = DEFAULT_REWARD_BUCKETS,
    ) -> None:
        if registry is None:
            registry = CollectorRegistry(auto_describe=True)
            registry.register(PROCESS_COLLECTOR)
            registry.register(PLATFORM_COLLECTOR)
        self.registry = registry
        self.batch_label = batch_label
        self.server_port: int | None = None  # the bound port after serve()
        self._lock = threading.Lock()
        self._batches: dict[tuple[str, str], _BatchState] = {}
        # Batches deleted lately, with their uids: a call for one after batch_deleted (its
        # daemon's last status, cancelled after the deletion handler ran) would make its series
        # again, for good. batch_seen of another uid (a new batch of the name) takes it off; the
        # oldest go past the bound.
        self._deleted: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._deleted_pools: OrderedDict[tuple[str, str], None] = OrderedDict()   # the same of pools
        # Active batches per namespace, and running episodes per namespace (sum over batches).
        self._active: dict[str, int] = {}
        self._running: dict[str, int] = {}

        super().__init__(registry, batch_label, startup_buckets, reward_buckets)

    # --- label plumbing -----------------------------------------------------------------------

    def _key(self, namespace: str, batch: str) -> tuple[str, ...]:
        return (namespace, batch) if self.batch_label else (namespace,)

    def _init_series(self, key: tuple[str, ...]) -> None:
        """Create every series of a namespace/batch at zero, so rate() and ratios see 0, not
        absence (prometheus-client only creates a labelled series on first use)."""
        for result in EPISODE_RESULTS:
            self.episodes_total.labels(*key, result)
        for result in BATCH_RESULTS:
            self.batches_total.labels(*key, result)
        self.batches_active.labels(*key)
        self.episodes_running.labels(*key)
        self.episodes_retried_total.labels(*key)
        self.reward_extras_dropped_total.labels(*key)
        self.queue_evictions_total.labels(*key)
        for sign in REWARD_SIGNS:
            self.episode_reward_magnitude_total.labels(*key, sign)
        for h in (*self.episode_histograms, *self.batch_histograms):
            h.labels(*key)

    def _state(self, namespace: str, batch: str) -> _BatchState | None:
        """The batch's bookkeeping, created (with its series) on first sight; None for a batch
        deleted since (nothing more is recorded of it). Caller holds the lock."""
        k = (namespace, batch)
        if k in self._deleted:
            return None
        st = self._batches.get(k)
        if st is None:
            st = self._batches[k] = _BatchState()
            self._init_series(self._key(namespace, batch))
        return st

    def _set_active_gauge(self, namespace: str, batch: str, st: _BatchState) -> None:
        if self.batch_label:
            self.batches_active.labels(namespace, batch).set(1 if st.active else 0)
        else:
            self.batches_active.labels(namespace).set(self._active.get(namespace, 0))

    def _set_running_gauge(self, namespace: str, batch: str, st: _BatchState) -> None:
        if self.batch_label:
            self.episodes_running.labels(namespace, batch).set(st.running)
        else:
            self.episodes_running.labels(namespace).set(self._running.get(namespace, 0))

    def _deactivate(self, namespace: str, batch: str, st: _BatchState) -> None:
        if st.active:
            st.active = False
            self._active[namespace] = self._active.get(namespace, 0) - 1
        if st.running:
            self._running[namespace] = self._running.get(namespace, 0) - st.running
            st.running = 0
        self._set_active_gauge(namespace, batch, st)
        self._set_running_gauge(namespace, batch, st)

    # --- batch lifecycle ------------------------------------------------------------------------

    def batch_seen(self, namespace: str, batch: str, uid: str) -> None:
        """A batch object is handled (its reconciler made): one of a name deleted before, under
        another uid, records from now on, whatever its first call (it may fail before it starts).
        A namesake of a batch whose deletion has not ended yet (its finalizer removed by hand)
        replaces its bookkeeping: that batch's late deletion then leaves this one's alone."""
        with self._lock:
            if (namespace, batch) in self._deleted and self._deleted[(namespace, batch)] != uid:
                del self._deleted[(namespace, batch)]
            st = self._batches.get((namespace, batch))
            if st is not None and st.uid is not None and st.uid != uid:
                self._forget(namespace, batch, st)
                st = None
            if st is None:
                st = self._state(namespace, batch)
            if st is not None:
                st.uid = uid

    def batch_started(self, namespace: str, batch: str) -> None:
        """A batch began (or a restarted operator resumed it): batches_active +1, once."""
        with self._lock:
            st = self._state(namespace, batch)
            if st is None or st.active or st.finished:
                return
            st.active = True
            self._active[namespace] = self._active.get(namespace, 0) + 1
            self._set_active_gauge(namespace, batch, st)

    def batch_finished(
        self,
        namespace: str,
        batch: str,
        result: str,
        ready_seconds: float | None,
        rewards_seconds: float | None,
        complete_seconds: float | None,
    ) -> None:
        """A batch reached Succeeded or Failed: counted once, leaves batches_active, its running
        episodes drop to zero, and its durations are observed (None = not measured)."""
        if result not in BATCH_RESULTS:
            raise ValueError(f"batch result must be one of {BATCH_RESULTS}, not {result!r}")
        with self._lock:
            st = self._state(namespace, batch)
            if st is None or st.finished:
                return
            st.finished = True
            self._deactivate(namespace, batch, st)
            key = self._key(namespace, batch)
            self.batches_total.labels(*key, result).inc()
            for hist, value in zip(self.batch_histograms[:2], (ready_seconds, rewards_seconds)):
                v = _duration(value)
                if v is not None:
                    hist.labels(*key).observe(v)
        if complete_seconds is not None:
            self.job_completed(namespace, batch, complete_seconds)

    def job_completed(self, namespace: str, batch: str, seconds: float | None) -> None:
        """The batch's Job was seen complete (often just after the batch's final status: the Job
        controller marks it a moment later): observed once per batch, whenever it comes."""
        v = _duration(seconds)
        if v is None:
            return
        with self._lock:
            st = self._state(namespace, batch)
            if st is None or st.job_complete_observed:
                return
            st.job_complete_observed = True
            self.batch_complete_seconds.labels(*self._key(namespace, batch)).observe(v)

    def batch_admitted(self, namespace: str, batch: str, wait_seconds: float | None) -> None:
        """Kueue admitted the batch's Job for the first time (core.queueing): observed once."""
        v = _duration(wait_seconds)
        if v is None:
            return
        with self._lock:
            st = self._state(namespace, batch)
            if st is None or st.queue_wait_observed:
                return
            st.queue_wait_observed = True
            self.queue_wait_seconds.labels(*self._key(namespace, batch)).observe(v)

    def batch_evicted(self, namespace: str, batch: str) -> None:
        """Kueue evicted the batch's running Job."""
        with self._lock:
            if self._state(namespace, batch) is None:
                return
            self.queue_evictions_total.labels(*self._key(namespace, batch)).inc()

    def batch_deleted(self, namespace: str, batch: str, uid: str | None = None) -> None:
        """A batch (of ``uid``) is gone: leave batches_active if it never finished, forget its
        bookkeeping, and (with batch_label) remove every series carrying its name. Its later
        calls record nothing (see batch_seen)."""
        with self._lock:
            st = self._batches.get((namespace, batch))
            if st is not None and None not in (st.uid, uid) and st.uid != uid:
                return   # a namesake's since: its bookkeeping and series are its own
            self._deleted[(namespace, batch)] = uid
            while len(self._deleted) > MAX_DELETED_REMEMBERED:
                self._deleted.popitem(last=False)
            self._forget(namespace, batch, st)

    def _forget(self, namespace: str, batch: str, st: _BatchState | None) -> None:
        """Leave batches_active if the batch never finished, drop its bookkeeping and (with
        batch_label) every series carrying its name. Caller holds the lock."""
        if st is not None:
            self._batches.pop((namespace, batch), None)
            self._deactivate(namespace, batch, st)
        if self.batch_label:
            key = (namespace, batch)
            for result in EPISODE_RESULTS:
                _remove(self.episodes_total, *key, result)
            for result in BATCH_RESULTS:
                _remove(self.batches_total, *key, result)
            for sign in REWARD_SIGNS:
                _remove(self.episode_reward_magnitude_total, *key, sign)
            for metric in (
                self.batches_active, self.episodes_running, self.episodes_retried_total,
                self.reward_extras_dropped_total, self.queue_evictions_total, *self.episode_histograms,
                *self.batch_histograms,
            ):
                _remove(metric, *key)

    # --- episodes -------------------------------------------------------------------------------

    def episode_finished(
        self,
        namespace: str,
        batch: str,
        result: str,
        startup_seconds: float | None,
        duration_seconds: float | None,
        reward: float | None,
    ) -> None:
        """One episode's verdict; each episode index should be reported once."""
        if result not in EPISODE_RESULTS:
            raise ValueError(f"episode result must be one of {EPISODE_RESULTS}, not {result!r}")
        with self._lock:
            if self._state(namespace, batch) is None:
                return
            key = self._key(namespace, batch)
            self.episodes_total.labels(*key, result).inc()
            v = _duration(startup_seconds)
            if v is not None:
                self.episode_startup_seconds.labels(*key).observe(v)
            v = _duration(duration_seconds)
            if v is not None:
                self.episode_duration_seconds.labels(*key).observe(v)
            v = _usable(reward)
            if v is not None:
                self.episode_reward.labels(*key).observe(v)
                if v:
                    sign = REWARD_SIGNS[0] if v > 0 else REWARD_SIGNS[1]
                    self.episode_reward_magnitude_total.labels(*key, sign).inc(abs(v))

    def episode_retried(self, namespace: str, batch: str) -> None:
        with self._lock:
            if self._state(namespace, batch) is None:
                return
            self.episodes_retried_total.labels(*self._key(namespace, batch)).inc()

    def reward_extras_dropped(self, namespace: str, batch: str) -> None:
        """One episode's row left some of its reward's extra fields out (core.events' budget)."""
        with self._lock:
            if self._state(namespace, batch) is None:
                return
            self.reward_extras_dropped_total.labels(*self._key(namespace, batch)).inc()

    def set_running(self, namespace: str, batch: str, running: int) -> None:
        """The batch's current number of running episode pods. Exported per namespace (the sum
        over its batches) unless batch_label. Ignored once the batch has finished."""
        running = max(0, int(running))
        with self._lock:
            st = self._state(namespace, batch)
            if st is None or st.finished:
                return
            self._running[namespace] = self._running.get(namespace, 0) - st.running + running
            st.running = running
            self._set_running_gauge(namespace, batch, st)

    # --- operator internals ---------------------------------------------------------------------

    def pool_started(self, namespace: str, pool: str) -> None:
        """A pool's series at zero from its start, so rate() and increase() see its first claims."""
        with self._lock:
            self._deleted_pools.pop((namespace, pool), None)
        for result in ("hit", "miss"):
            self.pool_claims_total.labels(namespace, pool, result)
            self.claim_seconds.labels(namespace, pool, result)

    def pool_deleted(self, namespace: str, pool: str) -> None:
        """A pool is gone: its series go too (the pool label is always on), as a batch's do with
        batch_label; else every pool ever made would stay exported until a restart. A claim of
        it observed later (a hand-over still under way) is not recorded: it would make them again."""
        with self._lock:
            self._deleted_pools[(namespace, pool)] = None
            while len(self._deleted_pools) > MAX_DELETED_REMEMBERED:
                self._deleted_pools.popitem(last=False)
        for result in ("hit", "miss"):
            _remove(self.pool_claims_total, namespace, pool, result)
            _remove(self.claim_seconds, namespace, pool, result)

    def pool_claims(self, namespace: str, pool: str, hits: int, misses: int) -> None:
        """A pooled batch started: ``hits`` episodes got a warm pod, ``misses`` start cold."""
        if (namespace, pool) in self._deleted_pools:
            return
        self.pool_claims_total.labels(namespace, pool, "hit").inc(max(0, hits))
        self.pool_claims_total.labels(namespace, pool, "miss").inc(max(0, misses))

    def claim_observed(self, namespace: str, pool: str, hit: bool, seconds: float) -> None:
        v = _duration(seconds)
        if v is not None and (namespace, pool) not in self._deleted_pools:
            self.claim_seconds.labels(namespace, pool, "hit" if hit else "miss").observe(v)

    def log_read(self, seconds: float, nbytes: int) -> None:
        v = _duration(seconds)
        if v is not None:
            self.log_read_seconds.observe(v)
        if nbytes and nbytes > 0:
            self.log_read_bytes_total.inc(nbytes)

    def handler(self, name: str) -> ContextManager[None]:
        """Time a handler run: ``with metrics.handler("create"): ...``. Exceptions are counted in
        handler_errors_total and re-raised unchanged."""
        return self._handler(name)

    @contextmanager
    def _handler(self, name: str) -> Iterator[None]:
        errors = self.handler_errors_total.labels(name)  # exported at 0 from the first run on
        start = time.perf_counter()
        try:
            yield
        except Exception:  # not CancelledError: a cancelled handler did not fail
            errors.inc()
            raise
        finally:
            self.handler_duration_seconds.labels(name).observe(time.perf_counter() - start)

    def set_leader(self, leads: bool) -> None:
        self.leader.set(1 if leads else 0)

    def serve(self, port: int, addr: str | None = None) -> Callable[[], None]:
        """Serve ``/metrics`` from a daemon thread; returns a function that stops the server.
        ``port=0`` picks a free port, readable afterwards as ``self.server_port``.

        ``addr=None`` listens on every address of both families, so the kubelet and Prometheus
        reach it on an IPv4, IPv6 or dual-stack cluster: one IPv6 socket on ``::``, which takes
        IPv4 as well where IPV6_V6ONLY is off (Linux's default, net.ipv6.bindv6only=0), with an
        IPv4 one beside it where it is on, and ``0.0.0.0`` alone on a host without IPv6.
        """
        servers = []
        if addr is None:
            try:
                servers.append(start_http_server(port, "::", registry=self.registry))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise
                # no IPv6 here (EAFNOSUPPORT, EADDRNOTAVAIL): IPv4 only
            if not servers or servers[0][0].socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY):
                bound = servers[0][0].server_port if servers else port
                try:
                    servers.append(start_http_server(bound, "0.0.0.0", registry=self.registry))
                except OSError:
                    _stop(servers)
                    raise
        else:
            servers.append(start_http_server(port, addr, registry=self.registry))
        self.server_port = servers[0][0].server_port
        return lambda: _stop(servers)


def _stop(servers: list) -> None:
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _remove(metric: Counter | Gauge | Histogram, *labelvalues: str) -> None:
    try:
        metric.remove(*labelvalues)
    except KeyError:
        pass
