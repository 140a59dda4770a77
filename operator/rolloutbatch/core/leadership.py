"""Leader election over a coordination.k8s.io/v1 Lease: the pure rules (docs/design.md §5.15).

Every operator process (the two replicas of the Deployment, an installed one and ``make
operator``) competes for one Lease; the one named in it as holder reconciles, the others wait.
The rules are those of client-go's leader election (k8s.io/client-go/tools/leaderelection), which
controller-runtime uses:

- **Expiry on the observer's own clock.** A candidate notes when *it* first saw the record it
  reads now (``observed_at``, monotonic) and takes the lease for held until ``observed_at +
  leaseDurationSeconds`` (the holder's, from the record). The record's ``renewTime`` is never
  compared with a local clock: the machines' clocks need not agree, only tick at the same rate.
- **Optimistic concurrency.** Every write is an update conditioned on the resourceVersion read:
  of two candidates taking an expired lease, one wins and the other gets 409.
- **The holder stops believing first.** The holder leads until the *start* of its last
  successful write + renewDeadline (< leaseDuration). The write lands after it started; another
  candidate sees it even later and waits leaseDuration from then: the holder's belief ends
  ``leaseDuration - renewDeadline`` before anyone else's can begin (the margin left for a request
  still in flight and for clock rates).
- **Release on a graceful stop**: holder "" and leaseDurationSeconds 1, so the next candidate
  takes over at its next try instead of after leaseDuration.

Nothing here reads a clock: times are arguments, so the rules are tested by simulation
(tests/unit/core/test_leadership.py).
"""

from __future__ import annotations

import datetime
import enum
import math
from dataclasses import dataclass

LEASE_NAME = "rolloutbatch-operator"
DEFAULT_NAMESPACE = "rolloutbatch-system"
# What manifests/manager/namespace.yaml sets, for the namespace a local operator creates.
NAMESPACE_LABELS = {"app.kubernetes.io/name": "rolloutbatch", "pod-security.kubernetes.io/enforce": "restricted"}
# A standby's retries are spread over [1, 1 + JITTER] x retryPeriod (client-go's JitterFactor is
# 1.2, over a wider range; a narrower one keeps a takeover close to the lease's end).
JITTER = 0.2
# Bounds of the timings: leaseDurationSeconds is an int32 the API server checks, and a waiter's
# timeout overflows far below that; a retry every few milliseconds is a flood, and the requests
# (their timeout is half the renew deadline) would time out before the API server answers.
MAX_LEASE_DURATION = 3600.0
MIN_RETRY_PERIOD = 0.2
_MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"   # metav1.MicroTime

# A leader's graceful stop (service.leadership.operate), step by step, each bounded (seconds).
# Their sum, stop_seconds, must stay below the Deployment's terminationGracePeriodSeconds
# (manifests/manager, the chart): else the kubelet's SIGKILL comes before the release and the
# standby waits out the lease (tests/unit/test_graceful_stop_budget.py).
DAEMON_CANCELLATION = 10.0   # the handlers' kopf.daemon cancellation_timeout
KOPF_HUNG_TASKS = 5.0        # kopf's wait for the tasks left once its own stopped (kopf 1.45, _core/reactor/running.py)
API_DRAIN = 20.0             # for the API calls kopf's handlers left in worker threads


@dataclass(frozen=True)
class Timing:
    """client-go's and controller-runtime's defaults: 15 s lease, 10 s to renew, a try every 2 s."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        # client-go's NewLeaderElector refuses the same orders.
        if not all(math.isfinite(v) and v > 0 for v in (self.lease_duration, self.renew_deadline,
                                                          self.retry_period)):
            raise ValueError("lease duration, renew deadline and retry period must be positive seconds")
        if self.lease_duration > MAX_LEASE_DURATION:
            raise ValueError(f"the lease duration must be at most {MAX_LEASE_DURATION:g} seconds")
        if self.retry_period < MIN_RETRY_PERIOD:
            raise ValueError(f"the retry period must be at least {MIN_RETRY_PERIOD:g} seconds")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("the lease duration must be longer than the renew deadline")
        if self.renew_deadline <= (1 + JITTER) * self.retry_period:
            raise ValueError(f"the renew deadline must be longer than {1 + JITTER:g} x the retry period")

    @property
    def lease_seconds(self) -> int:
        """leaseDurationSeconds is an integer: rounded up, never shorter than what we wait."""
        return math.ceil(self.lease_duration)

    @property
    def request_timeout(self) -> float:
        """A Lease request's timeout: a round's two (read, write) fit in the renew deadline."""
        return self.renew_deadline / 2


def stop_seconds(timing: Timing) -> float:
    """The longest graceful stop of a leader: kopf's (its daemons cancelled, then the tasks left),
    the drain of API calls, the election loop's last round (joined within one renew deadline) and
    the release (one request)."""
    return DAEMON_CANCELLATION + KOPF_HUNG_TASKS + API_DRAIN + timing.renew_deadline + timing.request_timeout


@dataclass(frozen=True)
class Record:
    """A Lease's spec, as leader election reads and writes it."""

    holder: str = ""
    lease_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: object) -> Record:
        """Tolerant of a hand-edited spec: a missing or mistyped field reads as unset."""
        spec = spec if isinstance(spec, dict) else {}

        def number(key: str) -> int:
            value = spec.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

        def text(key: str) -> str | None:
            value = spec.get(key)
            return value if isinstance(value, str) else None
        return cls(holder=text("holderIdentity") or "", lease_seconds=number("leaseDurationSeconds"),
                   acquire_time=text("acquireTime"), renew_time=text("renewTime"),
                   transitions=number("leaseTransitions"))

    def to_spec(self) -> dict:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": self.acquire_time, "renewTime": self.renew_time,
                "leaseTransitions": self.transitions}


