"""The trainer's SDK end to end: build, submit, wait with progress, read rows, delete."""
from __future__ import annotations

import time

import pytest

from rolloutbatch.sdk import Client, Task, build_batch
from tests.support.kube import kubeconfig_path

pytestmark = pytest.mark.cluster

EPISODE = """
import json, os, time
def emit(event, **fields):
    print(json.dumps({"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **fields}), flush=True)
emit("ready")
emit("reward", reward=0.5 + int(os.environ["EPISODE_INDEX"]))
"""


def test_sdk_round_trip(operator_process, namespace):
    client = Client(str(kubeconfig_path()))
    task = Task(files={"episode.py": EPISODE}, command=["python", "-B", "/task/episode.py"])
    batch = build_batch("sdk-", task, episodes=3, parallelism=3, namespace=namespace,
                        episode_timeout_seconds=120, active_deadline_seconds=300)
    handle = client.submit(batch)
    assert handle.name.startswith("sdk-") and handle.namespace == namespace

    seen: list[dict] = []
    status = handle.wait(timeout=240, on_progress=seen.append)
    assert seen, "on_progress was never called"
    assert status["phase"] == "Succeeded", status
    assert status["succeededEpisodes"] == 3 and status["rewardSum"] == pytest.approx(4.5)

    rows = handle.results()
    assert len(rows) == 3
    assert sorted(r["reward"] for r in rows) == [0.5, 1.5, 2.5]
    assert all(r["outcome"] == "succeeded" for r in rows), rows

    # The status drops sandboxNamespace once the sandbox is deleted (DeleteOnSuccess): take it
    # from a progress report.
    sandbox = next(s["sandboxNamespace"] for s in seen if s.get("sandboxNamespace"))
    handle.delete(wait=True, timeout=120)
    assert client.list(namespace) == []
    assert not client.namespace_exists(sandbox)


def test_sdk_delete_waits_for_the_sandbox_namespace(operator_process, namespace):
    """A running batch deleted mid-flight: delete(wait=True) returns only once the sandbox is gone."""
    client = Client(str(kubeconfig_path()), namespace=namespace)
    slow = EPISODE.replace('emit("ready")', 'emit("ready"); time.sleep(60)')
    handle = client.submit(build_batch("sdk-del-", Task(files={"episode.py": slow}, command=["python", "/task/episode.py"]),
                                       episodes=2))
    deadline = time.monotonic() + 60
    while not handle.refresh().get("sandboxNamespace") and time.monotonic() < deadline:
        time.sleep(0.5)
    sandbox = handle.status["sandboxNamespace"]
    assert client.namespace_exists(sandbox)
    handle.delete(wait=True, timeout=120)
    assert not client.namespace_exists(sandbox)


def test_sdk_refuses_misspelt_fields(operator_process, namespace):
    """build_batch refuses an unknown keyword offline; a hand-made typo is refused by the API."""
    from rolloutbatch.sdk import InvalidBatch

    client = Client(str(kubeconfig_path()), namespace=namespace)
    task = Task(files={"episode.py": EPISODE}, command=["python", "-B", "/task/episode.py"])
    with pytest.raises(ValueError, match="spec.episodeTimoutSeconds: unknown field"):
        build_batch("typo-", task, episodes=1, episode_timout_seconds=5)
    batch = build_batch("typo-", task, episodes=1)
    batch["spec"]["paralellism"] = 1
    batch["spec"]["isolation"] = {"namepsace": "Shared"}
    with pytest.raises(InvalidBatch) as info:
        client.submit(batch)
    assert info.value.status == 400
    assert set(info.value.unknown_fields) == {"spec.paralellism", "spec.isolation.namepsace"}
    assert 'unknown field "spec.paralellism"' in str(info.value)
    assert client.list(namespace) == []


def test_sdk_wrong_kubeconfig_is_config_error(tmp_path):
    from rolloutbatch.sdk import ConfigError

    with pytest.raises(ConfigError, match="cannot load the kubeconfig"):
        Client(str(tmp_path / "missing"))


