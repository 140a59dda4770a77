"""Streaming on the devcluster: rows and groups streamed while the batch runs, across forced watch
drops and an operator restart, by the blocking and the asyncio SDK."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rolloutbatch.sdk import AsyncClient, Client, Task, build_batch
from tests.support.kube import kubeconfig_path

pytestmark = pytest.mark.cluster

# Group g's episodes sleep 3 * g seconds before their reward, so groups of 2 land one after
# another; group 3's sleep 30 s, so that a batch of 4 groups is still running when its first group
# lands, however far apart a loaded node starts their pods.
STAGGERED = """
import json, os, time
i = int(os.environ["EPISODE_INDEX"])
def emit(event, **fields):
    print(json.dumps({"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **fields}), flush=True)
emit("ready")
group = int(os.environ["EPISODE_GROUP"])
time.sleep(30 if group == 3 else 3 * group)
emit("reward", reward=float(os.environ["EPISODE_SAMPLE"]))
"""
TASK = Task(files={"episode.py": STAGGERED}, command=["python", "-B", "/task/episode.py"])


def _batch(namespace, episodes=8):
    return build_batch("stream-", TASK, episodes=episodes, samples_per_input=2, parallelism=episodes,
                       inputs=[{"g": g} for g in range(episodes // 2)], namespace=namespace,
                       episode_timeout_seconds=120, active_deadline_seconds=300)


def test_rows_and_groups_arrive_while_the_batch_runs_across_watch_drops(operator_process, namespace):
    client = Client(str(kubeconfig_path()), namespace=namespace)
    handle = client.submit(_batch(namespace))
    groups, phases = [], []
    # watch_seconds=1: the API server ends every watch after a second, so the follower resumes
    # from its resourceVersion dozens of times during the batch.
    for group in handle.groups(timeout=240, watch_seconds=1):
        groups.append(group)
        phases.append(client.get(handle.name)["status"].get("phase"))
    # groups come as they complete: the 3 s stagger per group orders them only on an idle node
    assert sorted(g["group"] for g in groups) == [0, 1, 2, 3], [g["group"] for g in groups]
    assert all(g["final"] and g["valid"] == 2 and g["reward_mean"] == 0.5 for g in groups)
    assert phases[0] not in ("Succeeded", "Failed"), "the first group came only at the end"
    rows = [r for g in groups for r in g["rows"]]
    assert sorted(r["index"] for r in rows) == list(range(8))
    handle.delete(wait=True, timeout=120)


@pytest.mark.exclusive   # stops and restarts the shared operator
def test_stream_has_no_duplicate_or_gap_across_an_operator_restart(operator_process, namespace):
    client = Client(str(kubeconfig_path()), namespace=namespace)
    handle = client.submit(_batch(namespace, episodes=10))
    got, restarted = [], threading.Event()

    for row in handle.stream(timeout=300):
        got.append(row["index"])
        if len(got) == 2 and not restarted.is_set():
            operator_process.stop()       # the rest are judged by a new process
            operator_process.start()
            restarted.set()
    assert restarted.is_set()
    assert sorted(got) == list(range(10)) and len(got) == len(set(got)), got
    handle.delete(wait=True, timeout=120)


def test_async_handle_end_to_end(operator_process, namespace):
    async def main():
        async with AsyncClient(str(kubeconfig_path()), namespace=namespace) as client:
            handle = await client.submit(_batch(namespace, episodes=6))
            first_at, groups = None, []
            async for group in handle.groups(timeout=240):
                first_at = first_at or time.monotonic()
                groups.append(group)
            status = await handle.wait(timeout=60)
            rows = await handle.results()
            names = [b["metadata"]["name"] for b in await client.list()]
            again = await client.get(handle.name)
            await handle.delete(wait=True, timeout=120)
            return groups, status, rows, names, again, await client.list()

    groups, status, rows, names, again, after = asyncio.run(main())
    assert sorted(g["group"] for g in groups) == [0, 1, 2], [g["group"] for g in groups]
    assert status["phase"] == "Succeeded" and [r["index"] for r in rows] == list(range(6))
    assert again["metadata"]["name"] in names and after == []


def test_stream_and_groups_of_a_finished_batch_end_at_once(operator_process, namespace):
    """On a final batch, the blocking stream() and groups() return as soon as they have every row:
    closing their quiet watches must not wait for the server's watch timeout (it took ~60 s)."""
    client = Client(str(kubeconfig_path()), namespace=namespace)
    handle = client.submit(_batch(namespace, episodes=4))
    handle.wait(timeout=240)
    for _ in range(3):
        for call in (lambda: list(handle.stream(timeout=120)), lambda: list(handle.groups(timeout=120))):
            started = time.monotonic()
            assert len(call()) in (2, 4)
            assert time.monotonic() - started < 15, "the follower waited for its watches to time out"
    handle.delete(wait=True, timeout=120)
