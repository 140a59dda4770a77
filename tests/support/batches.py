"""Submit RolloutBatches and wait for them, through the real API (kubectl and JSON)."""
from __future__ import annotations

import copy
import json
import os
import pathlib
import time
import uuid

import yaml

from tests.support.operator import kubectl

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def episode_batch(name: str, program: str, episodes: int = 3, parallelism: int | None = None, **spec) -> dict:
    """A batch whose episode program is the given Python source."""
    body = {"episodes": episodes, "parallelism": parallelism or episodes, "image": "python:3.12-alpine",
            "command": ["python", "-B", "/task/episode.py"], "task": {"files": {"episode.py": program}},
            "episodeTimeoutSeconds": 120, "activeDeadlineSeconds": 300}
    body.update(spec)
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
            "metadata": {"name": name}, "spec": body}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


#: Run every batch the tests create under this RuntimeClass unless it names one (e.g. `cube` on
#: real nodes: RB_TEST_RUNTIME_CLASS=cube make test; tests/security runs under `cube` anyway).
TEST_RUNTIME_CLASS = os.environ.get("RB_TEST_RUNTIME_CLASS") or None


def apply(obj: dict, namespace: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    if TEST_RUNTIME_CLASS and obj.get("kind") == "RolloutBatch":
        obj.setdefault("spec", {}).setdefault("runtimeClassName", TEST_RUNTIME_CLASS)
    out = kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj))
    return json.loads(out.stdout)


def get(name: str, namespace: str, kind: str = "rolloutbatch") -> dict | None:
    where = ["-n", namespace] if namespace else []
    out = kubectl("get", kind, name, *where, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(out.stdout) if out.stdout.strip() else None


def condition(obj: dict, type_: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def wait_status(name: str, namespace: str, ok, timeout: float = 120, operator=None) -> dict:
    """The batch once ``ok(status)`` holds (the operator's log tail in the error otherwise)."""
    deadline = time.monotonic() + timeout
    obj = None
    while time.monotonic() < deadline:
        obj = get(name, namespace)
        if obj and ok(obj.get("status") or {}):
            return obj
        time.sleep(0.5)
    tail = operator.log_tail() if operator else ""
    raise AssertionError(f"batch {namespace}/{name} not as awaited in {timeout}s: "
                         f"{json.dumps((obj or {}).get('status'), indent=1)}\n{tail}")


def wait_finished(name: str, namespace: str, timeout: float = 300, operator=None) -> dict:
    """Wait until the batch is Succeeded or Failed (Ready=True or Stalled=True)."""
    return wait_status(name, namespace, lambda st: st.get("phase") in ("Succeeded", "Failed"), timeout, operator)


def wait_gone(kind: str, name: str, namespace: str | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    args = [kind, name, "--ignore-not-found", "-o", "name"] + (["-n", namespace] if namespace else [])
    while time.monotonic() < deadline:
        if not kubectl("get", *args, check=False).stdout.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"{kind} {name} still exists after {timeout}s")


# hack/run-tests.sh prints each failure's `E` lines cut to 3,000 characters
FAILURE_TEXT_CHARS = 2900


def failure_text(**parts: object) -> str:
    """An assertion's message for CI's log: one line of JSON (pytest cuts a message of another
    type to a few hundred characters, and prints each line of a text as an `E` line), within what
    hack/run-tests.sh prints of a line."""
    return json.dumps(parts, default=str)[:FAILURE_TEXT_CHARS]


def results(name: str, namespace: str) -> dict:
    """The results document of a batch: its head ConfigMap and, for a sharded batch, every shard
    (core.result_shards.assemble), each decoded with the operator's own defences."""
    from rolloutbatch.core.result_shards import assemble
    from rolloutbatch.core.results import decode_results
    cm = get(f"{name}-results", namespace, kind="configmap")
    assert cm, f"results ConfigMap {name}-results missing"
    head = decode_results(cm)
    assert head is not None, f"results ConfigMap {name}-results holds no document"
    if "shards" not in head:
        return head
    uid = cm["metadata"]["labels"]["rl.agentruntime.io/batch-uid"]
    out = kubectl("get", "configmaps", "-n", namespace, "-o", "json", "-l",
                  f"rl.agentruntime.io/batch-uid={uid},rl.agentruntime.io/role=results-shard")
    shards = [decode_results(item) for item in json.loads(out.stdout)["items"]]
    return assemble(head, [s for s in shards if s is not None])


class ProgressRecorder:
    """Polls a batch's status in a thread and keeps every distinct count it showed, in order.

    Used to prove counts shown to users never go backwards."""

    KEYS = ("succeededEpisodes", "failedEpisodes", "lostEpisodes", "readyEpisodes", "retriedEpisodes")

    def __init__(self, name: str, namespace: str, interval: float = 0.3) -> None:
        import threading
        self.name, self.namespace, self.interval = name, namespace, interval
        self.seen: list[tuple[int, ...]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            obj = get(self.name, self.namespace) or {}
            st = obj.get("status") or {}
            if "progress" in st:
                sample = (int(str(st["progress"]).split("/")[0]), *(int(st.get(k) or 0) for k in self.KEYS))
                if not self.seen or self.seen[-1] != sample:
                    self.seen.append(sample)
            self._stop.wait(self.interval)

    def __enter__(self) -> ProgressRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def assert_monotonic(self) -> None:
        for before, after in zip(self.seen, self.seen[1:]):
            assert all(a >= b for a, b in zip(after, before)), f"counts went backwards: {before} -> {after} in {self.seen}"
