"""The SDK's warm pools: build_pool, the pool verbs of Client and AsyncClient against the API in
memory (tests/support/memory_api.py), and batches submitted to a pool (pool=, spec.poolRef)."""
from __future__ import annotations

import asyncio

from pathlib import PurePosixPath

import pytest

from rolloutbatch import GROUP, POOL_KIND, POOL_PLURAL, VERSION, crdgen, sdk
from rolloutbatch.core import defaults as d
from rolloutbatch.core.crd_pool import POOL_OWNED_BATCH_FIELDS
from rolloutbatch.core.pools import DELETING_MESSAGE
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube.errors import Invalid
from rolloutbatch.sdk import ops
from rolloutbatch.sdk.aio import AsyncClient
from tests.support import crd_schema
from tests.support.memory_api import AsyncMemoryApi, MemoryApi
from tests.unit.test_sdk_follow import _returns_within

NS = "rl"
FILES = {"requirements.txt": "requests\n", "setup.sh": "pip install -r /task/requirements.txt"}
TASK = sdk.Task(files={"episode.py": "print(1)"}, command=["python", "/task/episode.py"], env={"MODE": "fast"},
                resources={"limits": {"cpu": "2"}})
POOL_CRD = crd_schema.load_crd(crd_schema.ROOT / "crds" / crdgen.POOL_FILE)
POOL_SPEC = crd_schema.openapi_schema(POOL_CRD)["properties"]["spec"]
BATCH_SPEC = crd_schema.openapi_schema()["properties"]["spec"]


