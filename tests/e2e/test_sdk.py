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
