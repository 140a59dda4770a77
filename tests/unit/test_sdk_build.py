"""rolloutbatch.sdk: building batches (no cluster) and the handle's wait loop on a fake client."""
from __future__ import annotations

import pytest

from rolloutbatch import sdk
from rolloutbatch.sdk import Task, build_batch

TASK = Task(files={"episode.py": "print('hi')"}, command=["python", "-B", "/task/episode.py"])


def test_minimal():
    batch = build_batch("ship", TASK, episodes=4)
    assert batch["apiVersion"] == "rl.agentruntime.io/v1alpha1" and batch["kind"] == "RolloutBatch"
    assert batch["metadata"] == {"name": "ship"}
    assert batch["spec"] == {"episodes": 4, "image": "python:3.12-alpine",
                             "command": ["python", "-B", "/task/episode.py"],
                             "task": {"mountPath": "/task", "files": {"episode.py": "print('hi')"}}}


def test_prefix_namespace_inputs_and_overrides():
    task = Task(files={"a.py": "x", "data.json": "{}"}, command=["python", "/t/a.py"], image="python:3.12-slim",
                env={"SEED": 7}, resources={"limits": {"cpu": "1"}}, mount_path="/t")
    batch = build_batch("step-", task, episodes=2, parallelism=1, inputs=[{"n": 1}, {"n": 2}], namespace="rl",
                        episode_timeout_seconds=30, minSuccessfulEpisodes=1,
                        isolation={"namespace": "Shared"})
    assert batch["metadata"] == {"generateName": "step-", "namespace": "rl"}
    spec = batch["spec"]
    assert spec["parallelism"] == 1 and spec["inputs"] == [{"n": 1}, {"n": 2}]
    assert spec["env"] == [{"name": "SEED", "value": "7"}]
    assert spec["resources"] == {"limits": {"cpu": "1"}} and spec["task"]["mountPath"] == "/t"
    assert spec["episodeTimeoutSeconds"] == 30 and spec["minSuccessfulEpisodes"] == 1
    assert spec["isolation"] == {"namespace": "Shared"} and spec["image"] == "python:3.12-slim"


def test_an_image_per_input_is_checked_before_any_call():
    inputs = [{"repo": r} for r in ("a", "b", "c")]
    images = ["swe/a:1", "swe/b:1", ""]
    batch = build_batch("swe-", TASK, episodes=6, samples_per_input=2, inputs=inputs, input_images=images)
    assert batch["spec"]["inputImages"] == images
    with pytest.raises(ValueError, match="spec.inputImages"):
        build_batch("swe-", TASK, episodes=6, samples_per_input=2, inputs=inputs, input_images=images[:2])


def test_build_copies_inputs():
    resources = {"limits": {"cpu": "1"}}
    batch = build_batch("a", Task(files={"e": ""}, command=["x"], resources=resources), 1)
    batch["spec"]["resources"]["limits"]["cpu"] = "2"
    assert resources["limits"]["cpu"] == "1"


