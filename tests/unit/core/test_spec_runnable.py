"""Specs the CRD takes that no pod could run, or that would run otherwise than written: refused
by parse_spec with the field named, before anything is created (the API server checks none of
this, and would take the Job)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rolloutbatch.core import manifests, pool_spec
from rolloutbatch.core.env_expansion import expand
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.spec import check_batch_name, parse_spec
from tests.support import crd_schema

SPEC = crd_schema.openapi_schema()["properties"]["spec"]
TASK = {"files": {"episode.py": "print(1)"}}
COLD = {"episodes": 1, "task": TASK}
REF = BatchRef("ns", "b", "0123456789abcdef", 1)


# -- a NUL byte: no process can be given one -------------------------------------------------------
NUL_FIELDS = {
    "spec.env[A]": {"env": [{"name": "A", "value": "a\0b"}]},
    "spec.command": {"command": ["python", "-c", "print(1)\0"]},
    "spec.args": {"args": ["a\0b"]},
    "spec.verifier.env[A]": {"verifier": {"files": {"verify.py": "x"}, "env": [{"name": "A", "value": "\0"}]}},
    "spec.verifier.command": {"verifier": {"files": {"verify.py": "x"}, "command": ["python\0"]}},
    "spec.task.mountPath": {"task": {**TASK, "mountPath": "/ta\0sk"}},
    "spec.workspace.mountPath": {"workspace": {"mountPath": "/work\0space"}},
    "spec.verifier.mountPath": {"verifier": {"files": {"verify.py": "x"}, "mountPath": "/ver\0ifier"}},
}


@pytest.mark.parametrize("field", sorted(NUL_FIELDS))
def test_a_nul_byte_anywhere_a_process_reads_is_refused(field):
    raw = {**COLD, **NUL_FIELDS[field]}
    assert crd_schema.errors(raw, SPEC) == []     # the CRD takes it: parse_spec is the guard
    with pytest.raises(SpecError, match="NUL") as err:
        parse_spec(raw)
    assert err.value.field == field


def test_a_pool_with_a_nul_in_a_mount_path_is_refused():
    with pytest.raises(SpecError, match="NUL"):
        pool_spec.parse_pool_spec({"size": 1, "task": {**TASK, "mountPath": "/ta\0sk"}})


# -- an environment string past MAX_ARG_STRLEN: no process can be started with it ------------------
@pytest.mark.parametrize("where", ["spec.env", "spec.verifier.env", "pool"])
def test_an_env_value_longer_than_exec_takes_is_refused(where):
    """Linux's execve takes an environment string (NAME=value and its NUL) of at most 131072 bytes
    (MAX_ARG_STRLEN). The CRD bounds a value at 32768 characters, which in 4-byte characters is
    131072 bytes: the CRD and parse_spec took it, and every pod then failed to start."""
    longest = "\U0001F600" * 32767 + "x" * (131072 - 4 * 32767 - len("A=") - 1)   # exactly at the limit
    over = "\U0001F600" * 32768
    def parse(value):
        entry = [{"name": "A", "value": value}]
        if where == "pool":
            return pool_spec.parse_pool_spec({"size": 1, "task": TASK, "env": entry})
        raw = {**COLD, "env": entry} if where == "spec.env" else {**COLD, "verifier": {"files": {"verify.py": "x"},
                                                                                           "env": entry}}
        assert crd_schema.errors(raw, SPEC) == []     # the CRD takes it: parse_spec is the guard
        return parse_spec(raw)
    parse(longest)
    with pytest.raises(SpecError, match="131072") as err:
        parse(over)
    assert err.value.field == ("spec.env[A]" if where == "pool" else f"{where}[A]")


@pytest.mark.parametrize("where", ["spec.env", "spec.verifier.env", "pool"])
def test_an_env_value_past_exec_once_expanded_is_refused(where):
    """The kubelet expands $(NAME) in a value before the process starts: B = $(A) five times, A of
    32768 characters, is 163840 bytes at exec, and no container could start. It was measured as
    written (25 bytes)."""
    entries = [{"name": "A", "value": "a" * 32768}, {"name": "B", "value": "$(A)" * 5}]
    if where == "pool":
        parse = lambda env: pool_spec.parse_pool_spec({"size": 1, "task": TASK, "env": env})  # noqa: E731
    elif where == "spec.env":
        parse = lambda env: parse_spec({**COLD, "env": env})  # noqa: E731
    else:
        parse = lambda env: parse_spec({**COLD, "verifier": {"files": {"verify.py": "x"}, "env": env}})  # noqa: E731
    parse([entries[0], {"name": "B", "value": "$(A)" * 3 + "$$(A)" * 2}])   # 98314 bytes, escaped ones kept
    with pytest.raises(SpecError, match="131072") as err:
        parse(entries)
    assert err.value.field.endswith("[B]")


# -- a path's name past NAME_MAX: no mount point can be made ----------------------------------------
@pytest.mark.parametrize("field", ["task", "workspace", "verifier"])
def test_a_mount_path_with_a_name_longer_than_name_max_is_refused(field):
    long = "/" + "a" * 256
    raw = {"episodes": 1, "task": dict(TASK)}
    if field == "task":
        raw["task"]["mountPath"] = long
    elif field == "workspace":
        raw["workspace"] = {"mountPath": long}
    else:
        raw["verifier"] = {"files": {"verify.py": "x"}, "mountPath": long}
    with pytest.raises(SpecError, match="longer than 255 bytes"):
        parse_spec(raw)
    with pytest.raises(SpecError, match="longer than 255 bytes"):
        pool_spec.parse_pool_spec({"size": 1, "task": {**TASK, "mountPath": long}})
    raw_ok = {"episodes": 1, "task": {**TASK, "mountPath": "/" + "a" * 255}}
    assert parse_spec(raw_ok).task_mount_path == "/" + "a" * 255


# -- nulls and wrong types: a SpecError naming the field, never a TypeError -------------------------
@pytest.mark.parametrize("raw", [
    {**COLD, "parallelism": None}, {**COLD, "minSuccessfulEpisodes": None}, {**COLD, "samplesPerInput": None},
    {**COLD, "episodeTimeoutSeconds": None}, {**COLD, "activeDeadlineSeconds": None},
    {**COLD, "verifier": {"files": {"verify.py": "x"}, "timeoutSeconds": None}},
    {**COLD, "stop": None}, {**COLD, "isolation": {"resourceQuota": None}},
], ids=["parallelism", "minSuccessfulEpisodes", "samplesPerInput", "episodeTimeoutSeconds",
        "activeDeadlineSeconds", "verifier.timeoutSeconds", "stop", "isolation.resourceQuota"])
def test_a_null_is_read_as_absent_as_the_api_server_reads_it(raw):
    def pruned(value):
        if isinstance(value, dict):
            return {k: pruned(v) for k, v in value.items() if v is not None}
        return value
    assert parse_spec(raw) == parse_spec(pruned(raw))


@pytest.mark.parametrize("extra, field", [
    ({"command": 5}, "spec.command"), ({"args": 5}, "spec.args"),
    ({"verifier": {"files": {"verify.py": "x"}, "command": 7}}, "spec.verifier.command"),
])
def test_a_pooled_batch_with_a_mistyped_field_is_refused_with_its_name(extra, field):
    with pytest.raises(SpecError) as err:
        parse_spec({"episodes": 1, "poolRef": {"name": "p"}, **extra})
    assert err.value.field == field


# -- a default command whose script is hidden by the files mounted over it -----------------------
def test_a_default_command_needs_its_script_among_the_files():
    with pytest.raises(SpecError, match="episode.py") as err:
        parse_spec({"episodes": 1, "task": {"files": {"main.py": "print(1)"}}})
    assert err.value.field == "spec.command"
    with pytest.raises(SpecError, match="verify.py") as err:
        parse_spec({**COLD, "verifier": {"files": {"grade.py": "print(1)"}}})
    assert err.value.field == "spec.verifier.command"
    # with a command, or the script there, or no verifier files (the image's own script runs)
    parse_spec({"episodes": 1, "task": {"files": {"main.py": "x"}}, "command": ["python", "/task/main.py"]})
    parse_spec({**COLD, "verifier": {"files": {"grade.py": "x"}, "command": ["python", "/verifier/grade.py"]}})
    parse_spec({**COLD, "verifier": {"image": "grader:1"}})


def test_any_other_error_is_said_before_the_missing_script():
    with pytest.raises(SpecError) as err:
        parse_spec({"episodes": 1, "task": {"files": {"main.py": "x"}}, "isolation": {"namespace": "Nope"}})
    assert err.value.field == "spec.isolation.namespace"


# -- what the operator's /bin/sh launcher would lose ----------------------------------------------
def _episode_env(raw: dict, shell: str) -> list[str]:
    """The episode container's command run as the kubelet starts it, /bin/sh played by ``shell``."""
    container = manifests.job(REF, parse_spec(raw), None)["spec"]["template"]["spec"]["containers"][0]
    env = {"EPISODE_INDEX": "3", "EPISODE_ID": "pod-3", "PATH": "/usr/bin:/bin"}
    env |= {item["name"]: expand(item["value"], env) for item in container["env"] if "value" in item}
    words = [expand(w, env) for w in [*container["command"], *container.get("args", [])]]
    if words[0] == "/bin/sh":
        words[0] = shell
    return subprocess.run(words, env=env, capture_output=True, text=True, timeout=10, check=True).stdout.splitlines()


