"""core.recorded_status: what a restarted operator takes back from its batch's status. Anyone
who may write the status subresource writes it too: each figure counts only within its bounds."""
import math

import pytest

from rolloutbatch.core import recorded_status
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.tracker import BatchTracker
from tests.unit.core.factories import result

CREATED = 1_000_000.0


@pytest.mark.parametrize("value, expected", [
    (1.5, 1.5), (0, 0.0), (-5, None), (math.inf, None), (math.nan, None), ("3", None), (True, None), (None, None)])
def test_a_recorded_duration_is_a_finite_number_not_below_zero(value, expected):
    assert recorded_status.seconds(value) == expected


@pytest.mark.parametrize("job, value, expected", [
    (None, 12.0, 12.0),                                                      # nothing to check it against
    (JobFacts(uid="u", created=CREATED), 12.0, None),                        # no queue: no wait
    (JobFacts(uid="u", created=CREATED, queue="q"), 12.0, 12.0),
    (JobFacts(uid="u", created=CREATED, queue="q"), 100_000.0, None),        # longer than the Job has existed
    (JobFacts(uid="u", created=CREATED, queue="q", resumed_at=CREATED + 5), 12.0, None),  # after its last admission
    (JobFacts(uid="u", created=CREATED, queue="q", resumed_at=CREATED + 5), 5.0, 5.0),
    (JobFacts(uid="u", created=CREATED, queue="q"), -1.0, None),
])
def test_a_recorded_queue_wait_counts_only_as_the_job_allows(job, value, expected):
    assert recorded_status.queue_wait(value, job, now=CREATED + 60) == expected


@pytest.mark.parametrize("value, expected", [(3, 3), (0, 0), (-1, 0), (2.0, 0), ("7", 0), (True, 0), (None, 0)])
def test_a_recorded_retried_count_is_a_non_negative_int(value, expected):
    assert recorded_status.retried_episodes(value) == expected


def test_the_restored_retried_count_is_bounded_by_the_spec_unless_the_rows_say_more():
    """The tracker keeps the persisted count as a floor: a forged one is at most each episode's
    infrastructure retries, or the retries the restored rows' attempts show, if more."""
    tracker = BatchTracker(3, 1)
    tracker.restore({}, retried=1_000_000)
    assert tracker.retried == 3
    rows = BatchTracker(2, 0)
    rows.restore({0: result(0, attempts=3), 1: result(1, attempts=2)}, retried=1_000_000)
    assert rows.retried == 3



@pytest.mark.parametrize("value, expected", [
    ("2001-09-09T01:46:40Z", (-50.0, False)),            # finished 60 s ago, a TTL of 10 s: due
    ("2100-01-01T00:00:00Z", (10.0, True)),             # later than now: counted from now
    ("soon", (10.0, False)), (None, (10.0, False))])
def test_a_recorded_completion_time_is_never_later_than_now(value, expected):
    assert recorded_status.ttl_wait(value, 10, now=1_000_000_060.0) == expected
