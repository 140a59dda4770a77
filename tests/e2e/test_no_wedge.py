"""No batch ever wedges: every bad input ends with a reason, every batch is deletable, and
status, results rows and metrics agree for every outcome.

Each test reproduces one way a batch once wedged or disagreed with itself.
"""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.support.batches import apply, condition, episode_batch, get, results, unique, wait_finished, wait_gone
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

GOOD = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); emit("reward", reward=1)
'''


def sandbox_namespaces(uid: str) -> list[str]:
    return kubectl("get", "namespaces", "-l", f"rl.agentruntime.io/batch-uid={uid}", "-o", "name").stdout.split()


def delete_within(name: str, namespace: str, seconds: float = 60) -> None:
    started = time.monotonic()
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=false")
    wait_gone("rolloutbatch", name, namespace, timeout=seconds)
    assert time.monotonic() - started < seconds


def episode_metrics(operator, namespace: str) -> dict[str, float]:
    counts = {}
    pattern = re.compile(r'^rolloutbatch_episodes_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
    for line in operator.metrics().splitlines():
        match = pattern.match(line)
        if match and f'namespace="{namespace}"' in match["labels"]:
            result = re.search(r'result="(\w+)"', match["labels"])[1]
            counts[result] = counts.get(result, 0) + float(match["value"])
    return counts


def assert_counts_agree(obj: dict, document: dict, operator, namespace: str) -> None:
    st = obj["status"]
    rows = document["pods"]
    by_outcome = {o: sum(1 for r in rows if r["outcome"] == o) for o in ("succeeded", "failed", "lost")}
    assert len(rows) == st["episodes"], (len(rows), st)
    assert (st["succeededEpisodes"], st["failedEpisodes"], st["lostEpisodes"]) == \
        (by_outcome["succeeded"], by_outcome["failed"], by_outcome["lost"]), (st, by_outcome)
    metrics = episode_metrics(operator, namespace)
    assert {k: int(metrics.get(k, 0)) for k in by_outcome} == by_outcome, (metrics, by_outcome)


def test_invalid_spec_creates_nothing_and_is_deletable(operator_process, namespace):
    """A task file key starting with '..' stalls before anything is created."""
    name = unique("badkey")
    created = apply(episode_batch(name, GOOD, episodes=1, task={"files": {"episode.py": GOOD, "..data": "x"}}),
                    namespace)
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec" and "..data" in stalled["message"]
    assert sandbox_namespaces(created["metadata"]["uid"]) == []
    delete_within(name, namespace, 30)


def test_a_spec_past_the_annotation_limit_runs_and_is_deletable(operator_process, namespace):
    """A 300 KiB task file (a repository snapshot); kopf keeps no copy of the spec."""
    name = unique("big")
    snapshot = "# " + "x" * 300 * 1024 + "\n"
    apply(episode_batch(name, GOOD, episodes=2, task={"files": {"episode.py": GOOD, "snapshot.py": snapshot}}),
          namespace)
    obj = wait_finished(name, namespace, timeout=120, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]
    annotations = obj["metadata"].get("annotations") or {}
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 16 * 1024, list(annotations)
    delete_within(name, namespace, 60)


def test_foreign_results_configmap_stalls_before_any_episode(operator_process, namespace):
    """The name `<batch>-results` is taken by a ConfigMap that is not ours."""
    name = unique("taken")
    kubectl("create", "configmap", f"{name}-results", "-n", namespace, "--from-literal=mine=yes")
    created = apply(episode_batch(name, GOOD, episodes=2), namespace)
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "ResultsConfigMapConflict", stalled
    assert f"{name}-results" in stalled["message"]
    assert sandbox_namespaces(created["metadata"]["uid"]) == []
    cm = get(f"{name}-results", namespace, kind="configmap")
    assert cm["data"] == {"mine": "yes"}
    delete_within(name, namespace, 30)
    assert get(f"{name}-results", namespace, kind="configmap") is not None  # never ours: left alone


def test_removing_the_results_label_mid_batch_does_not_wedge(operator_process, namespace):
    """Without its label, the results ConfigMap is still ours by its ownerReference."""
    program = GOOD.replace('emit("ready"); emit("reward", reward=1)',
                           'emit("ready"); time.sleep(2 + 6 * int(os.environ["EPISODE_INDEX"])); '
                           'emit("reward", reward=1)')
    name = unique("unlabel")
    apply(episode_batch(name, program, episodes=2), namespace)
    deadline = time.monotonic() + 60
    while get(f"{name}-results", namespace, kind="configmap") is None:
        assert time.monotonic() < deadline, "no partial results were written"
        time.sleep(0.3)
    kubectl("label", "configmap", f"{name}-results", "-n", namespace, "rl.agentruntime.io/batch-uid-")
    obj = wait_finished(name, namespace, timeout=90, operator=operator_process)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]
    cm = get(f"{name}-results", namespace, kind="configmap")
    assert cm["metadata"]["labels"]["rl.agentruntime.io/batch-uid"] == obj["metadata"]["uid"]


def test_batch_deadline_outcomes_and_counts_agree(operator_process, namespace):
    """The batch deadline ends a running episode and an unstarted one; both read
    BatchTimeout, and status, rows and metrics agree."""
    # Episode 0 works 8 s before its reward, so episode 2 (which waits for its slot) starts 8 s
    # or more after the Job: its own 30 s timeout falls that long after the batch's deadline,
    # room for a Job controller slowed by other tests to act on the deadline first (when it does
    # not, Timeout is the true reason). 30 s: room for a loaded node to run episode 0 before it.
    program = GOOD.replace('emit("ready"); emit("reward", reward=1)',
                           'emit("ready")\ntime.sleep(600 if os.environ["EPISODE_INDEX"] != "0" else 8)\n'
                           'emit("reward", reward=1)')
    name = unique("deadline")
    apply(episode_batch(name, program, episodes=3, parallelism=2, minSuccessfulEpisodes=1,
                        episodeTimeoutSeconds=30, activeDeadlineSeconds=30), namespace)
    obj = wait_finished(name, namespace, timeout=120, operator=operator_process)
    document = results(name, namespace)
    rows = {r["index"]: r for r in document["pods"]}
    said = {i: (r["reason"], r["message"], r["pod"]) for i, r in rows.items()}
    assert rows[0]["outcome"] == "succeeded", said
    assert {rows[i]["reason"] for i in (1, 2)} <= {"BatchTimeout", "Timeout"}, said
    assert "BatchTimeout" in {rows[i]["reason"] for i in (1, 2)}, said
    never_ran = [r for r in rows.values() if r["reason"] == "BatchTimeout" and not r["pod"]]
    assert all(r["outcome"] == "lost" for r in never_ran)
    assert_counts_agree(obj, document, operator_process, namespace)


def test_unrunnable_image_counts_agree(operator_process, namespace):
    """Episodes lost to an image the nodes cannot run are counted by the metrics too."""
    name = unique("image")
    apply(episode_batch(name, GOOD, episodes=2, image="registry.invalid/nope:1"), namespace)
    obj = wait_finished(name, namespace, timeout=120, operator=operator_process)
    assert condition(obj, "Stalled")["reason"] == "ImagePullFailed"
    document = results(name, namespace)
    assert {r["outcome"] for r in document["pods"]} == {"lost"}
    assert_counts_agree(obj, document, operator_process, namespace)


def test_ready_episodes_counts_ready_events(operator_process, namespace):
    """An episode whose container ran but never printed `ready` is not ready."""
    program = GOOD.replace('emit("ready"); emit("reward", reward=1)',
                           'if os.environ["EPISODE_INDEX"] == "0": emit("ready"); emit("reward", reward=1)')
    name = unique("ready")
    apply(episode_batch(name, program, episodes=2, minSuccessfulEpisodes=1), namespace)
    obj = wait_finished(name, namespace, timeout=90, operator=operator_process)
    assert obj["status"]["readyEpisodes"] == 1, obj["status"]
    assert_counts_agree(obj, results(name, namespace), operator_process, namespace)


# -- a child deleted, a refusal by the cluster, a bug: each ends the batch with a reason ----------
SLOW = GOOD.replace('emit("ready"); emit("reward", reward=1)',
                    'emit("ready"); time.sleep(20 if os.environ["EPISODE_INDEX"] != "0" else 0); emit("reward", reward=1)')


def test_a_job_deleted_mid_batch_stalls_and_is_never_recreated(operator_process, namespace):
    name = unique("nojob")
    created = apply(episode_batch(name, SLOW, episodes=3, parallelism=1), namespace)
    uid = created["metadata"]["uid"]
    sandbox = "rb-" + uid.replace("-", "")[:10]
    deadline = time.monotonic() + 60
    while not kubectl("get", "pods", "-n", sandbox, "-o", "name", check=False).stdout.strip():
        assert time.monotonic() < deadline, "no episode pod"
        time.sleep(0.3)
    kubectl("delete", "job", sandbox, "-n", sandbox, "--wait=false")
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "SandboxDeleted", stalled
    time.sleep(3)
    assert not kubectl("get", "jobs", "-n", sandbox, "-o", "name", check=False).stdout.strip()  # not recreated
    assert_counts_agree(obj, results(name, namespace), operator_process, namespace)


def test_a_missing_priority_class_stalls_before_anything_is_created(operator_process, namespace):
    name = unique("prio")
    created = apply(episode_batch(name, GOOD, episodes=1, podTemplate={"priorityClassName": "does-not-exist"}),
                    namespace)
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    assert condition(obj, "Stalled")["reason"] == "PriorityClassNotFound"
    assert sandbox_namespaces(created["metadata"]["uid"]) == []


def test_a_pod_template_the_api_refuses_stalls_before_anything_is_created(operator_process, namespace):
    """Validate everything before creating anything: the Job is dry-run first."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    name = unique("affinity")
    created = apply(episode_batch(name, GOOD, episodes=1, podTemplate={"affinity": affinity}), namespace)
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["reason"] == "InvalidSpec" and "nodeSelectorTerms" in stalled["message"], stalled
    assert sandbox_namespaces(created["metadata"]["uid"]) == []


def test_pods_the_cluster_refuses_stall_with_the_reason(solo_operator, namespace):
    """A LimitRange refuses every episode pod (the Job itself is fine): PodsNotCreated, with the
    Job controller's FailedCreate message, instead of waiting out activeDeadlineSeconds."""
    from tests.support.operator import OperatorProcess
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "tiny", "namespace": namespace},
              "spec": {"limits": [{"type": "Container", "max": {"cpu": "50m"}}]}}
    kubectl("create", "-f", "-", input=json.dumps(limits))
    op = OperatorProcess("operator-pod-grace", extra_args=("--pod-create-grace", "8"))
    op.start()
    try:
        name = unique("refused")
        apply(episode_batch(name, GOOD, episodes=2, isolation={"namespace": "Shared"}), namespace)
        obj = wait_finished(name, namespace, timeout=90, operator=op)
        stalled = condition(obj, "Stalled")
        assert stalled["reason"] == "PodsNotCreated" and "cpu" in stalled["message"], stalled
        assert_counts_agree(obj, results(name, namespace), op, namespace)
    finally:
        op.stop()


def test_a_bug_while_judging_ends_the_batch_visibly(solo_operator, namespace):
    """Any exception while judging an episode (a stand-in: ROLLOUTBATCH_FAIL_AT) ends the batch
    InternalError; before, the batch waited forever with no log line."""
    from tests.support.operator import OperatorProcess
    op = OperatorProcess("operator-fail-judge", env={"ROLLOUTBATCH_FAIL_AT": "track:log-read"})
    op.start()
    try:
        name = unique("bug")
        apply(episode_batch(name, GOOD, episodes=2), namespace)
        obj = wait_finished(name, namespace, timeout=60, operator=op)
        stalled = condition(obj, "Stalled")
        assert stalled["reason"] == "InternalError" and "fault injected" in stalled["message"], stalled
    finally:
        op.stop()


def test_a_foreign_configmap_on_a_shard_name_costs_only_that_name(solo_operator, namespace):
    """A ConfigMap squatting a shard name (<batch>-results-<n>) before the batch exists: the name
    is skipped (listed so in the index, said in an Event), its rows go to the next shard, the
    squatter is left as it was, and the batch runs to its end."""
    from tests.support.operator import OperatorProcess
    name = unique("shardsquat")
    kubectl("create", "configmap", f"{name}-results-1", "-n", namespace, "--from-literal=x=y")
    op = OperatorProcess("operator-shard-squat", extra_args=("--results-shard-rows", "3"))
    op.start()
    try:
        apply(episode_batch(name, GOOD, episodes=7), namespace)
        obj = wait_finished(name, namespace, timeout=180, operator=op)
        assert obj["status"]["phase"] == "Succeeded", obj["status"]
        doc = results(name, namespace)
        assert sorted(r["index"] for r in doc["pods"]) == list(range(7))
        assert f"{name}-results-1" in [s["name"] for s in doc["shards"] if s.get("skipped")]
        squatter = json.loads(kubectl("get", "configmap", f"{name}-results-1", "-n", namespace, "-o", "json").stdout)
        assert squatter["data"] == {"x": "y"}                   # never touched
        events = kubectl("get", "events", "-n", namespace, "-o", "json").stdout
        assert "ResultsShardNameTaken" in events
    finally:
        op.stop()
