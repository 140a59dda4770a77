"""The service's one error policy: what is retried, for how long, and what ends a batch.

Transient API errors (the connection, 5xx, 429 Too Many Requests, 409 conflicts, 410 Gone) are
retried with capped exponential backoff. A 410 is a paged list's continue token that expired
(kube.resources lists page by page): the retried round lists again from the start, which is the
server's own advice. The watches handle their 410s themselves (kube.watch: relist). Anything else (a refused request, an object that is not ours,
a bug) ends the batch Failed with ``Stalled=True``, a CamelCase reason and a message a person
can act on. So does a transient error that lasts past ``give_up_after``: nothing retries
forever without a visible state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.errors import ConfigError, Conflict, Gone, KubeError, NotOurs, TimedOut, Unavailable, Unconfirmed

BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, (Unavailable, Conflict, Gone))


def stall_for(exc: BaseException) -> tuple[str, str]:
    """(reason, message) of the stall a non-transient error causes."""
    if isinstance(exc, NotOurs):
        return v.STALL_NAME_CONFLICT, f"{exc}: rename or remove it, then recreate the batch"
    if isinstance(exc, KubeError):
        if is_transient(exc):
            return v.STALL_API_UNAVAILABLE, f"the API server kept failing: {exc}"
        return v.STALL_API_REFUSED, _refused(exc)
    return v.STALL_INTERNAL, (f"the operator hit an unexpected {type(exc).__name__}: {exc}"[:900]
                              + " (a bug: please report it with the operator log)")


def _refused(exc: KubeError) -> str:
    """What a final KubeError says: the API server's refusal only when it answered one (an HTTP
    status); else what failed on this side (kube.errors: raised before sending, or no answer)."""
    if isinstance(exc, Unconfirmed):
        return f"a pod's container never confirmed the input it was sent (it may or may not have it): {exc}"
    if isinstance(exc, TimedOut):
        return f"a call into a pod did not finish in its time: {exc}"
    if isinstance(exc, ConfigError):
        return f"the operator's credentials are unusable (its kubeconfig or service account): {exc}"
    if exc.status is None:
        return f"a request could not be made: {exc}"
    return f"the API server refused a request (HTTP {exc.status}): {exc}"


FULL_STALL_TRIES = 3   # full status patches of a stall before the bare verdict is tried


def keep_recording_stall(attempt: int, exc: BaseException) -> bool:
    """Whether to try again to record a stall whose status patch failed at ``attempt`` (0-based).

    The full status first, then the bare verdict; that one is retried only while the API is
    down (transient). Refused even bare, the stall stays told by its Warning Event and the log:
    retrying a refusal would spin forever with nothing visible.
    """
    return attempt < FULL_STALL_TRIES or is_transient(exc)


@dataclass
class Retry:
    """Backoff state of one batch: consecutive transient failures and since when."""

    give_up_after: float
    failures: int = 0
    since: float | None = field(default=None)

    def failed(self, now: float) -> float | None:
        """Record a transient failure; the delay before the next try, or None to give up."""
        if self.since is None:
            self.since = now
        self.failures += 1
        if now - self.since > self.give_up_after:
            return None
        return BACKOFF[min(self.failures - 1, len(BACKOFF) - 1)]

    def succeeded(self) -> None:
        self.failures, self.since = 0, None