@pytest.fixture
def api() -> MemoryApi:
    """The API in memory with a namespace."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api


# --- build_pool ------------------------------------------------------------------------------------------
def test_build_pool_makes_what_the_crd_accepts():
    pool = sdk.build_pool("warm", 4, task_files=FILES, image="python:3.12-slim", namespace=NS, max_size=16,
                          env={"PIP_INDEX_URL": "http://mirror"}, prepare=["sh", "/task/setup.sh"],
                          prepare_timeout_seconds=120, network="AllowEgress", workspace={"sizeLimit": "2Gi"})
    assert pool["apiVersion"] == f"{GROUP}/{VERSION}" and pool["kind"] == POOL_KIND
    assert pool["metadata"] == {"name": "warm", "namespace": NS}
    assert pool["spec"] == {"size": 4, "image": "python:3.12-slim", "maxSize": 16,
                            "env": [{"name": "PIP_INDEX_URL", "value": "http://mirror"}], "task": {"files": FILES},
                            "workspace": {"sizeLimit": "2Gi"},
                            "prepare": {"command": ["sh", "/task/setup.sh"], "timeoutSeconds": 120},
                            "network": "AllowEgress"}
    assert crd_schema.errors(pool["spec"], POOL_SPEC) == []
    minimal = sdk.build_pool("warm", 0, task_files=FILES)["spec"]
    assert minimal == {"size": 0, "image": d.IMAGE, "task": {"files": FILES}}
    assert crd_schema.errors(minimal, POOL_SPEC) == []


@pytest.mark.parametrize("kwargs, field", [
    (dict(size=5, max_size=4), "spec.size"),
    (dict(size=d.POOL_MAX_SIZE + 1), "spec.size"),                  # above the default maxSize
    (dict(size=-1), "spec.size"),
    (dict(size=1, task_files={}), "spec.task.files"),
    (dict(size=1, env={"EPISODE_INDEX": "1"}), "spec.env"),
    (dict(size=1, env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]), "spec.env"),
    (dict(size=1, prepare=[]), "spec.prepare.command"),
    (dict(size=1, prepare_timeout_seconds=5), "spec.prepare.timeoutSeconds"),
    (dict(size=1, prepare=["true"], prepare_timeout_seconds=0), "spec.prepare.timeoutSeconds"),
    (dict(size=1, prepare=["true"], prepare_timeout_seconds=d.MAX_PREPARE_TIMEOUT_SECONDS + 1),
     "spec.prepare.timeoutSeconds"),
    (dict(size=1, network="Open"), "spec.network"),
    (dict(size=1, name="Warm_Pool"), "metadata.name"),
    (dict(size=1, env={"A": None}), "env[A]"),                       # not the text "None"
    (dict(size=1, env={"A": True}), "env[A]"),
    (dict(size=1, resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}), "spec.resources.requests.cpu"),
    (dict(size=1, task_mount_path="/rollout"), "spec.task.mountPath"),  # the launcher's own directory
])
def test_build_pool_refuses_what_the_operator_refuses_before_any_call(kwargs, field):
    kwargs = {"name": "warm", "task_files": FILES, **kwargs}
    with pytest.raises(ValueError) as refused:
        sdk.build_pool(kwargs.pop("name"), kwargs.pop("size"), **kwargs)
    assert refused.value.field == field


# --- the pool verbs, blocking ------------------------------------------------------------------------------
def test_create_get_list_scale_and_delete_a_pool(api):
    client = sdk.Client(api=api, namespace=NS)
    created = client.create_pool("warm", 2, task_files=FILES, prepare=["sh", "/task/setup.sh"])
    assert created["metadata"]["uid"] and created["spec"]["size"] == 2
    assert api.calls[-1] == ("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{POOL_PLURAL}")
    assert client.get_pool("warm")["spec"]["prepare"] == {"command": ["sh", "/task/setup.sh"]}
    client.create_pool("cold", 0, task_files=FILES)
    assert [p["metadata"]["name"] for p in client.list_pools()] == ["cold", "warm"]
    assert len(client.list_pools(all_namespaces=True)) == 2

    scaled = client.scale_pool("warm", 5)
    assert scaled["spec"]["size"] == 5 and api.get_object(POOL_KIND, "warm", NS)["spec"]["size"] == 5
    assert api.calls[-1] == ("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{POOL_PLURAL}/warm")

    client.delete_pool("warm")
    assert api.get_object(POOL_KIND, "warm", NS) is None and client.list_pools()[0]["metadata"]["name"] == "cold"
    with pytest.raises(sdk.NotFound, match='rolloutpool "warm" not found'):
        client.get_pool("warm")
    with pytest.raises(sdk.NotFound):
        client.delete_pool("warm")


def test_delete_pool_says_which_batches_it_waits_for_once_each_time_it_changes(api, monkeypatch):
    """A new user's review: `pool delete` of a pool under a running batch waited silently until
    the batch ended (an hour by default)."""
    monkeypatch.setattr("time.sleep", lambda _: None)
    client = sdk.Client(api=api, namespace=NS)
    client.create_pool("warm", 1, task_files=FILES)
    path = f"{ops.pools_path(NS)}/warm"
    api.merge_patch(path, {"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}, "finalizer")
    says = iter([DELETING_MESSAGE + "waiting for 2 batch(es) that run on its pods: a, b"] * 2
                + [DELETING_MESSAGE + "waiting for 1 batch(es) that run on its pods: b", None])
    heard: list[str] = []

    def the_operator_says():
        message = next(says)
        if message is None:
            api.merge_patch(path, {"metadata": {"finalizers": None}}, "finalizer removed")
            return
        api.merge_patch(path + "/status", {"status": {"message": message}}, "the operator's status")
        api.meanwhile("GET", POOL_KIND, the_operator_says)
    api.meanwhile("DELETE", POOL_KIND, lambda: api.meanwhile("GET", POOL_KIND, the_operator_says))
    client.delete_pool("warm", on_waiting=heard.append, timeout=60)
    assert heard == [DELETING_MESSAGE + "waiting for 2 batch(es) that run on its pods: a, b",
                     DELETING_MESSAGE + "waiting for 1 batch(es) that run on its pods: b"]


def test_dry_run_stores_nothing(api):
    client = sdk.Client(api=api, namespace=NS)
    client.create_pool("warm", 1, task_files=FILES, dry_run=True)
    assert api.get_object(POOL_KIND, "warm", NS) is None


def test_delete_waits_for_the_operators_finalizer_and_spares_a_namesake(api, monkeypatch):
    client = sdk.Client(api=api, namespace=NS)
    pool = client.create_pool("warm", 1, task_files=FILES)
    finalizer = {"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}
    api.merge_patch(f"{ops.pools_path(NS)}/warm", finalizer, "the operator's finalizer")
    monkeypatch.setattr("time.sleep", lambda _: None)
    with pytest.raises(TimeoutError, match="its finalizer needs the operator"):
        client.delete_pool("warm", timeout=0)

    # While the wait reads it again (the GET after the DELETE), the operator finishes and someone
    # creates a pool of the same name: the wait ends there, and the new pool is left alone.
    def operator_done_and_a_namesake():
        api.merge_patch(f"{ops.pools_path(NS)}/warm", {"metadata": {"finalizers": None}}, "finalizer removed")
        api.put(sdk.build_pool("warm", 3, task_files=FILES, namespace=NS))

    api.meanwhile("DELETE", POOL_KIND, lambda: api.meanwhile("GET", POOL_KIND, operator_done_and_a_namesake))
    client.delete_pool("warm")
    assert api.get_object(POOL_KIND, "warm", NS)["metadata"]["uid"] != pool["metadata"]["uid"]


def test_delete_pool_refuses_a_timeout_that_is_no_finite_number_before_any_call(api):
    """A pool its finalizer holds was polled for ever with a NaN timeout."""
    client = sdk.Client(api=api, namespace=NS)
    client.create_pool("warm", 1, task_files=FILES)
    api.calls.clear()
    aclient = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
    for timeout in (float("nan"), float("inf"), -1, True):
        for call in (lambda: client.delete_pool("warm", timeout=timeout),
                     lambda: asyncio.run(aclient.delete_pool("warm", timeout=timeout))):
            done, error = _returns_within(call)
            assert done, f"delete_pool(timeout={timeout!r}) never returned"
            assert isinstance(error, ValueError) and "timeout must be a finite number of seconds, 0 or more" in str(error)
    assert api.calls == [] and api.get_object(POOL_KIND, "warm", NS) is not None


@pytest.mark.parametrize("interval", [float("nan"), float("inf"), -1, True, "1"])
def test_delete_pool_refuses_an_interval_that_is_no_finite_number_before_any_call(interval):
    """Its wait's pause, checked as the timeout is: a NaN one made time.sleep raise mid-wait, a
    negative one made the asyncio client's wait spin."""
    with pytest.raises(ValueError, match="interval must be a finite number of seconds, 0 or more"):
        next(ops.delete_pool("warm", NS, interval=interval))   # before its first call
    assert isinstance(next(ops.delete_pool("warm", NS, interval=0)), ops.Call)