@pytest.mark.skipif(shutil.which("dash") is None, reason="needs dash, the /bin/sh of Debian-based images")
def test_an_env_name_a_shell_drops_is_refused_where_a_shell_launches_the_episode():
    base = {"task": TASK, "command": ["env"], "env": [{"name": "MY-VAR", "value": "1"}]}
    assert "MY-VAR=1" in _episode_env({**base, "episodes": 2}, "dash")   # k = 1: no shell, kept
    with pytest.raises(SpecError, match="dash") as err:
        parse_spec({**base, "episodes": 2, "samplesPerInput": 2})
    assert err.value.field == "spec.env[MY-VAR]"
    with pytest.raises(SpecError, match="dash") as err:
        parse_spec({**COLD, "verifier": {"files": {"verify.py": "x"}, "env": [{"name": "a.b", "value": "1"}]}})
    assert err.value.field == "spec.verifier.env[a.b]"
    # a name the shell keeps, under the launcher
    assert "MY_VAR=1" in _episode_env({**base, "env": [{"name": "MY_VAR", "value": "1"}], "episodes": 2,
                                       "samplesPerInput": 2}, "dash")


@pytest.mark.parametrize("extra", [{"args": ["--literal", "$$(EPISODE_GROUP)"]},
                                   {"env": [{"name": "DOC", "value": "write $$(EPISODE_SAMPLE) here"}]}])