GROUPED = """
import json, os, pathlib, time
group, sample = int(os.environ["EPISODE_GROUP"]), int(os.environ["EPISODE_SAMPLE"])
task = json.loads(pathlib.Path(os.environ["EPISODE_INPUT"]).read_text())
ok = task["group"] == group and int(os.environ["EPISODE_INDEX"]) == group * 2 + sample
def emit(event, **fields):
    print(json.dumps({"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **fields}), flush=True)
emit("ready")
emit("reward", reward=float(sample) if ok else -100.0)
"""


def test_sdk_large_inputs_go_by_reference_and_go_with_the_batch(operator_process, namespace):
    """512 inputs x 16 KiB x 8 samples (4,096 episodes, 8 MiB of inputs) in one submit: sharded
    input ConfigMaps owned by the batch; deleting the batch deletes them."""
    client = Client(str(kubeconfig_path()), namespace=namespace)
    inputs = [{"group": g, "text": "x" * (16 * 1024 - 40)} for g in range(512)]
    task = Task(files={"episode.py": GROUPED}, command=["python", "-B", "/task/episode.py"])
    started = time.monotonic()
    handle = client.submit(build_batch("big-", task, episodes=4096, parallelism=2, inputs=inputs,
                                       samples_per_input=8, activeDeadlineSeconds=600))
    elapsed = time.monotonic() - started
    ref = handle.obj["spec"]["inputsFrom"]
    assert "inputs" not in handle.obj["spec"] and ref["count"] == 512 and handle.obj["spec"]["samplesPerInput"] == 8
    configmaps = [client.api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}", "get") for name in ref["configMaps"]]
    keys = set()
    for cm in configmaps:
        assert [o["uid"] for o in cm["metadata"]["ownerReferences"]] == [handle.uid]
        keys |= set(cm["data"])
    assert keys == {f"input-{g}.json" for g in range(512)}
    assert elapsed < 60, elapsed
    handle.delete(wait=True, timeout=120)
    deadline = time.monotonic() + 60
    while True:
        live = {i["metadata"]["name"] for i in client.api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                                                              "list ConfigMaps")["items"]}
        left = sorted(live & set(ref["configMaps"]))
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not left, f"input ConfigMaps outlived their batch: {left}"


def test_sdk_refused_large_submit_leaves_no_input_configmaps(operator_process, namespace):
    client = Client(str(kubeconfig_path()), namespace=namespace)
    inputs = [{"group": g, "text": "x" * 4096} for g in range(64)]
    batch = build_batch("refused-", Task(files={"episode.py": GROUPED}, command=["python", "/task/episode.py"]),
                        episodes=128, inputs=inputs, samples_per_input=2)
    batch["spec"]["image"] = ""          # the schema refuses it (minLength 1): build_batch's copy is edited
    from rolloutbatch.sdk import InvalidBatch

    with pytest.raises(InvalidBatch):
        client.submit(batch)
    names = [i["metadata"]["name"] for i in client.api.get(f"/api/v1/namespaces/{namespace}/configmaps", "list")["items"]]
    assert not [n for n in names if n.startswith("refused-in-")]


def test_sdk_grouped_batch_episodes_read_their_own_input(operator_process, namespace):
    client = Client(str(kubeconfig_path()), namespace=namespace)
    inputs = [{"group": g} for g in range(3)]
    task = Task(files={"episode.py": GROUPED}, command=["python", "-B", "/task/episode.py"])
    handle = client.submit(build_batch("grp-", task, episodes=6, inputs=inputs, samples_per_input=2,
                                       episode_timeout_seconds=120, active_deadline_seconds=300))
    groups = list(handle.groups(timeout=240))
    assert sorted(g["group"] for g in groups) == [0, 1, 2]
    for g in groups:
        assert g["final"] and g["valid"] == 2 and g["reward_mean"] == 0.5 and g["reward_std"] == 0.5, g
        assert [(r["group"], r["sample"]) for r in g["rows"]] == [(g["group"], 0), (g["group"], 1)]
    rows = handle.results()
    assert [r["index"] for r in rows] == list(range(6)) and all(r["valid"] for r in rows)
    handle.delete(wait=True, timeout=120)