@pytest.mark.parametrize("kwargs, needle", [
    ({"episodes": 0}, "spec.episodes: must be at least 1"),
    ({"episodes": True}, "spec.episodes: must be an integer"),
    ({"episodes": 100_001}, "spec.episodes: must be at most 100000"),
    ({"episodes": 3, "parallelism": 4}, "spec.parallelism: must not exceed"),
    ({"episodes": 2, "inputs": [{}]}, "spec.inputs"),
    ({"episodes": 1, "inputs": [3]}, "JSON object"),
])
def test_invalid_counts(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        build_batch("a", TASK, **kwargs)


@pytest.mark.parametrize("name", ["", "-", "Upper", "a_b", "x" * 56, "-lead"])
def test_invalid_names(name):
    with pytest.raises(ValueError, match="name"):
        build_batch(name, TASK, 1)


@pytest.mark.parametrize("task, needle", [
    (Task(files={}, command=["x"]), "at least one file"),
    (Task(files={"../x": ""}, command=["x"]), "not a valid file name"),
    (Task(files={"..": ""}, command=["x"]), "not a valid file name"),
    (Task(files={"a": ""}, command=[]), "command"),
    (Task(files={"a": ""}, command=["x"], env={"EPISODE_ID": "1"}), "set by the operator"),
    (Task(files={"a": ""}, command=["x"], env=[{"name": "BATCH_NAME", "value": "1"}]), "set by the operator"),
])
def test_invalid_tasks(task, needle):
    with pytest.raises(ValueError, match=needle):
        build_batch("a", task, 1)


@pytest.mark.parametrize("call, field", [
    (lambda: build_batch("a", Task(files={"a": ""}, command="python a"), 1), "task.command"),   # not "p", "y", ...
    (lambda: build_batch("a", Task(files=["a"], command=["x"]), 1), "task.files"),
    (lambda: build_batch("a", TASK, 1, inputs=3), "spec.inputs"),
    (lambda: build_batch("a", Task(files={"a": ""}, command=["x"], env=["A=1"]), 1), "env[]"),
    (lambda: sdk.build_pool("warm", 1, task_files={"a": ""}, prepare="sh setup.sh"), "spec.prepare.command"),
    (lambda: sdk.build_pool("warm", 1, task_files=["a"]), "spec.task.files"),
    (lambda: sdk.build.secret_env([("K", ("s", "k"))]), "secret_env"),
])
def test_a_mistyped_argument_is_a_spec_error_naming_it(call, field):
    """The SDK's errors are ValueError (SpecError) or KubeError: never the TypeError of dict() or
    list(), nor a string read as its characters."""
    from rolloutbatch.core.model import SpecError

    with pytest.raises(SpecError) as refused:
        call()
    assert refused.value.field == field


@pytest.mark.parametrize("batch, field", [
    ({"spec": {"episodes": 3, "inputs": 3, "task": {"files": {"episode.py": "print(1)"}}}}, "spec.inputs"),
    ({"spec": {"episodes": 1, "inputs": [{"a": 1}], "task": {"files": ["episode.py"]}}}, "spec.task.files"),
    ({"spec": {"episodes": 1, "inputs": [{"a": 1}], "task": "episode.py"}}, "spec.task"),
    ({"metadata": "b", "spec": {}}, "metadata"),
    ("b", "RolloutBatch"),
])
def test_submit_of_a_mistyped_batch_is_a_spec_error_before_any_call(batch, field):
    """Client.submit reads the inputs' size (whether they go by reference) before any call: a
    spec of the wrong shape there is the operator's SpecError, naming the field."""
    from rolloutbatch.core.model import SpecError

    if isinstance(batch, dict):
        batch = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": "b"}, **batch}
    client = sdk.Client(api=RefusingApi(AssertionError("no call is made")), namespace="n")
    with pytest.raises(SpecError) as refused:
        client.submit(batch)
    assert refused.value.field == field


def test_unknown_spec_fields_are_refused_before_submit():
    with pytest.raises(ValueError, match=r"spec.episodeTimoutSeconds: unknown field \(keyword 'episode_timout_seconds'\)"):
        build_batch("a", TASK, 1, episode_timout_seconds=5)
    with pytest.raises(ValueError, match="spec.paralellism: unknown field"):
        build_batch("a", TASK, 2, paralellism=2)


@pytest.mark.parametrize("samples, overrides, field, spellings", [
    (None, {"episodeTimeoutSeconds": 5, "episode_timeout_seconds": 6}, "episodeTimeoutSeconds",
     ("episodeTimeoutSeconds", "episode_timeout_seconds")),
    (None, {"min_successful_episodes": 1, "minSuccessfulEpisodes": 2}, "minSuccessfulEpisodes",
     ("min_successful_episodes", "minSuccessfulEpisodes")),
    (1, {"samplesPerInput": 2}, "samplesPerInput", ("samples_per_input", "samplesPerInput")),   # parameter and keyword
])
def test_a_spec_field_given_in_both_spellings_is_refused(samples, overrides, field, spellings):
    """Keywords are spec fields in either spelling: both spellings of one field were taken one
    after the other, the last silently winning (episodeTimeoutSeconds=5, episode_timeout_seconds=6
    built a batch of 6), where the CLI refuses a key given twice."""
    from rolloutbatch.core.model import SpecError

    inputs = [{}, {}] if samples else None
    with pytest.raises(SpecError, match="given twice") as refused:
        build_batch("a", TASK, 2, samples_per_input=samples, inputs=inputs, **overrides)
    assert refused.value.field == f"spec.{field}"
    assert all(repr(spelling) in str(refused.value) for spelling in spellings)


@pytest.mark.parametrize("overrides, needle", [
    ({"episode_timeout_seconds": 0}, "spec.episodeTimeoutSeconds: must be at least 1"),
    ({"episode_timeout_seconds": 7200}, "must not exceed activeDeadlineSeconds"),
    ({"isolation": {"namespace": "dedicated"}}, "spec.isolation.namespace: must be one of Dedicated, Shared"),
    ({"min_successful_episodes": 3}, "spec.minSuccessfulEpisodes: must not exceed"),
    ({"env": [{"name": "EPISODE_INDEX", "value": "1"}]}, "set by the operator"),
    ({"workspace": {"mountPath": "/task/w"}}, "overlaps"),
])
def test_overrides_are_read_by_the_operators_own_parser(overrides, needle):
    from rolloutbatch.core.model import SpecError

    with pytest.raises(SpecError, match=needle):
        build_batch("a", TASK, 2, **overrides)


def test_spec_fields_match_the_crd():
    import pathlib

    import yaml

    crd = yaml.safe_load((pathlib.Path(__file__).resolve().parents[2] / "crds"
                          / "rl.agentruntime.io_rolloutbatches.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert sdk.SPEC_FIELDS == set(spec)


def test_one_definition_of_the_rules():
    from rolloutbatch.core import spec, vocabulary

    assert sdk.TERMINAL_PHASES is vocabulary.TERMINAL_PHASES
    assert not hasattr(sdk, "RESERVED_ENV") and not hasattr(sdk, "_CONFIGMAP_KEY")
    with pytest.raises(ValueError, match=f"at most {spec.MAX_BATCH_NAME_LENGTH} characters"):
        build_batch("x" * (spec.MAX_BATCH_NAME_LENGTH + 1), TASK, 1)
    # a generateName prefix leaves room for the 5 characters the API server adds (the CRD bounds the name)
    build_batch("x" * (spec.MAX_BATCH_NAME_LENGTH - 6) + "-", TASK, 1)
    with pytest.raises(ValueError, match="at most 50 characters"):
        build_batch("x" * (spec.MAX_BATCH_NAME_LENGTH - 5) + "-", TASK, 1)
    build_batch("a", TASK, spec.MAX_EPISODES)


class RefusingApi:
    url = "https://fake"

    def __init__(self, exc):
        self.exc = exc

    def create(self, path, body, what, dry_run=False):
        raise self.exc


def test_submit_refused_by_strict_validation_is_invalid_batch():
    from rolloutbatch.kube import errors

    message = 'strict decoding error: unknown field "spec.paralellism"'
    client = sdk.Client(api=RefusingApi(errors.classify(400, message, "BadRequest", "create RolloutBatch n/x")),
                        namespace="n")
    with pytest.raises(sdk.InvalidBatch) as info:
        client.submit({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
                       "metadata": {"name": "x"}, "spec": {"paralellism": 2}})
    exc = info.value
    assert isinstance(exc, errors.Invalid) and isinstance(exc, errors.KubeError)
    assert exc.status == 400 and exc.unknown_fields == ("spec.paralellism",) and message in str(exc)
    client = sdk.Client(api=RefusingApi(errors.classify(422, "spec.episodes: Invalid value")), namespace="n")
    with pytest.raises(sdk.InvalidBatch, match="Invalid value"):
        client.create({"metadata": {"name": "x"}, "spec": {}})
    client = sdk.Client(api=RefusingApi(errors.classify(413, "too large")), namespace="n")
    with pytest.raises(sdk.TooLarge):
        client.create({"metadata": {"name": "x"}, "spec": {}})


def test_wrong_kubeconfig_is_config_error(tmp_path):
    (tmp_path / "bad").write_text("clusters: {}\n")
    for path in (tmp_path / "missing", tmp_path / "bad"):
        with pytest.raises(sdk.ConfigError, match=f"cannot load the kubeconfig {path}"):
            sdk.Client(str(path))


class DeletingApi:
    """A batch deleted at once; its sandbox namespace lingers for ``polls`` reads."""

    url = "https://fake"

    def __init__(self, polls: int, owner: str = "u-1") -> None:
        self.polls, self.owner, self.deleted = polls, owner, []

    def delete(self, path, what, body=None):
        self.deleted.append(path)
        return {}

    def get(self, path, what, **params):
        from rolloutbatch.kube.errors import NotFound

        if path == "/api/v1/namespaces/rb-u1aaaaaaaa" and self.polls > 0:
            self.polls -= 1
            return {"metadata": {"name": "rb-u1aaaaaaaa", "labels": {"rl.agentruntime.io/batch-uid": self.owner}}}
        raise NotFound(what, status=404)


@pytest.mark.parametrize("status", [{}, {"phase": "Succeeded"}, {"sandboxNamespace": "rb-u1aaaaaaaa"}])
def test_delete_waits_for_the_sandbox_even_when_the_status_does_not_name_it(status):
    api = DeletingApi(polls=3)
    batch = {"metadata": {"name": "b", "namespace": "team", "uid": "u1aaaaaaaa-bbbb"}, "spec": {}, "status": status}
    api.owner = batch["metadata"]["uid"]
    sdk.Client(api=api, namespace="team").delete(batch, timeout=5, interval=0)
    assert api.polls == 0 and len(api.deleted) == 1


def test_delete_does_not_wait_for_a_shared_or_foreign_namespace():
    batch = {"metadata": {"name": "b", "namespace": "team", "uid": "u1aaaaaaaa-bbbb"},
             "spec": {"isolation": {"namespace": "Shared"}}, "status": {}}
    api = DeletingApi(polls=3, owner="u1aaaaaaaa-bbbb")
    sdk.Client(api=api, namespace="team").delete(batch, timeout=5, interval=0)
    assert api.polls == 3
    batch["spec"] = {}
    api = DeletingApi(polls=3, owner="someone-else")
    sdk.Client(api=api, namespace="team").delete(batch, timeout=5, interval=0)
    assert api.polls == 2      # read once: not ours, so not waited for


def _namespace_level_user_api():
    """The API in memory as a user with the README's namespace-level rights (manifests/rbac/
    user_roles.yaml) sees it: Namespaces are cluster-scoped, so reading rb-<uid10> is Forbidden."""
    from rolloutbatch.kube.errors import Forbidden
    from tests.support.memory_api import MemoryApi

    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    api.put({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
             "metadata": {"name": "b", "namespace": "team"}, "spec": {"episodes": 1}})   # Dedicated: a sandbox
    api.fail("GET", "Namespace", Forbidden('namespaces "rb-..." is forbidden: User "alice" cannot get resource '
                                           '"namespaces" in API group "" at the cluster scope', status=403),
             times=1000, when=lambda path: "/namespaces/rb-" in path)
    return api


def test_delete_by_a_user_who_may_not_read_namespaces_waits_for_the_batch_alone():
    """The sandbox namespace cannot be read, so cannot be waited for: the batch's finalizer
    removes it before the batch goes, so the batch gone is the answer (it raised Forbidden, after
    the batch was deleted)."""
    client = sdk.Client(api=_namespace_level_user_api(), namespace="team")
    handle = client.handle("b")
    assert client.sandbox_namespace(handle.obj)
    handle.delete(timeout=5)                       # waits, by default
    with pytest.raises(sdk.NotFound):
        client.get("b")


def test_delete_refuses_a_timeout_that_is_no_finite_number_before_any_call():
    """A batch its finalizer holds (the operator down) was polled for ever with a NaN timeout."""
    from tests.support.memory_api import MemoryApi
    from tests.unit.test_sdk_follow import _returns_within

    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    held = api.put({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
                    "metadata": {"name": "held", "namespace": "team", "finalizers": ["rl.agentruntime.io/cleanup"]},
                    "spec": {"episodes": 1}})
    client = sdk.Client(api=api, namespace="team")
    api.calls.clear()
    for timeout in (float("nan"), float("inf"), -1, True, "300", 10 ** 400):   # 10**400: no float (OverflowError)
        done, error = _returns_within(lambda: client.delete(held, timeout=timeout, interval=0.2))
        assert done, f"delete(wait=True, timeout={timeout!r}) never returned"
        assert isinstance(error, ValueError) and "timeout must be a finite number of seconds, 0 or more" in str(error)
    assert api.calls == []
    with pytest.raises(TimeoutError, match="still exists after 0s"):
        client.delete(held, timeout=0, interval=0)       # 0: looks once


def test_delete_refuses_an_interval_that_is_no_finite_number_before_any_call():
    """Checked as the timeout is, in both clients: a NaN interval made time.sleep raise mid-wait
    (after the delete), a negative one made the asyncio client's wait spin."""
    import asyncio

    from rolloutbatch.sdk.aio import AsyncClient
    from tests.support.memory_api import AsyncMemoryApi, MemoryApi
    from tests.unit.test_sdk_follow import _returns_within

    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    held = api.put({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
                    "metadata": {"name": "held", "namespace": "team", "finalizers": ["rl.agentruntime.io/cleanup"]},
                    "spec": {"episodes": 1}})
    client, aclient = sdk.Client(api=api, namespace="team"), AsyncClient(api=AsyncMemoryApi(api), namespace="team")
    api.calls.clear()
    for interval in (float("nan"), float("inf"), -1, True, "1"):
        for call in (lambda: client.delete(held, timeout=1, interval=interval),
                     lambda: asyncio.run(aclient.delete(held, timeout=1, interval=interval))):
            done, error = _returns_within(call)
            assert done, f"delete(interval={interval!r}) never returned"
            assert isinstance(error, ValueError), error
            assert "interval must be a finite number of seconds, 0 or more" in str(error), error
    assert api.calls == []
    with pytest.raises(TimeoutError, match="still exists after 0s"):
        client.delete(held, timeout=0, interval=0)       # 0: no pause between looks


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1, True])
def test_a_client_refuses_a_request_timeout_that_is_no_positive_number(timeout):
    from rolloutbatch.sdk.aio import AsyncClient

    for make in (sdk.Client, AsyncClient):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds, above 0"):
            make(api=object(), timeout=timeout)


def test_secret_env_names_keys_never_values():
    from rolloutbatch.sdk.build import secret_env

    task = Task(files={"e.py": ""}, command=["python", "/task/e.py"], env={"MODEL": "m"},
                secret_env={"OPENAI_API_KEY": ("llm", "api-key")})
    batch = build_batch("ship", task, episodes=1,
                        verifier={"env": secret_env({"GRADER_TOKEN": ("grader", "token")})})
    assert batch["spec"]["env"] == [
        {"name": "MODEL", "value": "m"},
        {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "api-key"}}}]
    assert batch["spec"]["verifier"]["env"] == [
        {"name": "GRADER_TOKEN", "valueFrom": {"secretKeyRef": {"name": "grader", "key": "token"}}}]
    with pytest.raises(ValueError, match="secret_env"):
        secret_env({"K": "llm/api-key"})
    with pytest.raises(ValueError, match="secretKeyRef.name"):
        build_batch("ship", Task(files={"e.py": ""}, command=["x"], secret_env={"K": ("Not_A_Name", "k")}), 1)


