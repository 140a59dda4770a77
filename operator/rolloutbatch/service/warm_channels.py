"""Attaches opened to a pool's warm pods before they are claimed (kube.pod_attach.AttachChannel).

Opening an attach (API server, kubelet, runtime, then a ping the container answers) was most of a
claim's time when a batch opened twenty at its claim (bench/README.md). So the pool's daemon
(service.pools) opens one to each warm pod's episode container while it waits, and the batch that
claims the pod (service.episode_delivery) takes it and only writes the script. A pod without a
channel (none yet, a failed one, past MAX_OPEN, another operator's pool) is handed over through an
attach opened then, as before. One registry per operator (service.context.Context), on its loop.

Two writers must never share a stdin (a ping between a script's bytes spoils the script: the
launcher then refuses it, and the pod is lost to its deadline). So:
- a pod taken is taken for good: its uid is remembered and no channel is opened to it again (a
  pool's round that listed it warm before its claim may come after);
- taking a pod whose channel is still opening waits for that opening (its pings) to end, and past
  TAKE_WAIT cancels it; one still queued for a slot (nothing sent yet) is cancelled at once;
- a channel is closed when its pod is no longer among the pool's warm pods and was not taken.
  Closing one leaves the container's stdin open (the pods have no ``stdinOnce``): the pod can still
  be handed its episode through another attach.
A pod whose open failed is not tried again for FAILED_BACKOFF; a kept channel is pinged by the
client (KEEPALIVE) so that a connection gone silent reads as ended, not as a channel that takes a
script and never answers. This assumes one operator process opens channels to a pool's pods (the
leader: every pool daemon runs there); a second one, outside leader election, could ping into this
one's hand-over and spoil it (refused by the launcher, the pod lost to its deadline).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from rolloutbatch.core import pool_delivery

OPENING_AT_ONCE = 4       # opens in flight: a refill's are kept from crowding the node and the API server
MAX_OPEN = 256            # channels kept (each a connection through API server, kubelet and runtime)
TAKE_WAIT = 2.0           # how long a claim waits for a channel still opening, before its own attach
TAKEN_MEMORY = 10_000     # uids of taken pods remembered (a stale round's list is at most seconds old)
OPEN_TIMEOUT = 10.0       # an open (connection and the container's answer to a ping)
FAILED_BACKOFF = 30.0     # a pod whose open failed is not tried again before this
KEEPALIVE = 30.0          # seconds between the client's pings on a kept channel


class Channel(Protocol):
    @property
    def alive(self) -> bool: ...

    async def deliver(self, data: bytes, *, timeout: float) -> None: ...

    async def close(self) -> None: ...


# (namespace, pod, container) -> an open channel; raises when it cannot be opened
Opener = Callable[[str, str, str], Awaitable[Channel]]


def opener(pool_storage: Any) -> Opener:
    """Channels opened through ``kube.pool_storage.PoolStorage``, as a hand-over's attach is."""
    async def open_channel(namespace: str, pod: str, container: str) -> Channel:
        return await pool_storage.open_channel(namespace, pod, container, ack=pool_delivery.RECEIVED.encode(),
                                               timeout=OPEN_TIMEOUT, hello=pool_delivery.HELLO,
                                               keepalive=KEEPALIVE)
    return open_channel


@dataclasses.dataclass(eq=False)
class _Entry:
    namespace: str
    pod: str
    container: str
    task: asyncio.Task | None = None
    channel: Channel | None = None
    opening: bool = False    # it holds a slot: its connection and pings are under way
    taking: bool = False     # a take waits for this opening: its channel is the taker's