def test_a_namesake_made_before_the_delete_is_never_deleted(api):
    client = sdk.Client(api=api, namespace=NS)
    client.create_pool("warm", 1, task_files=FILES)

    def replaced():   # between our read and our DELETE
        api.delete(f"{ops.pools_path(NS)}/warm", "someone else")
        api.put(sdk.build_pool("warm", 3, task_files=FILES, namespace=NS))

    api.meanwhile("DELETE", POOL_KIND, replaced)
    client.delete_pool("warm")
    assert api.get_object(POOL_KIND, "warm", NS)["spec"]["size"] == 3


def test_a_refused_pool_is_invalid_pool_with_the_apis_message(api):
    client = sdk.Client(api=api, namespace=NS)
    api.fail("POST", POOL_KIND, Invalid("spec.size must be less than or equal to spec.maxSize", status=422,
                                        reason="Invalid"))
    with pytest.raises(sdk.InvalidPool, match="spec.maxSize"):
        client.create_pool("warm", 1, task_files=FILES)
    client.create_pool("warm", 1, task_files=FILES)
    api.fail("PATCH", POOL_KIND, Invalid("spec.size must be less than or equal to spec.maxSize", status=422,
                                         reason="Invalid"))
    with pytest.raises(sdk.InvalidPool):
        client.scale_pool("warm", 500)
    with pytest.raises(ValueError):
        client.scale_pool("warm", -1)


def test_without_the_pool_crd_the_error_says_so():
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    client = sdk.Client(api=api, namespace=NS)

    class Gone:   # an API server without the pool CRD: its paths 404, its discovery lists no pools
        def __getattr__(self, name):
            real = getattr(api, name)

            def call(path, *args, **kwargs):
                if POOL_PLURAL in path:
                    raise sdk.NotFound("the server could not find the requested resource", status=404)
                found = real(path, *args, **kwargs)
                if path == f"/apis/{GROUP}/{VERSION}":
                    found = dict(found, resources=[r for r in found["resources"] if r["name"] != POOL_PLURAL])
                return found
            return call

    client.api = Gone()
    with pytest.raises(sdk.CRDNotInstalled, match="RolloutPool CRD is not installed"):
        client.list_pools()
    with pytest.raises(sdk.CRDNotInstalled):
        client.get_pool("warm")
    # a batch on a pool that cannot exist is refused with the fix, not left to stall
    with pytest.raises(sdk.CRDNotInstalled, match="RolloutPool CRD is not installed"):
        client.submit(sdk.build_batch("step", TASK, episodes=1, namespace=NS), pool="warm")
    assert not api.list_objects("RolloutBatch", NS)


