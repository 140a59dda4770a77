"""CLI argument handling and error lines, without a cluster."""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import shlex
import socket

import pytest
import yaml

from rolloutbatch.cli import common
from rolloutbatch.cli.main import build_parser, main
from tests.unit.cli.cli_runner import run

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture
def dead_kubeconfig(tmp_path) -> pathlib.Path:
    """A kubeconfig naming a port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                  "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u", "namespace": "team-a"}}],
    }))
    return path


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == "rolloutbatch 0.1.0"


@pytest.mark.parametrize("argv, needle", [
    ([], "the following arguments are required: COMMAND"),
    (["submit"], "-f/--filename"),
    (["frobnicate"], "invalid choice"),
    (["get"], "name"),
    (["list", "-o", "table"], "invalid choice"),
    (["submit", "-f", "x.yaml", "--timeout", "-3"], "not a finite number of seconds above 0: '-3'"),
    (["results", "x"], "--output"),
    # as logs --limit-bytes 0 (test_live_log_escapes): exit 2, not the command's exit 1
    (["results", "x", "--output", "d", "--log-limit-bytes", "0"], "--log-limit-bytes: must be at least 1: '0'"),
    (["logs", "x", "--index=-1"], "--index/-i: must be at least 0: '-1'"),
    # no abbreviations: a prefix is no option (a script relying on one breaks with a new option)
    (["submit", "-f", "x.yaml", "--wat"], "unrecognized arguments: --wat"),
    (["--namespace", "a", "list", "--all-n"], "unrecognized arguments: --all-n"),
])
def test_bad_arguments_are_one_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err and "error:" in err


@pytest.mark.parametrize("value", ["inf", "-inf", "1e400", "nan", "0", "soon"])
@pytest.mark.parametrize("argv", [["submit", "-f", "x.yaml", "--watch"], ["watch", "a"], ["stop", "a", "--wait"],
                                  ["cleanup", "a"], ["pool", "delete", "a"]])
def test_a_timeout_that_is_no_finite_number_above_0_is_a_bad_argument(capsys, argv, value):
    """Refused by argparse (exit 2), before any call: an infinite one passed a bare `> 0` and the
    SDK then refused it with a traceback, after the stop or delete had been sent."""
    code, out, err = run(capsys, *argv, f"--timeout={value}")
    assert code == 2 and out == "" and "--timeout: not a finite number of seconds above 0" in err, err


def _typed_options(parser):
    """(command, option, its argparse type) of every option of ``parser`` and its subcommands'."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for command, option, kind in _typed_options(sub):
                    yield f"{name} {command}".strip(), option, kind
        elif action.type is not None:
            yield "", max(action.option_strings, key=len) if action.option_strings else action.dest, action.type


def test_every_number_option_refuses_what_is_no_finite_number():
    """A number argparse takes as float('inf') or nan waits for ever or fails late: every typed
    option of the command (but the operator's, which checks its own ranges, and the two that take text)
    refuses them."""
    typed = [(c, o, t) for c, o, t in _typed_options(build_parser(operator=False))
             if not c.startswith("operator") and o not in ("--env", "--namespace")]
    assert len(typed) >= 10, typed
    for command, option, kind in typed:
        for value in ("inf", "nan", "1e400"):
            with pytest.raises((argparse.ArgumentTypeError, ValueError)):
                kind(value)


def test_namespace_and_kubeconfig_before_or_after_the_subcommand():
    parser = build_parser()
    a = parser.parse_args(["-n", "x", "--kubeconfig", "/k", "get", "b"])
    assert (a.namespace, a.global_kubeconfig, a.name) == ("x", "/k", "b")
    b = parser.parse_args(["get", "b", "-n", "y", "--kubeconfig", "/j"])
    assert (b.namespace, b.global_kubeconfig) == ("y", "/j")
    c = parser.parse_args(["-n", "x", "get", "b"])
    assert c.namespace == "x", "a value before the subcommand must survive"
    d = parser.parse_args(["get", "b"])
    assert d.namespace is None and d.global_kubeconfig is None


