"""Who reconciles: the leader-election loop, and the operator's life around it (docs/design.md §5.15).

:class:`Elector` competes for the Lease with ``core.leadership``'s rules. It runs in a thread of
its own, not on the event loop: a handler that holds the loop for a few seconds must not cost the
lease, and a wedged loop is the liveness probe's to catch (``/healthz`` is served on it). Its
requests use an ``Api`` with a short timeout, and a watchdog thread ends the process the moment
the holder's deadline passes without a renewal (controller-runtime exits the process too): a
leader cut off from the API server stops before a standby can take over, so two operators never
reconcile at once. :func:`operate` is the operator's life: serve health, wait as a standby, run
the reconciler (kopf) only once the lease is held, and release it once the reconciler and every
API call it left in a worker thread have ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rolloutbatch.core import leadership as L
from rolloutbatch.kube import leases
from rolloutbatch.kube.errors import Conflict, Forbidden, KubeError, NotFound

# Worker threads for the API calls (kube.storage runs each in one). Python's default is the cores
# + 4: 6 on a 2-core node, so a pooled batch's 20 claims went out 6 at a time, each waiting on
# the API server, not on a core. The connection pool (kube.client.Api) holds 64.
API_THREADS = 32

log = logging.getLogger("rolloutbatch.leadership")


def exit_now() -> None:
    """Stop at once: no handler may run a step more (controller-runtime's manager exits too)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class Elector:
    """One candidate for the Lease ``namespace/name``. ``role`` is starting, standby, leader or
    stopped; ``leading`` is set once the lease is held."""

    def __init__(self, api: Any, namespace: str, identity: str, timing: L.Timing = L.Timing(), *,
                 name: str = L.LEASE_NAME, on_leader: Callable[[bool], None] = lambda leads: None,
                 on_lost: Callable[[], None] = exit_now, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime.datetime] = _utcnow) -> None:
        self.api, self.namespace, self.name, self.identity, self.timing = api, namespace, name, identity, timing
        self.on_leader, self.on_lost, self.clock, self.wall = on_leader, on_lost, clock, wall
        self.role = "starting"
        self.holder: str | None = None       # as last read
        self.holder_until: str | None = None
        self.error: str | None = None
        self.leading = threading.Event()
        self._lease: dict | None = None      # the Lease as last read or written
        self._observation: L.Observation | None = None
        self._until: float | None = None     # our monotonic deadline while we lead
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- one round ---------------------------------------------------------------------------
    def try_once(self) -> bool:
        """Read, decide, write: True when we hold the lease after this round. A failed request
        raises its ``KubeError``; a lost race (409) is a False."""
        started = self.clock()
        if (self.leading.is_set() and self._lease is not None and self._observation is not None
                and self._observation.record.holder == self.identity):
            # The holder's fast path (client-go too): renew over what it last wrote, no read
            # first; only while the last record it saw is its own (never over another's).
            record = L.next_record(self._observation.record, self.identity, self.wall(), self.timing)
            try:
                return self._won(leases.update_lease(self.api, self._lease, record.to_spec()), record, started)
            except (Conflict, NotFound):
                pass   # changed or deleted under us: read it and decide like anyone else
        lease = leases.get_lease(self.api, self.namespace, self.name)
        now = self.clock()
        if lease is None:
            record = L.next_record(None, self.identity, self.wall(), self.timing)
            try:
                created = leases.create_lease(self.api, self.namespace, self.name, record.to_spec(),
                                              {"app.kubernetes.io/name": "rolloutbatch"})
            except Conflict:
                return False
            return self._won(created, record, started)
        record = L.Record.from_spec(lease.get("spec"))
        self._lease = lease
        self._observation = L.observe(self._observation, record, lease["metadata"]["resourceVersion"], now)
        decision = L.decide(self._observation, self.identity, now, self.timing)
        if decision.action is L.Action.WAIT:
            if self.leading.is_set():
                self._deposed(record)
                return False
            self._standby(record)
            return False
        if record.holder and record.holder != self.identity:
            log.info("standby: lease %s/%s of %s expired (not renewed for %gs as seen here): taking over",
                     self.namespace, self.name, record.holder, self.timing.lease_duration)
        new = L.next_record(record, self.identity, self.wall(), self.timing)
        try:
            return self._won(leases.update_lease(self.api, lease, new.to_spec()), new, started)
        except Conflict:
            return False

    def _won(self, lease: dict, record: L.Record, started: float) -> bool:
        self._lease = lease
        self._observation = L.Observation(record, lease["metadata"]["resourceVersion"], started)
        with self._cond:
            if self._until is not None and self.clock() >= self._until:
                return False   # too late: the watchdog is stopping this process
            first = not self.leading.is_set()
            self._until = L.leading_until(started, self.timing)
            self.holder, self.holder_until, self.error = self.identity, L.valid_until(record), None
            self.role = "leader"
            self._cond.notify_all()
        if first:
            log.info("leader: acquired lease %s/%s as %s (leader transitions: %d)", self.namespace, self.name,
                     self.identity, record.transitions)
            self.on_leader(True)
            self.leading.set()
        return True

    def _deposed(self, record: L.Record) -> None:
        """The lease names another, live holder while we lead (deleted and re-created, or
        handed over by an admin): stop at once, as when the renew deadline passes. Waiting for
        our own deadline would let two operators reconcile until then."""
        self._stop.set()                   # no more rounds; the watchdog stands down: this is the one exit
        with self._cond:
            self._until = None
            self.role, self.holder, self.holder_until = "stopped", record.holder, L.valid_until(record)
            self._cond.notify_all()
        log.critical("leader: lease %s/%s now names %s: stopping at once, it leads", self.namespace, self.name,
                     record.holder)
        self.leading.clear()
        self.on_leader(False)
        self.on_lost()

    def _standby(self, record: L.Record) -> None:
        changed = record.holder != self.holder or self.role != "standby"
        self.role, self.holder, self.holder_until, self.error = "standby", record.holder, L.valid_until(record), None
        if changed:
            log.info("standby: %s lease held by %s until %s (renewed by its holder; checked every %gs)",
                     self.name, record.holder, self.holder_until, self.timing.retry_period)

    # -- the loop ----------------------------------------------------------------------------
    def start(self) -> None:
        for target, name in ((self._loop, "leader-election"), (self._watchdog, "leader-watchdog")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def alive(self) -> bool:
        return all(thread.is_alive() for thread in self._threads) or self._stop.is_set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_once()
            except KubeError as exc:
                self._failed(exc)
            except Exception as exc:  # noqa: BLE001 - a bug here must not end the loop silently
                log.exception("leader election: unexpected error")
                self._failed(exc)
            if self.role == "starting":
                self.role = "standby"   # the first round failed: not leading, and said so below
            period = self.timing.retry_period
            self._stop.wait(period if self.leading.is_set() else period * random.uniform(1, 1 + L.JITTER))

    def _failed(self, exc: Exception) -> None:
        text = str(exc)
        if isinstance(exc, Forbidden):
            text += (f" (the operator needs get, create and update on leases in {self.namespace}: "
                     "manifests/rbac/leader_election_role.yaml)")
        elif isinstance(exc, NotFound):
            text += f" (does the namespace {self.namespace} exist? --leader-election-namespace names another)"
        if text != self.error:
            log.warning("leader election: %s%s", text, "; still leading until the renew deadline"
                        if self.leading.is_set() else "")
        self.error = text

    def _watchdog(self) -> None:
        with self._cond:
            while not self._stop.is_set():
                if self._until is None:
                    self._cond.wait(0.5)
                    continue
                left = self._until - self.clock()
                if left > 0:
                    self._cond.wait(min(left, 0.5))
                    continue
                break
            else:
                return
            self.role = "stopped"
        log.critical("leader: lease %s/%s not renewed within the %gs renew deadline (%s): stopping at once, "
                     "a standby takes over", self.namespace, self.name, self.timing.renew_deadline,
                     self.error or "no answer")
        self.on_leader(False)
        self.on_lost()

    def stop(self, *, release: bool) -> None:
        """End the loop; ``release`` (only once nothing reconciles any more) frees the lease."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        # One renew deadline for all of them (a round's requests fit in it), not one each: the
        # graceful stop's budget counts it once (core.leadership.stop_seconds).
        deadline = time.monotonic() + self.timing.renew_deadline
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        was_leader = self.leading.is_set() and self.role == "leader"
        self.role = "stopped"
        if was_leader:
            self.on_leader(False)
        if not (release and was_leader and self._lease is not None):
            return
        record = L.released(self._observation.record, self.wall())
        try:
            leases.update_lease(self.api, self._lease, record.to_spec())
            log.info("leader: released lease %s/%s", self.namespace, self.name)
        except KubeError as exc:
            log.warning("leader: lease %s/%s not released (%s): a standby takes over when it expires",
                        self.namespace, self.name, exc)

    def status(self) -> dict:
        return {"role": self.role, "identity": self.identity, "holder": self.holder,
                "holderUntil": self.holder_until, "lease": f"{self.namespace}/{self.name}", "error": self.error}

    async def wait_leader(self, stop: asyncio.Event) -> bool:
        """Wait until the lease is ours (True) or ``stop`` is set (False)."""
        while not self.leading.is_set():
            if stop.is_set():
                return False
            await asyncio.sleep(0.1)
        return True


async def _cancelled(tasks: set[asyncio.Task], timeout: float) -> bool:
    """Cancel ``tasks`` (but the caller's) and wait, at most ``timeout`` seconds, for them to end.
    True when none is left."""
    left = {task for task in tasks if task is not asyncio.current_task() and not task.done()}
    for task in left:
        task.cancel()
    if not left:
        return True
    _, pending = await asyncio.wait(left, timeout=timeout)
    return not pending


async def _drained(executor: concurrent.futures.ThreadPoolExecutor, timeout: float) -> bool:
    """Shut ``executor`` down (no new call) and wait, at most ``timeout`` seconds and without
    blocking the loop, for the calls it still runs. True when none is left."""
    done = threading.Event()

    def shutdown() -> None:
        executor.shutdown(wait=True)
        done.set()
    threading.Thread(target=shutdown, name="rolloutbatch-api-drain", daemon=True).start()
    deadline = time.monotonic() + timeout
    while not done.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return done.is_set()


async def operate(elector: Elector | None, reconcile: Callable[[asyncio.Event], Awaitable[None]], *,
                  settle_timeout: float = L.API_DRAIN,
                  on_leader: Callable[[bool], None] = lambda leads: None) -> None:
    """The operator's life: wait as a standby (SIGTERM/SIGINT end the wait), run ``reconcile(stop)``
    (kopf) only as the leader, then release the lease once nothing it started still runs.

    ``on_leader`` hears when this process starts and stops leading: from the elector when there is
    one, else here, since a process without leader election is the only one and leads while it
    reconciles."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)   # kopf installs its own once it runs
    # Our own default executor, so its shutdown can be waited for with a bound: the loop's
    # shutdown_default_executor joins its thread even when the wait for it is cancelled
    # (CPython 3.11), which would hold the loop (and /healthz) until every call ended.
    executor = concurrent.futures.ThreadPoolExecutor(API_THREADS, thread_name_prefix="rolloutbatch-api")
    loop.set_default_executor(executor)
    if elector is None:
        on_leader(True)
        try:
            await reconcile(stop)
        finally:
            on_leader(False)
        return
    elector.on_leader = on_leader
    elector.start()
    settled = True
    try:
        if not await elector.wait_leader(stop):
            return
        before = asyncio.all_tasks()
        try:
            await reconcile(stop)
        finally:
            # What the reconciler started must end before another operator may start (client-go's
            # ReleaseOnCancel asks the same of its callers): the tasks it left on the loop (a
            # hand-over, a retried annotation, a channel's close: kopf stops only its own), then
            # the API calls left running in worker threads (Storage runs every call in one).
            deadline = time.monotonic() + settle_timeout
            settled = await _cancelled(asyncio.all_tasks() - before, settle_timeout) \
                and await _drained(executor, max(0.0, deadline - time.monotonic()))
            if not settled:
                log.warning("leader: tasks or API calls still running after %gs: the lease is left to expire",
                            settle_timeout)
    finally:
        elector.stop(release=settled)   # blocking, briefly: the executor is gone by now
