"""Operator-wide kopf settings, applied once at startup, and the operator's stop."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from rolloutbatch import GROUP
from rolloutbatch.core.naming import FINALIZER

INSTANT_EXIT_SECONDS = 0.25   # how long a cancelled daemon may take to end before kopf polls for it


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Our own finalizer and annotation prefix instead of kopf.zalando.org: users see whose it is.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    # No copy of the spec in an annotation: annotations are capped at 256 KiB in all, and a
    # spec near the ConfigMap bound made every patch of the batch fail, the finalizer's
    # included. The spec is immutable (spec.stop, its one mutable field, is read from the
    # daemon's live body) and the operator has no on.update handler, so kopf needs no diff base of it.
    # Nor of the labels and annotations kopf keeps by default: a copy of them grows with the
    # batch's own (a session's stats are one annotation per episode), and once the copy no longer
    # fit in 256 KiB kopf's patch carrying it was refused on every event, the finalizer's too.
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration", ignored_fields=["spec", "metadata"])
    settings.posting.level = logging.INFO
    # Reconnect quickly after an apiserver restart.
    settings.watching.reconnect_backoff = 0.5
    settings.networking.error_backoffs = [0.5, 1, 2, 3, 5]
    # kopf's own "Handler ... succeeded" events would flood the batch's event list.
    settings.posting.loggers = False
    # A deleted object's daemon is cancelled, then given 10 zero-time loop cycles to end; still
    # running after them (its cancellation awaits a call or a cleanup), kopf looks again only when
    # its cancellation_timeout has passed (kopf 1.45, _core/engines/daemons.py stop_daemons), so
    # every pool's and batch's deletion waited those 10 s. A bound of real time instead:
    settings.background.instant_exit_timeout = INSTANT_EXIT_SECONDS
    # Namespaced (core.scope): no namespace listing and no CRD watch, both cluster-wide reads. kopf
    # then serves the listed namespaces as given and the resources found by its startup discovery
    # (/apis, readable by every authenticated user): its documented restricted mode (kopf docs,
    # configuration, "Scanning"). The CRD is installed before the operator, so nothing is missed.
    if not memo.ctx.settings.scope.clusterwide:
        settings.scanning.disabled = True


@kopf.on.cleanup()
async def raise_stop_flag(memo: kopf.Memo, **_: Any) -> None:   # on the loop: asyncio.Event is not thread-safe
    # kopf stops on SIGTERM through its own signal handler, and its task waiting on our stop
    # flag (service.leadership.operate passes one) then never ends: kopf waits 5 s for it as a
    # hung task before cancelling it (kopf 1.45, _core/reactor/running.py), which delayed every
    # graceful stop, and with it the lease's release, by 5 s.
    stop = getattr(memo, "stop", None)
    if stop is not None:
        stop.set()