def test_operator_subcommand_kept_and_takes_the_global_kubeconfig(monkeypatch):
    from rolloutbatch import runner

    seen = {}
    monkeypatch.setattr(runner, "run", lambda args: seen.setdefault("k", args.kubeconfig) and 0)
    parser = build_parser()
    args = parser.parse_args(["operator", "--metrics-port", "1"])
    assert args.func is not None and args.metrics_port == 1
    main(["--kubeconfig", "/some/file", "operator"])
    assert seen["k"] == "/some/file"


def test_missing_kubeconfig_is_one_line(capsys, tmp_path):
    code, out, err = run(capsys, "--kubeconfig", str(tmp_path / "nope"), "list")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "cannot load the kubeconfig" in err


def test_unreachable_cluster_is_one_line(capsys, dead_kubeconfig):
    code, _, err = run(capsys, "--kubeconfig", str(dead_kubeconfig), "get", "x")
    assert code == 1
    assert err.count("\n") == 1, err
    assert "cannot reach https://127.0.0.1:" in err and "connection refused" in err
    assert "Traceback" not in err


def test_context_namespace_is_the_default(dead_kubeconfig):
    args = build_parser().parse_args(["--kubeconfig", str(dead_kubeconfig), "list"])
    assert common.make_client(args).namespace == "team-a"
    args = build_parser().parse_args(["--kubeconfig", str(dead_kubeconfig), "list", "-n", "other"])
    assert common.make_client(args).namespace == "other"


@pytest.mark.parametrize("value", ["", "Team_A", "a/b", "..", "x" * 64])
@pytest.mark.parametrize("where", ["before", "after"])
def test_a_namespace_that_names_none_is_a_bad_argument_not_the_default(capsys, dead_kubeconfig, value, where):
    """``-n "$NS"`` with NS unset must not act in the kubeconfig's namespace (here team-a)."""
    words = ["--kubeconfig", str(dead_kubeconfig), "-n", value, "stop", "b"]
    argv = words if where == "before" else words[:2] + words[4:] + words[2:4]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "-n/--namespace" in err and "is not a namespace name" in err, err


def _readme_commands() -> list[str]:
    """README's runnable `rolloutbatch` commands: the console lines (`$ rolloutbatch ...`) and the
    inline ones piped to another tool (`rolloutbatch ... | head`); the operator's flags aside."""
    readme = (ROOT / "README.md").read_text()
    lines = re.findall(r"^\$ (rolloutbatch .*?)(?:\s+#.*)?$", readme, re.M)
    piped = [c for c in re.findall(r"`(rolloutbatch [^`]+)`", readme) if "|" in c]
    return [c.split("|")[0].rstrip(" \\") for c in lines + piped if not c.startswith("rolloutbatch operator")]


def test_every_command_readme_shows_is_accepted():
    """README (exit codes) said "Any command whose output's reader goes away (`rolloutbatch results
    NAME -o json | head`) stops quietly with 141": `results` has no -o (only --output/-O DIR,
    required), so that command was a usage error, exit 2, never a JSON document."""
    commands = _readme_commands()
    assert any("|" in line for line in re.findall(r"`(rolloutbatch [^`]+)`", (ROOT / "README.md").read_text()))
    refused = []
    for command in commands:
        try:
            build_parser(operator=False).parse_args(shlex.split(command)[1:])
        except SystemExit as exc:
            if exc.code:
                refused.append(command)
    assert refused == [], refused


# --- files ---------------------------------------------------------------------------------


def test_examples_load():
    for name in ("shipping-fix-parallel.yaml", "shipping-fix-serial.yaml", "per-episode-inputs.yaml"):
        objs = common.load_documents(str(ROOT / "examples" / name))
        assert len(objs) == 1 and objs[0]["kind"] == "RolloutBatch"


def test_multi_document_and_list(tmp_path):
    one = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
           "metadata": {"generateName": "a-"}, "spec": {"episodes": 1, "task": {"files": {"e.py": ""}}}}
    f = tmp_path / "b.yaml"
    f.write_text(yaml.safe_dump_all([one, None, {"kind": "List", "apiVersion": "v1", "items": [one, one]}]))
    assert len(common.load_documents(str(f))) == 3


