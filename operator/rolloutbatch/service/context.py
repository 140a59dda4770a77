"""What every batch's reconciler shares: operator-wide settings, the API client, metrics, and
the identity of a batch (its ref and the ownerReference its children carry)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from rolloutbatch import GROUP, KIND, VERSION
from rolloutbatch.core import manifests
from rolloutbatch.core.cadence import RESULTS_STEPS, STATUS_STEPS, Cadence
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.scope import Scope
from rolloutbatch.core.vocabulary import LOG_LIMIT_BYTES, LOG_TAIL_BYTES
from rolloutbatch.kube.client import Api
from rolloutbatch.kube.pool_pods import PoolPods
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import warm_channels
from rolloutbatch.service.warm_channels import WarmChannels

#: (type Normal|Warning, reason, message) -> posts an Event on the object a service works for
Emit = Callable[[str, str, str], None]


@dataclasses.dataclass
class Settings:
    """Operator-wide knobs (``rolloutbatch operator --help`` sets them)."""

    log_limit_bytes: int = LOG_LIMIT_BYTES   # per episode; beyond this the log is truncated
    log_tail_bytes: int = LOG_TAIL_BYTES     # of each log read, for its row (core.log_tails cuts by outcome)
    read_concurrency: int = 16               # log reads in flight across all batches
    status_interval: float = 1.0             # at most one status patch per batch per interval
    status_max_interval: float = 5.0         # progress waits no longer than this (core.cadence)
    results_interval: float = 1.0            # at most one results checkpoint per interval (bounded cost:
                                             # the open shard and the head, core.result_shards)
    results_max_interval: float = 10.0       # a checkpoint waits no longer than this (core.cadence)
    results_shard_rows: int = 1000           # rows per results shard
    job_poll_interval: float = 30.0          # safety net beside the Job watch
    collect_grace: float = 15.0              # after the Job ended, wait this long for stragglers
    image_pull_grace: float = 20.0           # an image the nodes cannot run stalls the batch after this
    pod_create_grace: float = 60.0           # no pod at all this long after the Job: PodsNotCreated
    unschedulable_grace: float = 300.0       # pods the scheduler cannot place, nothing running: Unschedulable
    stall_read_grace: float = 20.0           # a stalling batch judges its ended pods this long first
    stop_grace: float = 60.0                 # spec.stop: the suspended Job's pods (5 s grace each) may take this long
    namespace_delete_timeout: float = 120.0  # finalizer waits this long for the sandbox to vanish
    dns_cidrs: tuple[str, ...] = ()          # where cluster DNS answers, beside kube-system's kube-dns pods
    service_cidrs: tuple[str, ...] = ()      # the Service CIDR where the ServiceCIDR API cannot be read
    transient_give_up: float = 600.0         # API failing this long without a break stalls the batch
    watch_namespaces: tuple[str, ...] = ()   # --watch-namespace: the namespaced install (core.scope); () = cluster

    @property
    def scope(self) -> Scope:
        return Scope(self.watch_namespaces)

    @property
    def status_cadence(self) -> Cadence:
        return Cadence(self.status_interval, self.status_max_interval, STATUS_STEPS)

    @property
    def results_cadence(self) -> Cadence:
        return Cadence(self.results_interval, self.results_max_interval, RESULTS_STEPS)


@dataclasses.dataclass
class Context:
    """What every reconciler shares: the API client, metrics, settings, the read limiter."""

    api: Api
    metrics: Any  # rolloutbatch.metrics.Metrics (kept untyped: service does not import prometheus)
    settings: Settings
    read_slots: asyncio.Semaphore
    log_reader: Any = None  # kube.async_logs.AsyncLogReader when the credentials allow it
    writer: Any = None      # kube.async_writes.AsyncWriter (the pools' writes) when they allow it
    storage: Storage = dataclasses.field(init=False)   # every API call the services make, by name
    channels: WarmChannels = dataclasses.field(init=False)   # attaches to warm pods, ahead of their claims
    pool_pods: PoolPods = dataclasses.field(init=False)      # the pool namespaces' pods, fed by the pod watch

    def __post_init__(self) -> None:
        self.storage = Storage(self.api)
        self.channels = WarmChannels(warm_channels.opener(PoolStorage(self.api)),
                                     logging.getLogger("rolloutbatch.pools"))
        self.pool_pods = PoolPods()


def iso_time(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def batch_ref(body: Mapping) -> BatchRef:
    meta = body["metadata"]
    return BatchRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                    generation=int(meta.get("generation") or 1))


def owner_of_batch(ref: BatchRef) -> dict:
    return manifests.owner_reference(f"{GROUP}/{VERSION}", KIND, ref.name, ref.uid)
