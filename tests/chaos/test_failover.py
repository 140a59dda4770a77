"""Failover: two operators share the leader-election Lease; the leader dies mid-batch and the
standby finishes the batch as if nothing happened (docs/design.md §5.15).

The leader is SIGKILLed (``ROLLOUTBATCH_CRASH_AT``: it kills itself the first time it reaches the
point) before the Job exists, while episodes run, and at a results checkpoint. The standby must
not act while the leader lives (nothing about the batch in its log, no episode in its metrics),
must lead within the lease duration + one jittered retry + a margin once the leader is dead, and
the batch must end as an undisturbed run: same counts and rows, each episode once, one sandbox
namespace and one Job. A graceful stop (SIGTERM) releases the lease: the standby leads within a
retry, well before any lease could expire. The defaults at one point, a 5 s lease at the others.
"""
from __future__ import annotations

import re

import pytest

from tests.chaos.test_operator_crashes import PROGRAM, check_outcome, wait_crashed
from tests.support.batches import apply, episode_batch, results, unique, wait_gone, wait_status
from tests.support.operator import QUICK_LEASE, OperatorProcess, kubectl

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

LEASE_DURATION, RETRY_PERIOD, JITTER = 15.0, 2.0, 0.2   # the operator's defaults (core.leadership)
QUICK_DURATION, QUICK_RETRY = 5.0, 1.0                   # QUICK_LEASE's
MARGIN = 6.0   # a loaded 2-core machine: the standby's kopf start, a slow API answer
HANDOVER_BOUND = RETRY_PERIOD * (1 + JITTER) + MARGIN


def takeover_bound(lease: float, retry: float) -> float:
    return lease + retry * (1 + JITTER) + MARGIN


# The defaults (what a user runs) at one point; QUICK_LEASE at the others: each waits 10 s less
# for the dead leader's lease, and the takeover's bound follows the lease as the defaults' does.
CASES = [pytest.param("provision:ConfigMap", (), takeover_bound(LEASE_DURATION, RETRY_PERIOD), id="provision:ConfigMap"),
         pytest.param("track:log-read", QUICK_LEASE, takeover_bound(QUICK_DURATION, QUICK_RETRY),
                      id="track:log-read-quick-lease"),
         pytest.param("results:partial", QUICK_LEASE, takeover_bound(QUICK_DURATION, QUICK_RETRY),
                      id="results:partial-quick-lease")]


def counted(operator: OperatorProcess, namespace: str) -> float:
    """Episodes this process counted as final in ``namespace`` (its metrics)."""
    pattern = re.compile(rf'^rolloutbatch_episodes_total\{{namespace="{namespace}",result="\w+"\}} (\S+)$', re.M)
    return sum(float(v) for v in pattern.findall(operator.metrics()))


def pair(slug: str, point: str | None = None, lease: tuple[str, ...] = ()) -> tuple[OperatorProcess, OperatorProcess]:
    env = {"ROLLOUTBATCH_CRASH_AT": point} if point else None
    leader = OperatorProcess(f"failover-leader-{slug}", env=env, extra_args=lease)
    leader.start()                       # leads: the session's operator released the lease when paused
    standby = OperatorProcess(f"failover-standby-{slug}", extra_args=lease)
    standby.start(leader=False)
    standby.wait_role("standby", 10)
    assert standby.readyz()["holder"] == leader.readyz()["identity"]
    return leader, standby


def check_each_episode_once(name: str, namespace: str) -> None:
    rows = results(name, namespace)["pods"]
    assert sorted(r["index"] for r in rows) == [0, 1, 2, 3], rows   # results rows = episodes, no repeat


@pytest.mark.parametrize("point,lease,bound", CASES)
def test_the_standby_takes_over_a_killed_leader_and_nothing_is_lost_or_doubled(solo_operator, namespace, point,
                                                                               lease, bound):
    slug = point.replace(":", "-")
    leader, standby = pair(slug, point, lease)
    name = unique("failover")
    try:
        apply(episode_batch(name, PROGRAM, episodes=4, parallelism=4, minSuccessfulEpisodes=3,
                            cleanup={"sandbox": "Never"}), namespace)
        wait_crashed(leader, point)
        # While the leader lived the standby did nothing: no line about the batch, nothing counted.
        assert standby.readyz()["role"] == "standby"
        assert name not in standby.log_path.read_text(errors="replace")
        assert counted(standby, namespace) == 0
        took = standby.wait_role("leader", bound)
        print(f"failover: the standby led {took:.1f}s after the leader was killed at {point}")
        assert took <= bound
        check_outcome(name, namespace, standby)          # counts, rows, one sandbox namespace, one Job
        check_each_episode_once(name, namespace)
        assert counted(standby, namespace) <= 4
        assert "rolloutbatch_leader 1.0" in standby.metrics()
        kubectl("delete", "rb", name, "-n", namespace, "--timeout=120s", timeout=130)
        wait_gone("configmap", f"{name}-results", namespace)
    finally:
        leader.kill()
        standby.stop()


def test_a_graceful_stop_hands_over_within_a_retry(solo_operator, namespace):
    leader, standby = pair("sigterm")
    name = unique("handover")
    try:
        apply(episode_batch(name, PROGRAM, episodes=4, parallelism=4, minSuccessfulEpisodes=3,
                            cleanup={"sandbox": "Never"}), namespace)
        wait_status(name, namespace, lambda st: st.get("runningEpisodes", 0) > 0, 90, leader)
        leader.stop()                    # SIGTERM: kopf stops, then the lease is released
        assert leader.proc.returncode == 0, leader.log_tail()
        assert "released lease" in leader.log_path.read_text(errors="replace")
        took = standby.wait_role("leader", HANDOVER_BOUND)
        print(f"failover: the standby led {took:.1f}s after the leader's SIGTERM")
        assert took < LEASE_DURATION     # faster than any takeover that waits for an expiry
        check_outcome(name, namespace, standby)
        check_each_episode_once(name, namespace)
        kubectl("delete", "rb", name, "-n", namespace, "--timeout=120s", timeout=130)
    finally:
        leader.kill()
        standby.stop()
