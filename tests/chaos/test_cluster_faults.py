"""Faults of the cluster around the operator: an apiserver restart, evictions, many batches.

Each test uses the shared operator (tests/conftest.py) and the real devcluster; the apiserver
is restarted with the launcher's own `restart` command.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from devcluster.cluster import KUBELET_PREFIX
from rolloutbatch.core.leadership import Timing
from tests.support.batches import apply, condition, episode_batch, get, results, unique, wait_finished
from tests.support.operator import ROOT, kubectl

# The apiserver's restart, a lost node and twenty batches at once need the cluster to themselves
# (`exclusive`); evictions of a test's own pods and its batches' stalls do not.
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SLOW_EPISODE = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
time.sleep(float(os.environ.get("SLEEP", "6")))
emit("reward", reward=1)
'''


def wait_pods_running(namespace, count, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        if len(running) >= count:
            return running
        time.sleep(0.3)
    raise AssertionError(f"{count} pods never ran in {namespace}")


def _started(pod: dict) -> str:
    """When the pod's container started (RFC 3339, which sorts as text); its creation if not known."""
    states = [(c.get("state") or {}).get("running") or {} for c in pod["status"].get("containerStatuses") or []]
    return next((s["startedAt"] for s in states if s.get("startedAt")), pod["metadata"]["creationTimestamp"])


