"""Removing a batch's sandbox: the deletion plan of ``core.children`` carried out step by step.

Needs no spec (a batch refused as InvalidSpec is deletable, issue 10 item 2): every place a child
could be is tried, and ``kube.resources.delete_owned`` deletes only what carries the batch's UID
(a namesake of someone else's is left alone). A step marked ``wait`` must be gone before the
next one starts: the Job goes first with foreground propagation, so the namespace (and its
NetworkPolicy) outlive every episode pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rolloutbatch.core.children import deletion_plan
from rolloutbatch.core.model import BatchRef
from rolloutbatch.faults import crash_point
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import NotOurs

Call = Callable[..., Awaitable[Any]]   # runs a kube.resources function off the event loop


async def remove_once(call: Call, ref: BatchRef, log: logging.Logger, *, finalizer: bool = False) -> bool:
    """One pass over the plan; True when nothing of the sandbox is left. ``finalizer``: called
    for the batch's deletion (where the chaos tests crash the operator), not its cleanup policy."""
    for step in deletion_plan(ref):
        try:
            going = await call(resources.delete_owned, step.kind, step.name, step.namespace, ref.uid,
                               propagation=step.propagation)
        except NotOurs as exc:
            log.warning("Leaving alone what is not ours: %s", exc)
            continue
        if finalizer and going and step.kind == "Namespace":
            crash_point("cleanup:namespace")
        if going and step.wait and await call(resources.get_or_none, step.kind, step.name, step.namespace):
            return False
    return True


async def remove(call: Call, ref: BatchRef, log: logging.Logger, timeout: float, *, finalizer: bool = False,
                 interval: float = 1.0) -> bool:
    """Repeat :func:`remove_once` until the sandbox is gone or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while True:
        if await remove_once(call, ref, log, finalizer=finalizer):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)
