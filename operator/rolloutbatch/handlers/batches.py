"""The RolloutBatch's own handlers: a daemon for its whole life, and the deletion finalizer."""

from __future__ import annotations

from typing import Any

import kopf

from rolloutbatch import GROUP, PLURAL, VERSION
from rolloutbatch.core.leadership import DAEMON_CANCELLATION
from rolloutbatch.service import stop


# events.k8s.io/v1 refuses a note past 1024 bytes (Go's len: Kubernetes'
# pkg/apis/core/validation/events.go, NoteLengthLimit); core/v1, which kopf posts, checks none. One
# bound for both readers, in UTF-8 bytes: cut by characters, a message of non-ASCII text passed it.
EVENT_MESSAGE_LIMIT = 1024


def event_message(message: str) -> str:
    """``message`` within EVENT_MESSAGE_LIMIT bytes of UTF-8, never splitting a character."""
    # "replace": a lone surrogate (from text decoded leniently) must not make the Event raise
    return message.encode(errors="replace")[:EVENT_MESSAGE_LIMIT].decode(errors="ignore")


def _emitter(body: kopf.Body, logger: Any):
    """Each transition as a Kubernetes Event on the batch and a line in the operator's log
    (the object logger names the batch; settings.posting.loggers is off, so no second Event)."""
    def emit(type_: str, reason: str, message: str) -> None:
        message = event_message(message)
        kopf.event(body, type=type_, reason=reason, message=message)
        (logger.warning if type_ == "Warning" else logger.info)("%s: %s", reason, message)
    return emit


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=DAEMON_CANCELLATION)
async def run_batch(body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    """Provision, track and finish the batch. The reconciler owns the error policy
    (service.policy): it returns once the batch has ended, one way or another."""
    reconciler = memo.registry.reconciler(body, _emitter(body, logger), logger)
    with memo.metrics.handler("run_batch"):
        await reconciler.run()


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete_batch(body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    """Remove the sandbox (Job, then the Dedicated namespace) before releasing the object.

    Needs no valid spec. Waits in place (bounded) rather than raising TemporaryError: kopf logs
    each retry as an error, which would read as a failure while a namespace is simply
    terminating. Past the bound the object is released anyway: a deletion always completes.
    """
    with memo.metrics.handler("delete_batch"):
        reconciler = memo.registry.reconciler(body, _emitter(body, logger), logger)
        timeout = memo.ctx.settings.namespace_delete_timeout
        try:
            gone = await reconciler.delete_sandbox(timeout)
        except Exception as exc:  # noqa: BLE001 - never hold the finalizer for an API error
            logger.warning("Removing the sandbox failed (%s); releasing the RolloutBatch", exc)
            gone = True
        if not gone:
            logger.warning("The sandbox was not gone after %ss; releasing the RolloutBatch", timeout)
        memo.registry.forget(body["metadata"]["uid"])
        memo.metrics.batch_deleted(body["metadata"]["namespace"], body["metadata"]["name"], body["metadata"]["uid"])


@kopf.on.event(GROUP, VERSION, PLURAL, when=stop.needs_acknowledging)
async def acknowledge_generation(body: kopf.Body, memo: kopf.Memo, logger: Any, **kwargs: Any) -> None:
    """After the end, the batch's daemon has returned: a later spec.stop only needs its
    generation acknowledged in the status (service.stop)."""
    if kwargs.get("type") == "DELETED":
        return
    await stop.acknowledge_generation(memo.ctx.storage, body, logger)