def sandbox_of(name, namespace, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ns = ((get(name, namespace) or {}).get("status") or {}).get("sandboxNamespace")
        if ns:
            return ns
        time.sleep(0.3)
    raise AssertionError("no sandbox namespace")


def wait_logged(pod, namespace, text, timeout=60):
    """Until the pod's log holds ``text``: Running means its container started, not that the
    episode has printed anything yet."""
    name = pod["metadata"]["name"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in kubectl("logs", "-n", namespace, name, check=False).stdout:
            return
        time.sleep(0.3)
    raise AssertionError(f"{namespace}/{name} never logged {text!r}")


def evict(pod, namespace):
    """Through the Eviction API, as a node drain does."""
    name = pod["metadata"]["name"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", "-f", "-",
            input=json.dumps(eviction))


def devcluster(command, component="kube-apiserver"):
    subprocess.run([sys.executable, "-m", "devcluster.cluster", command, component], cwd=ROOT, check=True,
                   timeout=120)


LEASE_LOST = "not renewed within"   # the leader's last log line when it stops at once (service.leadership)


def as_its_deployment_would(operator, outage_began: float | None = None):
    """A leader that could not renew its lease within the renew deadline stops at once, by design
    (controller-runtime's managers exit too); its Deployment starts it again. An apiserver restart
    takes ~8 s here (5 s of watch drain, then a start), longer on a busy machine: either way. Whether
    it stops is known once the deadline has passed since its last renewal before the outage."""
    timing = Timing()
    while outage_began is not None and operator.running() and \
            time.monotonic() - outage_began < timing.renew_deadline + timing.retry_period + 1:
        time.sleep(0.2)
    if operator.running():
        return False
    assert LEASE_LOST in operator.log_tail(), operator.log_tail()
    operator.start()
    return True


def assert_every_episode_counted_once(name, namespace, operator, episodes):
    obj = wait_finished(name, namespace, timeout=180, operator=operator)
    st = obj["status"]
    assert (st["phase"], st["succeededEpisodes"], st["failedEpisodes"], st["lostEpisodes"]) == (
        "Succeeded", episodes, 0, 0), st
    assert sorted(r["index"] for r in results(name, namespace)["pods"]) == list(range(episodes))


@pytest.mark.exclusive
def test_apiserver_restart_mid_batch(operator_process, namespace):
    name = unique("apirestart")
    apply(episode_batch(name, SLOW_EPISODE, episodes=6, env=[{"name": "SLEEP", "value": "8"}]), namespace)
    wait_pods_running(sandbox_of(name, namespace), 6)
    outage_began = time.monotonic()
    devcluster("restart")
    as_its_deployment_would(operator_process, outage_began)
    assert_every_episode_counted_once(name, namespace, operator_process, 6)


@pytest.mark.exclusive
def test_an_apiserver_outage_past_the_renew_deadline_stops_the_leader_and_its_successor_finishes(
        operator_process, namespace):
    """Cut off from the API server past the renew deadline, the leader exits rather than reconcile
    beside a standby that may have taken over; the episodes end during the outage, and the
    restarted operator reads their verdicts: none lost, none counted twice."""
    name = unique("outage")
    apply(episode_batch(name, SLOW_EPISODE, episodes=4, env=[{"name": "SLEEP", "value": "4"}]), namespace)
    wait_pods_running(sandbox_of(name, namespace), 4)
    devcluster("stop")
    try:
        deadline = time.monotonic() + 30   # the renew deadline is 10 s (core.leadership.Timing)
        while operator_process.running() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        devcluster("restart")
    assert not operator_process.running(), "the leader kept running 30 s without its lease"
    assert as_its_deployment_would(operator_process)
    assert_every_episode_counted_once(name, namespace, operator_process, 4)


def test_evicted_episodes_are_retried_and_counted_once(operator_process, namespace):
    name = unique("evict")
    apply(episode_batch(name, SLOW_EPISODE, episodes=4, env=[{"name": "SLEEP", "value": "25"}],
                        cleanup={"sandbox": "Never"}), namespace)
    sandbox = sandbox_of(name, namespace)
    # The two that started last, each with most of its 25 s ahead: the program is the container's
    # PID 1, which SIGTERM does not stop, so an evicted pod is killed only after its 5 s grace; one
    # with less time left than that ends 0, Succeeded, and the Job makes no retry (seen in CI with
    # 8 s, the first-started pods, and the second eviction a second late).
    victims = sorted(wait_pods_running(sandbox, 4), key=_started, reverse=True)[:2]
    for pod in victims:
        evict(pod, sandbox)
    obj = wait_finished(name, namespace, timeout=240, operator=operator_process)
    st = obj["status"]
    assert (st["phase"], st["succeededEpisodes"], st["failedEpisodes"]) == ("Succeeded", 4, 0), st
    assert st["retriedEpisodes"] == 2
    rows = {r["index"]: r for r in results(name, namespace)["pods"]}
    evicted = {int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) for p in victims}
    assert all(rows[i]["attempts"] == 2 for i in evicted)
    assert sorted(rows) == [0, 1, 2, 3]


GRACEFUL_EPISODE = '''
import json, os, signal, sys, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # stops cleanly when evicted
emit("ready")
time.sleep(float(os.environ.get("SLEEP", "6")))
emit("reward", reward=1)
'''


def test_an_evicted_episode_that_exits_zero_is_judged_like_the_job_does(operator_process, namespace):
    """The Job counts a Succeeded pod's index succeeded and makes no replacement;
    the operator must not record a retry that never happens (it judges the pod from its log)."""
    name = unique("evict0")
    apply(episode_batch(name, GRACEFUL_EPISODE, episodes=2, minSuccessfulEpisodes=1,
                        env=[{"name": "SLEEP", "value": "30"}], cleanup={"sandbox": "Never"}), namespace)
    sandbox = sandbox_of(name, namespace)
    # the one that started last, its 30 s far from over: one that printed its reward first is a success
    victim = max(wait_pods_running(sandbox, 2), key=_started)
    wait_logged(victim, sandbox, '"event": "ready"')   # else it is judged NoReadyEvent
    evict(victim, sandbox)
    obj = wait_finished(name, namespace, timeout=120, operator=operator_process)
    st = obj["status"]
    index = int(victim["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    row = {r["index"]: r for r in results(name, namespace)["pods"]}[index]
    assert st["retriedEpisodes"] == 0, st
    # Judged from its log: it exited 0 on SIGTERM without a reward. The eviction deletes the pod
    # right after it ends, so the log read can lose that race: then the episode is lost with its
    # pod (LogUnavailable), never retried and never counted twice.
    assert (row["outcome"], row["reason"], row["attempts"]) in (("failed", "NoRewardEvent", 1),
                                                              ("lost", "LogUnavailable", 1)), row
    pods = json.loads(kubectl("get", "pods", "-n", sandbox, "-o", "json").stdout)["items"]
    same_index = [p for p in pods if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                  == str(index)]
    assert same_index == []   # the evicted pod is gone and the Job made no replacement either


def test_image_the_nodes_cannot_run_stalls(operator_process, namespace):
    name = unique("noimage")
    apply(episode_batch(name, "print(1)", episodes=2, image="registry.example/never:1"), namespace)
    obj = wait_finished(name, namespace, timeout=120, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "ImagePullFailed", stalled
    events = kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}").stdout
    assert "ImagePullFailed" in events


def test_quota_that_cannot_fit_stalls(operator_process, namespace):
    kubectl("create", "quota", "tiny", "-n", namespace, "--hard=limits.memory=64Mi,requests.memory=32Mi,pods=5")
    time.sleep(1.5)  # the quota controller fills in status.hard
    name = unique("quota")
    apply(episode_batch(name, "print(1)", episodes=2, isolation={"namespace": "Shared"}), namespace)
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["reason"] == "QuotaExceeded" and "tiny" in stalled["message"], stalled
    assert not kubectl("get", "jobs", "-n", namespace, "-o", "name").stdout.strip()  # nothing created


PROGRAM_BY_INDEX = '''
import json, os, sys, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
i = int(os.environ["EPISODE_INDEX"]); salt = int(os.environ["SALT"])
emit("ready")
emit("reward", reward=(i * salt) % 7)
if (i + salt) % 5 == 0:
    sys.exit(1)
'''


@pytest.mark.exclusive
def test_twenty_concurrent_batches_are_independent(operator_process):
    # Five episodes each (one fails on purpose in every batch): independence, not volume, is the
    # point; 200 pod starts took ~110 s of this 2-core machine's make test.
    episodes = 5
    namespaces = [unique("many") for _ in range(4)]
    for ns in namespaces:
        kubectl("create", "namespace", ns)
    batches = []
    try:
        for salt in range(20):
            ns = namespaces[salt % 4]
            name = unique(f"b{salt}")
            isolation = "Shared" if salt % 2 else "Dedicated"
            apply(episode_batch(name, PROGRAM_BY_INDEX, episodes=episodes, parallelism=5, minSuccessfulEpisodes=0,
                                isolation={"namespace": isolation}, env=[{"name": "SALT", "value": str(salt)}]), ns)
            batches.append((salt, ns, name))
        for salt, ns, name in batches:
            obj = wait_finished(name, ns, timeout=600, operator=operator_process)
            failing = {i for i in range(episodes) if (i + salt) % 5 == 0}
            rows = {r["index"]: r for r in results(name, ns)["pods"]}
            assert sorted(rows) == list(range(episodes))
            for i, row in rows.items():
                if i in failing:
                    assert (row["outcome"], row["reason"]) == ("failed", "NonZeroExit")
                else:
                    assert row["outcome"] == "succeeded" and row["reward"] == (i * salt) % 7
            st = obj["status"]
            assert st["succeededEpisodes"] == episodes - len(failing) and st["failedEpisodes"] == len(failing)
            assert st["rewardSum"] == sum((i * salt) % 7 for i in range(episodes) if i not in failing)
    finally:
        for ns in namespaces:
            kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.exclusive
def test_lost_node_episodes_are_retried_elsewhere(operator_process, namespace):
    """A node (kubelet and containerd) dies mid-batch and its Node is removed (what a cloud provider does with a
    vanished VM): the pod garbage collector fails its pods with DisruptionTarget, the Job retries
    them on the surviving node, and the operator counts each index once."""
    name = unique("nodeloss")
    apply(episode_batch(name, SLOW_EPISODE, episodes=6, env=[{"name": "SLEEP", "value": "12"}],
                        cleanup={"sandbox": "Never"}), namespace)
    running = wait_pods_running(sandbox_of(name, namespace), 6)
    on_node = [p for p in running if p["spec"]["nodeName"] == "devnode-1"]
    cluster = [sys.executable, "-m", "devcluster.cluster"]
    # SIGKILL, not a clean stop: a lost node reports nothing more about its pods.
    component = KUBELET_PREFIX + "devnode-1"   # kubelet + containerd
    pid = int((ROOT / ".devcluster" / "pids" / f"{component}.pid").read_text().split()[0])
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    try:
        kubectl("delete", "node", "devnode-1", "--wait=false")
        obj = wait_finished(name, namespace, timeout=300, operator=operator_process)
    finally:
        subprocess.run([*cluster, "restart", component], cwd=ROOT, check=True, timeout=120)
    st = obj["status"]
    assert (st["phase"], st["succeededEpisodes"], st["failedEpisodes"]) == ("Succeeded", 6, 0), st
    assert st["retriedEpisodes"] == len(on_node)
    rows = results(name, namespace)["pods"]
    assert sorted(r["index"] for r in rows) == list(range(6))
    assert all(r["node"] == "devnode-2" for r in rows if r["attempts"] > 1)
