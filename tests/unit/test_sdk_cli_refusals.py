"""What the SDK and the CLI refuse before any call, as README's "The `rolloutbatch` command", "The
SDK" and "Warm pools" promise: a clear error naming the field, never a traceback, a spec the API
refuses, or a batch run otherwise than asked (the API in memory, tests/support/memory_api.py)."""
from __future__ import annotations

import contextlib
import io

import pytest

from rolloutbatch import sdk
from rolloutbatch.cli import batches, pools
from rolloutbatch.cli.main import main
from rolloutbatch.sdk import Client, Task, build_batch
from tests.support import crd_schema
from tests.support.memory_api import MemoryApi

NS = "rl"
BATCH_SPEC = crd_schema.openapi_schema(crd_schema.load_crd())["properties"]["spec"]
FILES = {"episode.py": "print(1)"}


def _task(**kw) -> Task:
    return Task(**{"files": FILES, "command": ["python", "/task/episode.py"], **kw})


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def api(monkeypatch) -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    make = lambda args: Client(api=api, namespace=args.namespace or NS)   # noqa: E731
    monkeypatch.setattr(batches, "make_client", make)
    monkeypatch.setattr(pools, "make_client", make)
    return api


# 1. `pool create --network` with a bad value: argparse's message lists the choices by repr, and the
#    choices are vocabulary.NetworkMode members: `<NetworkMode.DENY_ALL: 'DenyAll'>`, not `DenyAll`.
def test_pool_create_bad_network_error_names_the_values(tmp_path):
    setup = tmp_path / "setup.sh"
    setup.write_text("true\n")
    code, _, err = _run("--kubeconfig", str(tmp_path / "none"), "pool", "create", "warm", "--size", "1",
                        "--task-file", str(setup), "--network", "Open")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "NetworkMode" not in err and "'DenyAll', 'AllowEgress'" in err, err


# 2. build_batch refuses "for what the operator would refuse ... before any network call", and
#    build_pool refuses an empty image / mount path / RuntimeClass (the CRD's schema refuses them:
#    tests/unit/test_sdk_pool_schema.py). build_batch builds such a spec and lets the API refuse it.
@pytest.mark.parametrize("task_kw, spec_kw", [
    ({"image": ""}, {}),
    ({"mount_path": ""}, {}),
    ({}, {"runtime_class_name": ""}),
    ({}, {"workspace": {"mountPath": ""}}),
    ({}, {"verifier": {"image": "", "files": {"verify.py": "print(1)"}}}),
    ({}, {"verifier": {"mountPath": "", "files": {"verify.py": "print(1)"}}}),
])
def test_build_batch_refuses_what_the_crd_refuses(task_kw, spec_kw):
    try:
        batch = build_batch("x", _task(**task_kw), episodes=1, **spec_kw)
    except ValueError:
        return
    assert crd_schema.errors(batch["spec"], BATCH_SPEC) == [], \
        f"build_batch accepted {task_kw or spec_kw} and built a spec the CRD refuses"


_BATCH_YAML = ("apiVersion: rl.agentruntime.io/v1alpha1\nkind: RolloutBatch\nmetadata: {name: b}\n"
               "spec: {episodes: 1, task: {files: {episode.py: 'print(1)'}}}\n")


def _submit_on_pool(path, pool: str, yaml_text: str = _BATCH_YAML) -> tuple[int, str, str]:
    """`rolloutbatch submit -f <path> --pool <pool>` of ``yaml_text`` written at ``path``."""
    path.write_text(yaml_text)
    return _run("submit", "-f", str(path), "--pool", pool)


# 3. `submit --pool ""` (an unset shell variable) and Client.submit(batch, pool="") run the batch
#    COLD, silently: `if args.pool:` / `if pool` treat "" as not given. build_batch(pool="") refuses it.
def test_submit_cli_empty_pool_is_refused_not_run_cold(api, tmp_path):
    code, out, err = _submit_on_pool(tmp_path / "b.yaml", "")
    assert code != 0 and "--pool" in err, (code, out, err)
    assert api.list_objects("RolloutBatch", NS) == []