def test_an_escaped_reference_to_a_launcher_variable_is_text_whatever_k(extra):
    parse_spec({"episodes": 4, "samplesPerInput": 2, "task": TASK, **extra})
    with pytest.raises(SpecError, match=r"\$\(EPISODE_GROUP\) is set at run time"):
        parse_spec({"episodes": 4, "samplesPerInput": 2, "task": TASK, "args": ["$(EPISODE_GROUP)"]})


# -- what a Pod, a pool and the API server read otherwise ------------------------------------------
def test_an_empty_priority_class_is_none_for_a_batch_as_for_a_pool():
    raw = {**COLD, "podTemplate": {"priorityClassName": ""}}
    assert crd_schema.errors(raw, SPEC) == []
    pool_spec.parse_pool_spec({"size": 1, "task": TASK, "podTemplate": {"priorityClassName": ""}})
    assert not parse_spec(raw).pod_template.get("priorityClassName")


def test_a_generate_name_prefix_leaves_room_for_what_the_api_server_appends():
    check_batch_name("a" * 49 + "-")         # 50 + 5 = 55, the CRD's bound on the name
    with pytest.raises(SpecError, match="at most 50"):
        check_batch_name("a" * 50 + "-")
    check_batch_name("a" * 55)


@pytest.mark.parametrize("raw", [
    {**COLD, "image": "python:3.12\0evil"},
    {**COLD, "verifier": {"image": "grader\0:1", "command": ["true"]}},
    {**COLD, "episodes": 2, "inputs": [{}, {}], "inputImages": ["a:1", "b\0:1"]},
], ids=["image", "verifier.image", "inputImages"])
def test_a_nul_in_an_image_is_refused(raw):
    with pytest.raises(SpecError, match="not an image reference"):
        parse_spec(raw)


@pytest.mark.parametrize("key", ["limits", "requests"])
def test_a_null_amounts_entry_reads_as_absent(key):
    other = "requests" if key == "limits" else "limits"
    spec = parse_spec({**COLD, "resources": {key: None, other: {"cpu": "1"}}})
    assert spec.resources == {other: {"cpu": "1"}}


@pytest.mark.parametrize("where", ["spec.args", "spec.command", "spec.verifier.args", "spec.prepare.command"])
def test_an_argument_past_exec_once_expanded_is_refused(where):
    """execve takes an argument of at most MAX_ARG_STRLEN bytes too, after the kubelet expanded its
    $(NAME) references: args ["$(A)" * 5] with A of 32768 characters, or a literal argument of
    200,000, passed and no container could start."""
    big = [{"name": "A", "value": "a" * 32768}]
    word = "$(A)" * 5

    def parse(words):
        if where == "spec.prepare.command":
            return pool_spec.parse_pool_spec({"size": 1, "task": TASK, "env": big, "prepare": {"command": words}})
        if where == "spec.verifier.args":
            return parse_spec({**COLD, "verifier": {"files": {"verify.py": "x"}, "env": big, "args": words}})
        return parse_spec({**COLD, "env": big, where.split(".")[1]: words})
    parse(["x", "$(A)" * 3])                              # 98304 bytes: fits
    for words in (["x", word], ["x", "b" * 200_000]):
        with pytest.raises(SpecError, match="MAX_ARG_STRLEN") as err:
            parse(words)
        assert err.value.field.endswith("[1]"), err.value.field