def test_a_tasks_empty_resources_reach_the_spec_as_none_not_the_default():
    """resources={} asks for no requests and no limits (core.spec reads {} as stored); dropped, the
    batch got the default 128Mi limit."""
    batch = build_batch("a", Task(files={"episode.py": "x"}, command=["x"], resources={}), 1)
    assert batch["spec"]["resources"] == {}
    assert "resources" not in build_batch("a", TASK, 1)["spec"]


@pytest.mark.parametrize("field,value", [("cleanup", {"result": "Retain"}), ("retries", {"infrastucture": 2}),
                                         ("isolation", {"namepsace": "Shared"}), ("workspace", {"sizelimit": "1Gi"})])
def test_a_misspelt_nested_field_is_refused_before_any_call(field, value):
    """As for spec.verifier, spec.podTemplate and env entries: a typo under cleanup, retries or
    isolation was read as absent, its default silently used (a Retain that deletes the results)."""
    with pytest.raises(ValueError, match=rf"spec.{field}: unsupported fields: {next(iter(value))}"):
        build_batch("g-", TASK, episodes=1, **{field: value})


def test_a_misspelt_task_or_pool_ref_field_is_refused():
    from rolloutbatch.core.spec import parse_spec
    spec = build_batch("g-", TASK, episodes=1)["spec"]
    with pytest.raises(ValueError, match="spec.task: unsupported fields: mountpath"):
        parse_spec(dict(spec, task=dict(spec["task"], mountpath="/t")))
    with pytest.raises(ValueError, match="spec.poolRef: unsupported fields: whenempty"):
        build_batch("g-", TASK, episodes=1, pool="warm", pool_ref={"name": "warm", "whenempty": "Wait"})


def test_the_nested_fields_parse_spec_accepts_are_the_crds_and_pruned_past_them():
    """One list of each object's fields (the CRD's properties), and none of those objects keeps
    unknown fields (a structural schema prunes them on write): a stored spec holds none that
    parse_spec refuses, so refusing them cannot stall a batch that runs."""
    from rolloutbatch.core.crd_spec import SPEC_OBJECT_FIELDS, spec_schema
    properties = spec_schema()["properties"]
    assert {"cleanup", "retries", "isolation", "task", "workspace", "poolRef", "verifier", "podTemplate",
            "inputsFrom"} <= set(SPEC_OBJECT_FIELDS)
    for name, fields in SPEC_OBJECT_FIELDS.items():
        assert fields == set(properties[name]["properties"])
        assert not properties[name].get("x-kubernetes-preserve-unknown-fields"), name
