"""Storage.exec_in_pod and Storage.evict_pod over the API in memory (tests/support/memory_api.py),
whose answers are the ones the devcluster gave (tests/devcluster/test_pod_exec.py)."""
from __future__ import annotations

import asyncio

import pytest

from rolloutbatch.kube.errors import (BadRequest, Conflict, Forbidden, NotFound, OwnerGone, TimedOut,
                                      TooManyRequests, Unavailable)
from rolloutbatch.kube.pod_exec import ExecResult
from rolloutbatch.kube.storage import Storage
from tests.support.memory_api import MemoryApi

NS = "rp-0123456789"
SCHEDULED = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}


def pod(name: str, *containers: str, status: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": c, "image": "x"} for c in containers or ("main",)], **spec},
            "status": SCHEDULED if status is None else status}


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api


def run(coro):
    return asyncio.run(coro)


def test_exec_runs_the_pods_handler_with_command_and_stdin(api):
    api.put(pod("warm-1"))
    api.set_exec(NS, "warm-1", lambda command, stdin: ExecResult(0, stdin[::-1], b"", {"status": "Success"}))
    result = run(Storage(api).exec_in_pod(NS, "warm-1", "main", ["rev"], stdin=b"abc", timeout=5))
    assert (result.exit_code, result.stdout) == (0, b"cba")
    assert api.execs == [(NS, "warm-1", "main", ["rev"], b"abc")]
    assert ("POST", f"/api/v1/namespaces/{NS}/pods/warm-1/exec") in api.calls   # RBAC: pods/exec create


def test_exec_output_is_cut_at_the_limit_and_a_slow_handler_times_out(api):
    api.put(pod("warm-1"))

    async def slow(command, stdin):
        if command == ["sleep"]:
            await asyncio.sleep(30)
        return ExecResult(0, b"x" * 100, b"", {"status": "Success"})
    api.set_exec(NS, None, slow)   # any pod of the namespace
    storage = Storage(api)
    result = run(storage.exec_in_pod(NS, "warm-1", None, ["yes"], timeout=5, limit_bytes=10))
    assert (result.stdout, result.stdout_truncated, result.stderr_truncated) == (b"x" * 10, True, False)
    with pytest.raises(TimedOut):
        run(storage.exec_in_pod(NS, "warm-1", None, ["sleep"], timeout=0.05))


def test_exec_is_refused_as_the_api_server_refuses_it(api):
    api.put(pod("two", "a", "b"))
    api.put(pod("ended", status={**SCHEDULED, "phase": "Succeeded"}))
    api.put(pod("unscheduled", status={"phase": "Pending"}))
    api.set_exec(NS, None, lambda command, stdin: ExecResult(0, b"", b"", {"status": "Success"}))
    storage = Storage(api)
    with pytest.raises(NotFound, match='pods "missing" not found'):
        run(storage.exec_in_pod(NS, "missing", None, ["true"], timeout=5))
    with pytest.raises(BadRequest, match=r"choose one of: \[a b\]"):
        run(storage.exec_in_pod(NS, "two", None, ["true"], timeout=5))
    with pytest.raises(BadRequest, match="container c is not valid for pod two"):
        run(storage.exec_in_pod(NS, "two", "c", ["true"], timeout=5))
    assert run(storage.exec_in_pod(NS, "two", "b", ["true"], timeout=5)).exit_code == 0
    with pytest.raises(Unavailable, match="container not found"):   # what the devcluster answers: a 500
        run(storage.exec_in_pod(NS, "ended", None, ["true"], timeout=5))
    with pytest.raises(BadRequest, match="does not have a host assigned"):
        run(storage.exec_in_pod(NS, "unscheduled", None, ["true"], timeout=5))
    api.fail("POST", "Pod", Forbidden("cannot create resource pods/exec", status=403),
             when=lambda path: path.endswith("/exec"))
    with pytest.raises(Forbidden):
        run(storage.exec_in_pod(NS, "two", "a", ["true"], timeout=5))
    storage.close()
    with pytest.raises(OwnerGone):
        run(storage.exec_in_pod(NS, "two", "a", ["true"], timeout=5))


def test_eviction_marks_the_pod_a_disruption_target_then_deletes_it(api):
    api.put(pod("warm-1"))
    seen: list[tuple[str, list]] = []
    api.subscribe("Pod", lambda kind, obj: seen.append((kind, [c["type"] for c in obj["status"]["conditions"]])))
    run(Storage(api).evict_pod(NS, "warm-1"))
    assert seen == [("MODIFIED", ["PodScheduled", "DisruptionTarget"]), ("DELETED", ["PodScheduled",
                                                                                     "DisruptionTarget"])]
    assert api.get_object("Pod", "warm-1", NS) is None
    assert ("POST", f"/api/v1/namespaces/{NS}/pods/warm-1/eviction") in api.calls   # RBAC: pods/eviction create
    with pytest.raises(NotFound):
        run(Storage(api).evict_pod(NS, "warm-1"))


def test_eviction_with_a_finalizer_leaves_the_pod_terminating_and_a_second_one_succeeds(api):
    api.put({**pod("held"), "metadata": {"name": "held", "namespace": NS, "finalizers": ["x/hold"]}})
    storage = Storage(api)
    run(storage.evict_pod(NS, "held"))
    live = api.get_object("Pod", "held", NS)
    assert live["metadata"]["deletionTimestamp"]
    condition = next(c for c in live["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (condition["status"], condition["reason"]) == ("True", "EvictionByEvictionAPI")
    run(storage.evict_pod(NS, "held"))   # already going: the real API answers Success too


def test_eviction_honours_a_uid_precondition_and_a_refusal_for_now(api):
    uid = api.put(pod("warm-1"))["metadata"]["uid"]
    storage = Storage(api)
    with pytest.raises(Conflict, match="does not match the UID in record"):
        run(storage.evict_pod(NS, "warm-1", uid="someone-else"))
    assert "DisruptionTarget" not in str(api.get_object("Pod", "warm-1", NS))
    api.fail("POST", "Pod", TooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.",
                                            status=429), when=lambda path: path.endswith("/eviction"))
    with pytest.raises(TooManyRequests) as refused:
        run(storage.evict_pod(NS, "warm-1", uid=uid))
    assert isinstance(refused.value, Unavailable)   # worth asking again later
    run(storage.evict_pod(NS, "warm-1", uid=uid))
    assert api.get_object("Pod", "warm-1", NS) is None


def test_a_429_is_too_many_requests_which_is_worth_retrying_later():
    from rolloutbatch.kube.errors import classify
    refused = classify(429, "Cannot evict pod as it would violate the pod's disruption budget.", "TooManyRequests",
                       "evict pod ns/p")
    assert isinstance(refused, TooManyRequests) and isinstance(refused, Unavailable)
    assert str(refused) == "evict pod ns/p: Cannot evict pod as it would violate the pod's disruption budget."