@dataclass(frozen=True)
class Observation:
    """A record as one candidate saw it: its resourceVersion, and when (this candidate's
    monotonic clock) this record was first seen."""

    record: Record
    version: str
    observed_at: float


def observe(previous: Observation | None, record: Record, version: str, now: float) -> Observation:
    """An unchanged Lease keeps the time it was first seen. client-go compares the records only; the
    resourceVersion too means that every write restarts the wait, also a renewal whose renewTime
    came out the same (a wall clock that stood still or stepped back): never a takeover too early."""
    if previous is not None and previous.record == record and previous.version == version:
        return Observation(record, version, previous.observed_at)
    return Observation(record, version, now)


class Action(enum.Enum):
    ACQUIRE = "acquire"   # free, released or expired: write ourselves in as holder
    RENEW = "renew"       # ours: write a new renewTime
    WAIT = "wait"         # someone else's, still valid


@dataclass(frozen=True)
class Decision:
    action: Action
    expires_at: float | None = None   # WAIT: when (our monotonic clock) the holder's lease runs out


def expires_at(observation: Observation, timing: Timing) -> float:
    """When, on the observer's clock, the observed holder's lease runs out. A record without a
    duration (hand-written) is given ours."""
    seconds = observation.record.lease_seconds or timing.lease_seconds
    return observation.observed_at + seconds


def decide(observation: Observation | None, me: str, now: float, timing: Timing) -> Decision:
    """What a candidate does with the lease as it last observed it (None: there is no Lease)."""
    if observation is None or not observation.record.holder:
        return Decision(Action.ACQUIRE)
    if observation.record.holder == me:
        return Decision(Action.RENEW)
    until = expires_at(observation, timing)
    if now < until:
        return Decision(Action.WAIT, until)
    return Decision(Action.ACQUIRE)


def next_record(current: Record | None, me: str, wall: datetime.datetime, timing: Timing) -> Record:
    """The record to write for an ACQUIRE or a RENEW; a change of holder counts a transition."""
    stamp = micro_time(wall)
    if current is not None and current.holder == me:
        return Record(me, timing.lease_seconds, current.acquire_time or stamp, stamp, current.transitions)
    transitions = current.transitions + 1 if current is not None else 0
    return Record(me, timing.lease_seconds, stamp, stamp, transitions)


def released(current: Record, wall: datetime.datetime) -> Record:
    """What a holder that stopped reconciling writes: nobody holds it, and a 1 s duration for
    candidates that still go by the duration (client-go's ReleaseOnCancel writes the same)."""
    stamp = micro_time(wall)
    return Record("", 1, stamp, stamp, current.transitions)


def leading_until(attempt_started: float, timing: Timing) -> float:
    """Until when a holder may reconcile after a successful write whose attempt began at
    ``attempt_started`` (its monotonic clock)."""
    return attempt_started + timing.renew_deadline


def live_holder(record: Record, wall: datetime.datetime) -> str | None:
    """Who holds the lease judged by its own renewTime against the wall clock ``wall``: a one-look
    answer for a command (``make demo``), never the election's, which does not compare clocks."""
    if not record.holder:
        return None
    until = _renewed_until(record)
    return record.holder if until is not None and until > wall else None


def valid_until(record: Record) -> str:
    """renewTime + leaseDurationSeconds, for a log line (the holder's clock)."""
    until = _renewed_until(record)
    return "an unknown time" if until is None else until.strftime("%Y-%m-%dT%H:%M:%SZ")


def _renewed_until(record: Record) -> datetime.datetime | None:
    """renewTime + leaseDurationSeconds, or None when unknown: a record any client may write can
    hold a renewTime near year 9999, where the sum overflows (a deposed leader that raised here
    while formatting its log line never stepped down)."""
    renewed = parse_micro_time(record.renew_time)
    if renewed is None:
        return None
    try:
        return renewed + datetime.timedelta(seconds=record.lease_seconds)
    except OverflowError:
        return datetime.datetime.max.replace(tzinfo=renewed.tzinfo)


def identity(pod_name: str, suffix: str) -> str:
    """``<pod>_<random>`` as client-go's examples build it: a restarted process is a new
    candidate, so it never takes the lease for one it still holds."""
    return f"{pod_name}_{suffix}"


def holder_pod(holder: str) -> str:
    """The pod (or host) part of an identity: pod names cannot hold ``_``."""
    return holder.rsplit("_", 1)[0]


def micro_time(wall: datetime.datetime) -> str:
    return wall.astimezone(datetime.timezone.utc).strftime(_MICRO)


def parse_micro_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    for fmt in (_MICRO, "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.datetime.strptime(text, fmt).replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            continue
    return None