# --- the pool verbs, asyncio -------------------------------------------------------------------------------
def test_the_async_client_has_the_same_verbs(api):
    async def main():
        client = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
        await client.create_pool("warm", 2, task_files=FILES, image="python:3.12-slim")
        assert (await client.get_pool("warm"))["spec"]["image"] == "python:3.12-slim"
        assert (await client.scale_pool("warm", 0))["spec"]["size"] == 0
        assert [p["metadata"]["name"] for p in await client.list_pools()] == ["warm"]
        await client.delete_pool("warm")
        assert await client.list_pools() == []
    asyncio.run(main())


# --- batches on a pool ----------------------------------------------------------------------------------
def test_build_batch_with_a_pool_sends_none_of_the_pools_fields():
    batch = sdk.build_batch("step", TASK, episodes=4, pool="warm", episode_timeout_seconds=60)
    spec = batch["spec"]
    assert spec["poolRef"] == {"name": "warm"}
    assert not set(POOL_OWNED_BATCH_FIELDS) & set(spec)
    # the Task still says what each episode runs
    assert spec["command"] == TASK.command and spec["env"] == [{"name": "MODE", "value": "fast"}]
    assert spec["episodeTimeoutSeconds"] == 60
    assert parse_spec(spec).pool_name == "warm"


def test_with_a_pool_the_task_is_optional_and_without_one_required():
    spec = sdk.build_batch("step-", None, episodes=2, pool="warm", command=["python", "/task/run.py"])["spec"]
    assert spec == {"episodes": 2, "command": ["python", "/task/run.py"], "poolRef": {"name": "warm"}}
    with pytest.raises(ValueError, match="unless pool names"):
        sdk.build_batch("step-", None, episodes=2)


@pytest.mark.parametrize("override", sorted(set(POOL_OWNED_BATCH_FIELDS) - {"task"}))
def test_a_pool_field_asked_for_by_name_is_refused_not_dropped(override):
    value = {"image": "x:1", "runtimeClassName": "gvisor", "resources": {}, "workspace": {},
             "isolation": {"namespace": "Shared"}, "podTemplate": {}}[override]
    with pytest.raises(ValueError, match="is the pool's"):
        sdk.build_batch("step-", TASK, episodes=2, pool="warm", **{override: value})


@pytest.mark.parametrize("field, value", [("image", "grader:1"), ("resources", {"limits": {"cpu": "2"}})])
def test_a_verifier_image_or_resources_asked_for_on_a_pool_is_refused_not_dropped(field, value):
    """The pool's pods hold its verifier's container too: graded by the pool's image, a batch
    asking for another must hear so (the CRD refuses them with poolRef)."""
    with pytest.raises(ValueError, match=f"spec.verifier.{field}.*is the pool's"):
        sdk.build_batch("step-", TASK, episodes=2, pool="warm", verifier={"files": {"verify.py": "print(1)"}, field: value})


def test_a_bad_pool_name_is_refused():
    with pytest.raises(ValueError, match="not a RolloutPool name"):
        sdk.build_batch("step-", TASK, episodes=2, pool="Warm Pool")


def _put_pool(api: MemoryApi, **spec) -> None:
    api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND, "metadata": {"name": "warm", "namespace": NS},
             "spec": {"size": 2, "task": {"files": FILES}, **spec}})


# A batch written to run cold on the pool's own task and sandbox.
POOLS_TASK = sdk.Task(files=FILES, command=TASK.command, env=TASK.env)


def test_submit_to_a_pool_drops_the_pools_fields_of_a_cold_batch(api):
    _put_pool(api, network="AllowEgress")
    cold = sdk.build_batch("step", POOLS_TASK, episodes=2, namespace=NS, isolation={"network": "AllowEgress"})
    handle = sdk.Client(api=api, namespace=NS).submit(cold, pool="warm")
    stored = api.get_object("RolloutBatch", handle.name, NS)["spec"]
    assert stored["poolRef"] == {"name": "warm"} and not set(POOL_OWNED_BATCH_FIELDS) & set(stored)
    assert stored["command"] == TASK.command and stored["episodes"] == 2
    assert crd_schema.errors(stored, BATCH_SPEC) == []
    # the caller's batch is unchanged
    assert cold["spec"]["task"] == {"mountPath": d.TASK_MOUNT_PATH, "files": FILES}
    # and without pool=, the same batch runs cold
    cold["metadata"]["name"] = "step-cold"
    assert "poolRef" not in api.get_object("RolloutBatch", sdk.Client(api=api, namespace=NS).submit(cold).name,
                                           NS)["spec"]