class WarmChannels:
    """The channels to warm pods, by pod uid (see the module docstring)."""

    def __init__(self, opener: Opener, log: logging.Logger, max_open: int = MAX_OPEN,
                 opening_at_once: int = OPENING_AT_ONCE) -> None:
        self._open, self.log, self._max = opener, log, max_open
        self._entries: dict[str, _Entry] = {}
        self._taken: dict[str, None] = {}      # an ordered set
        self._failed: dict[str, float] = {}    # uid -> when (loop time) its open may be tried again
        self._slots = asyncio.Semaphore(opening_at_once)
        self._closing: dict[asyncio.Task, str] = {}   # closes under way -> their namespace

    def __len__(self) -> int:
        return len(self._entries)

    def open_for(self, uid: str) -> bool:
        """Whether ``uid`` has a channel open and unused."""
        entry = self._entries.get(uid)
        return entry is not None and entry.channel is not None and entry.channel.alive

    def keep(self, namespace: str, pods: Iterable[tuple[str, str, str]]) -> None:
        """``namespace``'s warm pods now, as (uid, name, container): a channel is opened to each
        that has none, and closed for the namespace's others."""
        wanted = {uid: (name, container) for uid, name, container in pods}
        now = asyncio.get_running_loop().time()
        self._failed = {uid: until for uid, until in self._failed.items() if until > now}
        for uid, entry in list(self._entries.items()):
            dead = entry.channel is not None and not entry.channel.alive
            if entry.namespace == namespace and (uid not in wanted or dead):
                self._drop(uid)
        for uid, (name, container) in wanted.items():
            if uid in self._entries or uid in self._taken or uid in self._failed or len(self._entries) >= self._max:
                continue
            entry = _Entry(namespace, name, container)
            self._entries[uid] = entry
            entry.task = asyncio.create_task(self._opening(uid, entry))

    async def take(self, uid: str, container: str) -> Channel | None:
        """The pod's open channel to ``container``, now the caller's (to deliver or close), or
        None: the caller opens its own attach. A channel that ended since the pool's round (its
        connection closed, its keepalive unanswered) is closed here, never handed out. Never opened
        to again after this."""
        self._taken[uid] = None
        while len(self._taken) > TAKEN_MEMORY:
            del self._taken[next(iter(self._taken))]
        entry = self._entries.pop(uid, None)
        if entry is None:
            return None
        channel = entry.channel
        if channel is None and entry.task is not None and not entry.opening:
            entry.task.cancel()   # still queued for a slot: nothing was sent, and waiting could take long
            await asyncio.gather(entry.task, return_exceptions=True)
            return None
        if channel is None and entry.task is not None:
            entry.taking = True
            try:
                channel = await asyncio.wait_for(asyncio.shield(entry.task), TAKE_WAIT)
            except asyncio.TimeoutError:
                channel = None
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                channel = None   # the opening was cancelled (its pool's daemon ended)
            finally:
                if not entry.task.done():
                    entry.task.cancel()   # its open, if under way, is closed by its own cancellation
                    await asyncio.gather(entry.task, return_exceptions=True)
                elif channel is None and not entry.task.cancelled() and entry.task.exception() is None \
                        and entry.task.result() is not None:
                    self._close_later(entry.task.result(), entry.namespace)   # opened as the wait ran out
        if channel is not None and (entry.container != container or not channel.alive):
            await channel.close()
            return None
        return channel

    async def close_namespace(self, namespace: str) -> None:
        """Close every channel of ``namespace`` (its pool's daemon ends) and wait for them."""
        for uid, entry in list(self._entries.items()):
            if entry.namespace == namespace:
                self._drop(uid)
        await asyncio.gather(*(t for t, ns in list(self._closing.items()) if ns == namespace), return_exceptions=True)

    async def _opening(self, uid: str, entry: _Entry) -> Channel | None:
        try:
            async with self._slots:
                if self._entries.get(uid) is not entry and not entry.taking:
                    return None   # dropped while it waited for a slot
                entry.opening = True
                channel = await self._open(entry.namespace, entry.pod, entry.container)
                if self._entries.get(uid) is entry:
                    entry.channel = channel
                elif not entry.taking:
                    self._close_later(channel, entry.namespace)   # dropped while it opened
                    return None
                return channel
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the pod is handed over without one; tried again after a while
            self.log.debug("No channel to warm pod %s/%s: %s", entry.namespace, entry.pod, exc)
            self._failed[uid] = asyncio.get_running_loop().time() + FAILED_BACKOFF
            if self._entries.get(uid) is entry:
                del self._entries[uid]
            return None

    def _drop(self, uid: str) -> None:
        entry = self._entries.pop(uid)
        if entry.channel is not None:
            self._close_later(entry.channel, entry.namespace)
        elif entry.task is not None and not entry.task.done():
            entry.task.cancel()
            self._track(entry.task, entry.namespace)

    def _close_later(self, channel: Channel, namespace: str) -> None:
        self._track(asyncio.create_task(channel.close()), namespace)

    def _track(self, task: asyncio.Task, namespace: str) -> None:
        self._closing[task] = namespace
        task.add_done_callback(lambda done: self._closing.pop(done, None))
