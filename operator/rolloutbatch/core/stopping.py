"""``spec.stop``: what a stop does to the episodes it cuts off, and what the batch says of it.

A stop is one-way (docs/design.md §5.14): the operator suspends the batch's Job, the Job
controller deletes every active pod (each gets its grace period, SIGTERM first), no new pod
starts, and once no episode pod is left the batch ends in the phase ``Stopped``. Every row that
was final before stays as it was. A pod that ends while the batch stops is judged as any other;
a success stands (it finished its work), any other end of a pod the stop deleted is the stop's
(``vocabulary.EP_BATCH_STOPPED``, outcome ``stopped``: neither the agent's failure nor a loss,
``core.outcomes``), and so is every index that never ran.
"""

from __future__ import annotations

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import EpisodeResult, PodFacts, Summary

CUT_OFF_MESSAGE = "cut off by spec.stop"
NEVER_STARTED_MESSAGE = "never ran: the batch was stopped (spec.stop) first"


def cut_off(result: EpisodeResult, facts: PodFacts | None) -> EpisodeResult:
    """The verdict of a pod that ended while its batch was stopping.

    ``facts``: the pod's snapshot that was judged. A success stands. A failure of a pod the stop
    deleted (its snapshot is being deleted, or its log went with it) is the stop's, whatever the
    pod printed: killed mid-attempt, an agent did not fail. A pod that ended on its own before
    the stop reached it (the Job controller deletes only active pods) is judged as always."""
    if result.outcome == v.OUTCOME_SUCCEEDED:
        return result
    deleted = facts is not None and facts.deleting
    log_gone = result.reason == v.EP_LOG_UNAVAILABLE and result.message == v.LOG_POD_GONE
    if not deleted and not log_gone:
        return result
    was = f" (it ended with {result.reason}: {result.message})" if result.reason else ""
    # its log tail stays (a failure's budget, as a stopped row keeps)
    return result.replace(outcome=v.OUTCOME_STOPPED, reason=v.EP_BATCH_STOPPED,
                          message=f"{CUT_OFF_MESSAGE}{was}"[:1000])


def finished_before(summary: Summary) -> str:
    """How many episodes ran to a verdict, said once for the stopping and the stopped status."""
    return (f"{summary.finished} of {summary.episodes} episodes finished before the stop "
            f"({summary.succeeded} succeeded, {summary.failed} failed, {summary.lost} lost)")


def stopping_message(summary: Summary, running: int) -> str:
    return (f"Stopping (spec.stop): no new episode starts, {running} running end within their grace period; "
            f"{summary.finished} of {summary.episodes} finished so far")


def stopped_message(summary: Summary, results_configmap: str) -> str:
    return (f"Stopped (spec.stop): {finished_before(summary)}, {summary.stopped} cut off; "
            f"every finished row is kept in {results_configmap}")