@pytest.mark.parametrize("task, overrides, field", [
    (TASK, {}, "spec.task.files"),                                     # another task
    (POOLS_TASK, {"image": "python:3.11-slim"}, "spec.image"),         # another image
    (POOLS_TASK, {"resources": {"limits": {"cpu": "4"}}}, "spec.resources"),
    (POOLS_TASK, {"isolation": {"network": "AllowEgress"}}, "spec.isolation.network"),   # the pool's is the default
])
def test_submit_to_a_pool_refuses_a_batch_that_names_what_the_pool_does_not_run(api, task, overrides, field):
    """As `rolloutbatch submit --pool`: dropped silently, the episodes would run the pool's task
    on the pool's image."""
    _put_pool(api)
    cold = sdk.build_batch("step", task, episodes=2, namespace=NS, **overrides)
    with pytest.raises(ValueError, match=f"on RolloutPool warm: {field}"):
        sdk.Client(api=api, namespace=NS).submit(cold, pool="warm")

    async def main():
        await AsyncClient(api=AsyncMemoryApi(api), namespace=NS).submit(cold, pool="warm")
    with pytest.raises(ValueError, match=f"on RolloutPool warm: {field}"):
        asyncio.run(main())
    assert not api.list_objects("RolloutBatch", NS)


def test_submit_to_a_pool_not_made_yet_is_refused_unless_the_batch_waits_for_it(api):
    """A misspelt pool (a new user's review): the batch was made, its task left out unchecked, and
    failed PoolNotFound at once. Now NotFound before anything is made, naming the fix; a batch
    that waits for its pool (whenEmpty Wait, which waits for a pool made after it) is made."""
    client = sdk.Client(api=api, namespace=NS)
    with pytest.raises(sdk.NotFound, match="RolloutPool .*/nosuchpool not found: create it first"):
        client.submit(sdk.build_batch("step", TASK, episodes=1, namespace=NS), pool="nosuchpool")

    async def main():
        await AsyncClient(api=AsyncMemoryApi(api), namespace=NS).submit(
            sdk.build_batch("step", TASK, episodes=1, namespace=NS), pool="nosuchpool")
    with pytest.raises(sdk.NotFound, match="whenEmpty: Wait"):
        asyncio.run(main())
    assert not api.list_objects("RolloutBatch", NS)
    waiting = sdk.build_batch("step", TASK, episodes=1, namespace=NS)
    waiting["spec"]["poolRef"] = {"name": "later", "whenEmpty": "Wait"}
    handle = client.submit(waiting, pool="later")
    assert api.get_object("RolloutBatch", handle.name, NS)["spec"]["poolRef"] == {"name": "later", "whenEmpty": "Wait"}


def test_the_async_submit_takes_a_pool_too(api):
    _put_pool(api)

    async def main():
        client = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
        return await client.submit(sdk.build_batch("step", POOLS_TASK, episodes=1, namespace=NS), pool="warm")
    handle = asyncio.run(main())
    assert api.get_object("RolloutBatch", handle.name, NS)["spec"]["poolRef"] == {"name": "warm"}


def test_a_pooled_batch_keeps_its_verifier_but_not_its_container():
    verifier = {"files": {"verify.py": "x"}, "image": "grader:1", "resources": {"limits": {"cpu": "1"}},
                "timeoutSeconds": 30}
    cold = sdk.build_batch("step", TASK, episodes=2, verifier=verifier)
    pooled = sdk.with_pool(cold, "warm")["spec"]["verifier"]
    assert pooled == {"files": {"verify.py": "x"}, "timeoutSeconds": 30}
    assert parse_spec(sdk.with_pool(cold, "warm")["spec"]).verifier is not None


def test_build_pool_with_a_verifier():
    pool = sdk.build_pool("graded", 2, task_files=FILES, verifier={"image": "grader:1"})
    assert pool["spec"]["verifier"] == {"image": "grader:1"}
    with pytest.raises(ValueError, match="spec.verifier.mountPath"):
        sdk.build_pool("graded", 2, task_files=FILES, verifier={"mountPath": "/workspace"})


def test_a_size_above_the_default_max_size_says_to_raise_it():
    with pytest.raises(ValueError, match=r"101 is above spec.maxSize \(100, its default\): raise maxSize"):
        sdk.build_pool("warm", 101, task_files=FILES)
    assert sdk.build_pool("warm", 101, task_files=FILES, max_size=200)["spec"]["size"] == 101