def test_submit_cli_on_a_pool_that_does_not_exist_makes_nothing_unless_the_batch_waits_for_it(api, tmp_path):
    """A hostile review: the SDK refused a missing pool, `submit --pool` still made the batch (its
    task left out unchecked), which failed PoolNotFound at once."""
    path = tmp_path / "b.yaml"
    code, out, err = _submit_on_pool(path, "no-such-pool")
    assert code != 0 and "RolloutPool rl/no-such-pool not found: create it first" in err, (code, out, err)
    assert api.list_objects("RolloutBatch", NS) == []
    code, out, err = _submit_on_pool(path, "no-such-pool", _BATCH_YAML.replace(
        "task: {files: {episode.py: 'print(1)'}}", "poolRef: {name: no-such-pool, whenEmpty: Wait}"))
    assert code == 0, (code, out, err)
    assert [b["spec"]["poolRef"] for b in api.list_objects("RolloutBatch", NS)] == [
        {"name": "no-such-pool", "whenEmpty": "Wait"}]


def test_sdk_submit_empty_pool_is_refused_not_run_cold(api):
    client = Client(api=api, namespace=NS)
    with pytest.raises(ValueError, match="poolRef|pool"):
        client.submit(build_batch("b", _task(), episodes=1), pool="")
    assert api.list_objects("RolloutBatch", NS) == []


# 4. build_batch's task must be a Task; a mapping (what the YAML calls `task`) raises a bare
#    AttributeError ('dict' object has no attribute 'command'), not a ValueError naming the argument.
def test_build_batch_task_not_a_task_is_a_clear_error():
    with pytest.raises((ValueError, TypeError)) as info:
        build_batch("x", {"files": FILES, "command": ["python"]}, episodes=1)
    assert "task" in str(info.value).lower() and "attribute" not in str(info.value), info.value


# 5. Client.create_pool(..., **options): a misspelt option raises build_pool's TypeError
#    ("unexpected keyword argument"), while build_batch's misspelt field is a SpecError (ValueError)
#    naming it: README's `create_pool` refusals are ValueError "before any call".
def test_create_pool_unknown_option_is_a_value_error(api):
    client = Client(api=api, namespace=NS)
    with pytest.raises(ValueError, match="max_sise|maxSise"):
        client.create_pool("warm", 1, task_files={"setup.sh": "true"}, max_sise=4)
    assert sdk is not None


# 6. An input holding a lone UTF-16 half: `submit -f` refuses it, naming where ("no UTF-8 request
#    can carry it": the API server's Go decoder turns it into U+FFFD), but build_batch, which
#    "checks every input before any call as the operator reads it", passes it, so the episode is
#    handed another input than the trainer keeps (inline), or the escaped text (by reference).
def test_build_batch_refuses_an_input_with_a_lone_surrogate_as_submit_f_does():
    with pytest.raises(ValueError, match=r"spec\.inputs\[0\]"):
        build_batch("x", _task(), episodes=1, inputs=[{"prompt": "emoji \ud83d"}])


# 7. A namespace argument is a part of every path the SDK builds: `../x` or `a/b` named another
#    object (`namespaces/../x/rolloutbatches/b` is the cluster's `x/rolloutbatches/b`). Each is
#    refused before any call, as a name is; the CLI says so in one line.
@pytest.mark.parametrize("namespace", ["../x", "a/b", "RL", "a" * 64, "x?y=1", "-a"])
def test_a_namespace_that_names_no_namespace_is_refused_before_any_call(api, namespace):
    client = Client(api=api, namespace=NS)
    calls = list(api.calls)
    for call in (lambda: client.get("b", namespace), lambda: client.list(namespace),
                 lambda: client.get_pool("warm", namespace), lambda: client.list_pools(namespace),
                 lambda: client.retained_results("b", namespace), lambda: client.delete_pool("warm", namespace),
                 lambda: client.scale_pool("warm", 2, namespace)):
        with pytest.raises(ValueError, match="is not a namespace name"):
            call()
    with pytest.raises(ValueError, match="is not a namespace name"):
        Client(api=api, namespace=namespace).submit(build_batch("b", _task(), 1))
    assert api.calls == calls


def test_the_cli_refuses_such_a_namespace_in_one_line(api, tmp_path):
    code, out, err = _run("--kubeconfig", str(tmp_path / "none"), "-n", "../x", "get", "b")
    assert code != 0 and "is not a namespace name" in err and "Traceback" not in err, (out, err)