@pytest.mark.parametrize("text, needle", [
    ("a: [1,\n", "not valid YAML (line"),
    ("", "no objects"),
    ("- 1\n- 2\n", "is a list, not a Kubernetes object"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "is v1 ConfigMap, not rl.agentruntime.io/v1alpha1 RolloutBatch"),
    ("apiVersion: rl.agentruntime.io/v1alpha1\nkind: RolloutBatch\nspec: {}\n", "no metadata.name"),
    ("apiVersion: rl.agentruntime.io/v1alpha1\nkind: RolloutBatch\nmetadata: {name: x}\n", "has no spec"),
])
def test_bad_files(tmp_path, text, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(common.CLIError, match=None) as info:
        common.load_documents(str(f))
    assert needle in str(info.value)


def test_bad_file_through_main_is_one_line(capsys, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kind: [")
    code, out, err = run(capsys, "submit", "-f", str(f))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "not valid YAML" in err
    code, _, err = run(capsys, "submit", "-f", str(tmp_path / "missing.yaml"))
    assert code == 1 and "no such file" in err


_DATED = """\
apiVersion: rl.agentruntime.io/v1alpha1
kind: RolloutBatch
metadata: {name: dated}
spec:
  episodes: 1
  task: {files: {episode.py: "print(1)"}}
"""


def test_yaml_dates_stay_the_strings_written(tmp_path):
    """kubectl reads an unquoted 2024-01-01 as the string "2024-01-01" (no JSON type is a date);
    PyYAML's safe loader made it a datetime.date, which no request can carry."""
    f = tmp_path / "b.yaml"
    f.write_text(_DATED + "  env: [{name: SINCE, value: 2024-01-01}]\n"
                 "  inputs: [{at: 2001-12-14 21:59:43.10 -5}, {day: !!timestamp 2024-1-1}]\n")
    (obj,) = common.load_documents(str(f))
    assert obj["spec"]["env"] == [{"name": "SINCE", "value": "2024-01-01"}]
    assert obj["spec"]["inputs"] == [{"at": "2001-12-14 21:59:43.10 -5"}, {"day": "2024-1-1"}]


@pytest.mark.parametrize("extra, where", [
    ("  inputs: [{temperature: .nan}]\n", "spec.inputs[0].temperature"),
    ("  inputs: [{t: [1, -.inf]}]\n", "spec.inputs[0].t[1]"),
    ("  env: [{name: X, value: !!binary aGk=}]\n", "spec.env[0].value"),
    ("  inputs: [!!set {a, b}]\n", "spec.inputs[0]"),
])
def test_a_value_json_cannot_carry_is_refused_naming_where(extra, where, tmp_path):
    f = tmp_path / "b.yaml"
    f.write_text(_DATED + extra)
    with pytest.raises(common.CLIError) as info:
        common.load_documents(str(f))
    assert str(info.value).startswith(f"{f}: object 1: {where}: "), info.value


def test_numbers_are_read_as_kubectls_reader_reads_them(tmp_path):
    """go-yaml (kubectl) reads no base-60 numbers (YAML 1.1 made `1:30` 90 and `1:30.5` 90.5)
    and reads `1e3` as a number (YAML 1.1: text)."""
    f = tmp_path / "b.yaml"
    f.write_text(_DATED + "  env: [{name: AT, value: 1:30}, {name: T, value: '1:30'}]\n"
                 "  inputs: [{a: 190:20:30.15, b: 1e3, c: 0x1F, d: 1_000, e: -.5E2, f: 12}]\n")
    (obj,) = common.load_documents(str(f))
    assert [e["value"] for e in obj["spec"]["env"]] == ["1:30", "1:30"]
    assert obj["spec"]["inputs"] == [{"a": "190:20:30.15", "b": 1000.0, "c": 31, "d": 1000, "e": -50.0, "f": 12}]


def test_a_document_that_contains_itself_or_explodes_through_aliases_is_one_error(tmp_path):
    """Aliases make a graph: one that contains itself walked until MemoryError, a "billion laughs"
    one (10**8 values from 9 lines) did not answer; kubectl's YAML reader refuses both, and so does
    this one, at once."""
    looped = tmp_path / "loop.yaml"
    looped.write_text("apiVersion: rl.agentruntime.io/v1alpha1\nkind: RolloutBatch\nmetadata: {name: x}\n"
                      "spec: &s\n  episodes: 1\n  loop: *s\n")
    with pytest.raises(common.CLIError, match="nested more than 256 deep"):
        common.load_documents(str(looped))
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("apiVersion: rl.agentruntime.io/v1alpha1\nkind: RolloutBatch\nmetadata: {name: x}\n"
                    "spec:\n  episodes: 1\n  bomb:\n" + "".join(f"    {line}\n" for line in lines))
    with pytest.raises(common.CLIError, match="excessive aliasing"):
        common.load_documents(str(bomb))


@pytest.mark.parametrize("extra", [
    "  env: [{name: SINCE, value: 2024-01-01}]\n",      # was json.dumps' TypeError in the transport
    "  inputs: [{released: 2024-01-01}]\n",             # was plan_inputs' SpecError, uncaught
    "  inputs: [{temperature: .nan}]\n",                # the same SpecError traceback
    "  inputs: [\"%s\"]\n" % ("x" * 1_100_000),          # one input larger than a ConfigMap: SpecError
])
def test_submit_a_yaml_date_is_one_line_not_a_traceback(extra, tmp_path, capsys, dead_kubeconfig):
    """README: errors are one line on stderr, exit 1 (here: the cluster is unreachable, or the
    file is refused before any call)."""
    (tmp_path / "b.yaml").write_text(_DATED + extra)
    code = main(["--kubeconfig", str(dead_kubeconfig), "submit", "-f", str(tmp_path / "b.yaml")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("rolloutbatch: error:") and err.count("\n") == 1, err


@pytest.mark.parametrize("extra, field", [
    ("  inputs: 3\n", "spec.inputs"),                                     # a count, not a list
    ("  inputs: [{a: 1}]\n  task: {files: [episode.py]}\n", "spec.task.files"),   # a list of names
    ("  inputs: [{a: 1}]\n  task: episode.py\n", "spec.task"),
])
def test_submit_of_a_mistyped_spec_is_one_line_naming_the_field(extra, field, tmp_path, capsys, dead_kubeconfig):
    (tmp_path / "b.yaml").write_text("apiVersion: rl.agentruntime.io/v1alpha1\nkind: RolloutBatch\n"
                                     "metadata: {name: b}\nspec:\n  episodes: 1\n" + extra)
    code = main(["--kubeconfig", str(dead_kubeconfig), "submit", "-f", str(tmp_path / "b.yaml")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"rolloutbatch: error: {field}: ") and err.count("\n") == 1, err


def test_results_refuses_an_existing_directory(capsys, tmp_path):
    code, _, err = run(capsys, "results", "x", "--output", str(tmp_path))
    assert code == 1 and "already exists" in err and err.count("\n") == 1


def test_namespace_mismatch(tmp_path):
    from rolloutbatch.cli.batches import _with_namespace

    obj = {"metadata": {"name": "x", "namespace": "a"}}
    with pytest.raises(common.CLIError, match="does not match -n b"):
        _with_namespace(obj, "b", "default", "f")
    assert _with_namespace({"metadata": {"name": "x"}}, None, "ctx", "f")["metadata"]["namespace"] == "ctx"
    assert _with_namespace({"metadata": {"name": "x", "namespace": "a"}}, None, "ctx", "f")["metadata"]["namespace"] == "a"


def _memory_client(monkeypatch):
    from rolloutbatch.cli import batches
    from rolloutbatch.sdk import Client
    from tests.support.memory_api import MemoryApi

    api = MemoryApi()
    for ns in ("ns", "other"):
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    monkeypatch.setattr(batches, "make_client", lambda args: Client(api=api, namespace=args.namespace or "ns"))
    return api


def test_submit_file_with_a_duplicate_name_creates_none(tmp_path, monkeypatch, capsys):
    """README: a file of several batches is checked whole first (server dry run), one refused
    object creates none. A dry run stores nothing, so two objects of one name both passed it, and
    the second was refused (AlreadyExists) after the first was created."""
    api = _memory_client(monkeypatch)
    twin = yaml.safe_load(_DATED.replace("dated", "twin"))
    other = {**twin, "metadata": {"name": "other"}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([twin, other]))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({**twin, "metadata": {"name": "twin", "namespace": "ns"}}))
    code, out, err = run(capsys, "submit", "-f", str(tmp_path / "a.yaml"), "-f", str(tmp_path / "b.yaml"))
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert f"{tmp_path / 'b.yaml'}: object 1: ns/twin is also {tmp_path / 'a.yaml'}: object 1" in err
    assert api.list_objects("RolloutBatch", "ns") == []


def test_submit_one_name_in_two_namespaces_or_two_generate_names_creates_both(tmp_path, monkeypatch, capsys):
    api = _memory_client(monkeypatch)
    twin = yaml.safe_load(_DATED.replace("dated", "twin"))
    pair = [twin, {**twin, "metadata": {"name": "twin", "namespace": "other"}},
            {**twin, "metadata": {"generateName": "gen-"}}, {**twin, "metadata": {"generateName": "gen-"}}]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all(pair))
    code, _, err = run(capsys, "submit", "-f", str(tmp_path / "a.yaml"))
    assert code == 0, err
    assert len(api.list_objects("RolloutBatch", "ns")) == 3 and len(api.list_objects("RolloutBatch", "other")) == 1


def _finish_on_next_read(api, name: str) -> None:
    """The operator ends ``name`` (Succeeded) just before the watch's first read."""
    def finish() -> None:
        api.merge_patch(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/ns/rolloutbatches/{name}/status",
                        {"status": {"phase": "Succeeded", "episodes": 1, "succeededEpisodes": 1, "rewardSum": 1.0,
                                    "progress": "1/1"}}, "the operator")
    api.meanwhile("GET", "RolloutBatch", finish)


@pytest.mark.parametrize("fmt, load", [("json", json.loads), ("yaml", yaml.safe_load)])
def test_submit_o_json_or_yaml_prints_one_document_a_list_of_several(tmp_path, monkeypatch, capsys, fmt, load):
    """As kubectl apply -o json|yaml: the object itself, or one v1 List of several (they were
    printed back to back: `jq`, json.loads and yaml.safe_load refused the output)."""
    _memory_client(monkeypatch)
    one = yaml.safe_load(_DATED)
    (tmp_path / "two.yaml").write_text(yaml.safe_dump_all([{**one, "metadata": {"name": n}} for n in ("a", "b")]))
    (tmp_path / "one.yaml").write_text(yaml.safe_dump({**one, "metadata": {"name": "c"}}))
    code, out, err = run(capsys, "submit", "-f", str(tmp_path / "two.yaml"), "-o", fmt)
    assert code == 0, err
    listed = load(out)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert [o["metadata"]["name"] for o in listed["items"]] == ["a", "b"] and listed["items"][0]["metadata"]["uid"]
    code, out, err = run(capsys, "submit", "-f", str(tmp_path / "one.yaml"), "-o", fmt)
    assert code == 0 and load(out)["metadata"]["name"] == "c", err


def test_submit_o_json_of_several_that_fails_midway_prints_those_created(tmp_path, monkeypatch, capsys):
    from rolloutbatch.kube.errors import Invalid

    api = _memory_client(monkeypatch)
    one = yaml.safe_load(_DATED)
    (tmp_path / "b.yaml").write_text(yaml.safe_dump_all([{**one, "metadata": {"name": n}} for n in ("a", "b")]))
    posts: list[str] = []
    api.fail("POST", "RolloutBatch", Invalid("the API refused b", status=422),
             when=lambda path: posts.append(path) or len(posts) == 4)   # 2 dry runs, a, then b
    code, out, err = run(capsys, "submit", "-f", str(tmp_path / "b.yaml"), "-o", "json")
    assert code == 1 and "the API refused b" in err
    assert [o["metadata"]["name"] for o in json.loads(out)["items"]] == ["a"]


@pytest.mark.parametrize("fmt, load", [("json", json.loads), ("yaml", yaml.safe_load),
                                       ("name", lambda out: out.splitlines())])
def test_submit_o_with_watch_keeps_stdout_the_objects_and_says_the_rest_on_stderr(tmp_path, monkeypatch, capsys,
                                                                                   fmt, load):
    api = _memory_client(monkeypatch)
    (tmp_path / "b.yaml").write_text(_DATED)
    _finish_on_next_read(api, "dated")
    code, out, err = run(capsys, "submit", "-f", str(tmp_path / "b.yaml"), "-o", fmt, "--watch", "--timeout", "5")
    assert code == 0, err
    assert load(out) == ["rolloutbatch.rl.agentruntime.io/dated"] if fmt == "name" else \
        load(out)["metadata"]["name"] == "dated"
    assert "dated: Succeeded 1/1" in err and "successful_episodes" in err
