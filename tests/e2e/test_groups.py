"""GRPO groups and inputs at any size on the devcluster (the operator's side)."""
from __future__ import annotations

import json

import pytest

from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS
from tests.support.batches import apply, condition, episode_batch, results, unique, wait_finished
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

OPTED_IN = {LABEL_INPUTS: INPUTS_OPT_IN}   # the operator reads no other ConfigMap as inputs

# Each episode proves it reads its own group's input, and rewards group*10 + sample.
PROGRAM = r'''
import json, os, sys, time
me, i = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
g, s = int(os.environ["EPISODE_GROUP"]), int(os.environ["EPISODE_SAMPLE"])
task = json.load(open(os.environ["EPISODE_INPUT"]))
k = int(os.environ["K"])
ok = (g, s) == divmod(i, k) and task["group"] == g and len(task.get("pad", "")) == int(os.environ["PAD"])
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=me, **f)), flush=True)
emit("ready")
emit("reward", reward=g * 10 + s if ok else -1)
if task.get("fail_sample") == s:
    sys.exit(3)
'''


def test_groups_of_k_read_their_own_input_and_get_group_statistics(operator_process, namespace):
    k, groups = 3, 2
    inputs = [{"group": g} for g in range(groups)]
    inputs[1]["fail_sample"] = 2            # a failed episode: its printed reward must not count
    name = unique("groups")
    apply(episode_batch(name, PROGRAM, episodes=k * groups, samplesPerInput=k, inputs=inputs, minSuccessfulEpisodes=1,
                        env=[{"name": "K", "value": str(k)}, {"name": "PAD", "value": "0"}]), namespace)
    obj = wait_finished(name, namespace, timeout=120, operator=operator_process)
    doc = results(name, namespace)
    rows = {r["index"]: r for r in doc["pods"]}
    for i, row in rows.items():
        g, s = divmod(i, k)
        assert (row["group"], row["sample"]) == (g, s)
        if i == 5:
            # the agent's failure: graded 0 (valid), what it printed kept aside, never counted
            assert (row["outcome"], row["valid"], row["reward"], row["claimed_reward"]) == ("failed", True, 0.0, 12.0)
        else:
            assert (row["outcome"], row["valid"], row["reward"]) == ("succeeded", True, g * 10 + s), row
    entries = {e["group"]: e for e in doc["groups"]}
    assert entries[0] == {"group": 0, "episodes": 3, "succeeded": 3, "valid": 3, "reward_mean": 1.0,
                          "reward_std": pytest.approx((2 / 3) ** 0.5), "final": True}
    assert (entries[1]["valid"], entries[1]["reward_mean"]) == (3, 7.0)     # 10, 11 and the failure's 0
    assert entries[1]["reward_std"] == pytest.approx((74 / 3) ** 0.5)
    assert obj["status"]["rewardSum"] == 3 + 21      # graded rewards: the failure counts 0
    assert doc["samples_per_input"] == k


def test_inputs_by_reference_past_the_object_limit(operator_process, namespace):
    """Four 100 KiB inputs in two ConfigMaps (400 KiB: the RolloutBatch object alone could not
    carry them through kopf's and kubectl's 256 KiB annotation limits), two samples each."""
    pad = 100 * 1024
    for shard, groups in ((0, (0, 2)), (1, (1, 3))):
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": f"tasks-{shard}", "namespace": namespace, "labels": OPTED_IN},
              "data": {f"input-{g}.json": json.dumps({"group": g, "pad": "x" * pad}) for g in groups}}
        kubectl("create", "-f", "-", input=json.dumps(cm))
    name = unique("byref")
    apply(episode_batch(name, PROGRAM, episodes=8, samplesPerInput=2, parallelism=8,
                        inputsFrom={"configMaps": ["tasks-0", "tasks-1"], "count": 4},
                        env=[{"name": "K", "value": "2"}, {"name": "PAD", "value": str(pad)}]), namespace)
    obj = wait_finished(name, namespace, timeout=180, operator=operator_process)
    rows = results(name, namespace)["pods"]
    assert obj["status"]["phase"] == "Succeeded", obj["status"]
    assert sorted(r["reward"] for r in rows) == sorted(g * 10 + s for g in range(4) for s in range(2))


def test_inputs_by_reference_that_do_not_add_up_stall_before_anything_runs(operator_process, namespace):
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "tasks", "namespace": namespace, "labels": OPTED_IN},
          "data": {"input-0.json": "{}", "input-2.json": "{}"}}
    kubectl("create", "-f", "-", input=json.dumps(cm))
    name = unique("badref")
    created = apply(episode_batch(name, PROGRAM, episodes=2, inputsFrom={"configMaps": ["tasks"], "count": 2}),
                    namespace)
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["reason"] == "InvalidInputs" and "input-2.json" in stalled["message"], stalled
    uid = created["metadata"]["uid"]
    assert not kubectl("get", "namespaces", "-l", f"rl.agentruntime.io/batch-uid={uid}", "-o", "name").stdout.strip()
    missing = unique("noref")
    apply(episode_batch(missing, PROGRAM, episodes=1, inputsFrom={"configMaps": ["nope"], "count": 1}), namespace)
    assert condition(wait_finished(missing, namespace, timeout=60), "Stalled")["reason"] == "InputsNotFound"