def test_env_values_are_their_text():
    env = sdk.build_pool("warm", 1, task_files=FILES, env={"DATA": PurePosixPath("/data"), "N": 3})["spec"]["env"]
    assert env == [{"name": "DATA", "value": "/data"}, {"name": "N", "value": "3"}]


def test_every_public_verb_of_the_sync_client_is_the_async_clients_too():
    """README: AsyncClient has Client's methods (awaited); a verb added to one only is caught here."""
    def public(cls) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}
    assert public(sdk.Client) - public(AsyncClient) == set()
    assert public(sdk.BatchHandle) - public(sdk.AsyncBatchHandle) <= {"settle"}   # a status getter, sync only


def test_the_readmes_pool_example_runs_as_written(api):
    # README "Warm pools": the batch built for the pool, and one built to run cold from the pool's
    # own files; a batch whose task differs from the pool's is refused (ValueError) instead
    client = sdk.Client(api=api, namespace=NS)
    files = {**FILES, "run.sh": "echo"}
    client.create_pool("warm", 8, task_files=files, prepare=["sh", "/task/setup.sh"])
    pooled = client.submit(sdk.build_batch("step-", None, 64, pool="warm", command=["sh", "/task/run.sh"]))
    cold = client.submit(sdk.build_batch("step-", sdk.Task(files=files, command=["sh", "/task/run.sh"]), 64),
                         pool="warm")
    for handle in (pooled, cold):
        assert handle.obj["spec"] == {"episodes": 64, "command": ["sh", "/task/run.sh"], "poolRef": {"name": "warm"}}
    with pytest.raises(ValueError, match="task"):
        client.submit(sdk.build_batch("step-", TASK, 64), pool="warm")


# --- wait_pool ---------------------------------------------------------------------------------------------
def _pool_object(generation: int = 1, observed: int = 1, *conditions: tuple[str, str, str], message: str = ""):
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND,
            "metadata": {"name": "warm", "namespace": NS, "generation": generation},
            "spec": {"size": 2, "task": {"files": FILES}},
            "status": {"observedGeneration": observed, "message": message, "readyPods": 0,
                       "conditions": [{"type": t, "status": s, "reason": r, "message": message}
                                      for t, s, r in conditions]}}


def test_wait_pool_returns_a_pool_ready_for_its_current_spec(api):
    api.put(_pool_object(1, 1, ("Ready", "True", "Warm"), message="2/2 warm"))
    assert sdk.Client(api=api, namespace=NS).wait_pool("warm", timeout=5)["status"]["message"] == "2/2 warm"


def test_wait_pool_waits_while_filling_and_takes_no_old_generations_ready_for_now(api):
    """Scaled up: the status still says Ready for the old size until the operator observes the new."""
    import threading
    api.put(_pool_object(1, 1, ("Ready", "True", "Warm"), message="2/2 warm"))
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{POOL_PLURAL}/warm"
    api.merge_patch(path, {"spec": {"size": 4}}, "scale")                    # generation 2
    client = sdk.Client(api=api, namespace=NS)
    with pytest.raises(TimeoutError, match="not ready after 1.5s .it says: 2/2 warm"):
        client.wait_pool("warm", timeout=1.5)
    observed = {"status": {"observedGeneration": 2, "message": "4/4 warm"}}
    threading.Timer(0.8, api.merge_patch, (f"{path}/status", observed, "the operator")).start()
    assert client.wait_pool("warm", timeout=10)["status"]["message"] == "4/4 warm"


def test_wait_pool_says_why_a_pool_cannot_fill(api):
    api.put(_pool_object(1, 1, ("Ready", "False", "ImagePullFailed"), ("Stalled", "True", "ImagePullFailed"),
                         message="ErrImagePull: no such image"))
    with pytest.raises(sdk.PoolStalled, match="cannot fill: ImagePullFailed: ErrImagePull: no such image"):
        sdk.Client(api=api, namespace=NS).wait_pool("warm", timeout=30)
    with pytest.raises(sdk.NotFound):
        sdk.Client(api=api, namespace=NS).wait_pool("cold", timeout=30)


def test_the_async_client_waits_for_a_pool_too(api):
    api.put(_pool_object(1, 1, ("Ready", "True", "Warm"), message="2/2 warm"))
    client = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
    assert asyncio.run(client.wait_pool("warm", timeout=5))["status"]["message"] == "2/2 warm"
