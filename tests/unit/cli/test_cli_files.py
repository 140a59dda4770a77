"""How `submit -f` reads a file: JSON as a JSON reader reads it, YAML otherwise, as kubectl does;
what neither may carry (a key twice, a lone UTF-16 half, a name that is no string) is one line."""
from __future__ import annotations

import json
import re

import pytest

from rolloutbatch.cli import batches, common
from rolloutbatch.sdk import Client
from tests.support.memory_api import MemoryApi
from tests.unit.cli.cli_runner import run

API_VERSION = "rl.agentruntime.io/v1alpha1"
EMOJI = "print('done \U0001F600')"


def _batch(name: str, **spec) -> dict:
    return {"apiVersion": API_VERSION, "kind": "RolloutBatch", "metadata": {"name": name},
            "spec": {"episodes": 2, "image": "python:3.12", "command": ["python", "/task/a.py"],
                     "task": {"files": {"a.py": EMOJI}}, **spec}}


@pytest.fixture
def api(monkeypatch) -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})

    def client(args):
        args._server = "https://k8s.example:6443"
        return Client(api=api, namespace=getattr(args, "namespace", None) or "team")

    monkeypatch.setattr(batches, "make_client", client)
    return api


def _load(tmp_path, text: str, name: str = "b.json") -> list[dict]:
    f = tmp_path / name
    f.write_text(text)
    return common.load_documents(str(f))


def _refused(tmp_path, text: str, name: str = "b.json") -> str:
    with pytest.raises(common.CLIError) as info:
        _load(tmp_path, text, name)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- JSON --------------------------------------------------------------------------------------

def test_a_json_file_indented_with_tabs_is_read(tmp_path):
    """`submit -f` takes a "YAML or JSON file" (--help). JSON indented with tabs (Go's
    MarshalIndent, `python -m json.tool --tab`, many editors) is valid JSON, and kubectl reads it;
    read as YAML 1.1, which refuses a tab, it was exit 1 "not valid YAML"."""
    assert _load(tmp_path, json.dumps(_batch("tabbed"), indent="\t")) == [_batch("tabbed")]


def test_a_json_files_escaped_character_is_that_character(tmp_path):
    """Python's json.dump (ensure_ascii, its default) writes U+1F600 as the surrogate pair
    `\\ud83d\\ude00`, which every JSON reader (kubectl's too) reads as the one character. PyYAML
    read it as two lone surrogates: the file's text was not what the batch got."""
    assert _load(tmp_path, json.dumps(_batch("emoji")))[0]["spec"]["task"]["files"]["a.py"] == EMOJI


def test_submit_of_a_json_file_with_inputs_and_an_emoji_is_not_a_traceback(api, tmp_path, capsys):
    """The lone surrogates above reached sdk.build.by_reference, whose `.encode()` raised
    UnicodeEncodeError (a ValueError that cli.common.guarded lets through): a traceback."""
    f = tmp_path / "batch.json"
    f.write_text(json.dumps(_batch("with-inputs", inputs=[{"q": 1}, {"q": 2}])))
    code, out, err = run(capsys, "submit", "-f", str(f))
    assert code == 0, (out, err)
    assert api.get_object("RolloutBatch", "with-inputs", "team")["spec"]["task"]["files"]["a.py"] == EMOJI


def test_a_json_file_of_several_objects_is_read_as_kubectl_reads_it(tmp_path):
    """kubectl reads JSON values one after another (`{...}{...}`), and a List."""
    a, b = _batch("a"), _batch("b")
    text = json.dumps(a) + "\n" + json.dumps(b, indent=2) + "\n" + json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [a]}) + "\nnull\n"
    assert _load(tmp_path, text) == [a, b, a]


@pytest.mark.parametrize("text, said", [
    ('{"kind": "RolloutBatch", "kind": "RolloutBatch"}', "not valid JSON: the key 'kind' is in one object twice"),
    ('{"a": NaN}', "not valid JSON: NaN is not JSON"),
    ('{"a": 1e999}', "not valid JSON: 1e999 is past a double's range"),
    # after two JSON values the file is JSON: an error is said as one, never read as YAML
    ('{"a": 1} {"b": 2}\n{"c": [1 2]}', "not valid JSON (line 2): Expecting ','"),
    # what YAML cannot read either: JSON's error is said
    ('{"a": 1,\n "b": [1 2', "not valid JSON (line 2)"),
    ('[' * 100_000 + ']' * 100_000, "nested too deep"),
])
def test_what_json_cannot_carry_or_is_no_json_is_one_line(tmp_path, text, said):
    assert said in _refused(tmp_path, text)


_DOC = ('{"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", '
        '"metadata": {"name": "%s"}, "spec": {"episodes": 1}}')


@pytest.mark.parametrize("text", [
    (_DOC % "a") + "\n---\n" + (_DOC % "b") + "\n",   # `kubectl get -o json` outputs joined by ---
    (_DOC % "a") + "\n---\n",
    (_DOC % "a") + "\n# written by hand\n",
    '{"apiVersion": rl.agentruntime.io/v1alpha1, "kind": RolloutBatch, "metadata": {"name": a}, '
    '"spec": {"episodes": 1}}\n',                         # flow YAML: quoted keys, plain values
    (_DOC % "a")[:-2] + ",}}\n",                          # flow YAML: a trailing comma
], ids=["json-then-document", "json-then-separator", "json-then-comment", "flow-plain-values", "trailing-comma"])
def test_a_file_json_begins_and_yaml_goes_on_is_read_as_kubectl_reads_it(tmp_path, text):
    """kubectl (apimachinery's YAMLOrJSONDecoder) reads on as YAML from where JSON stopped, until
    two JSON values were read; so did this CLI, before it read JSON as JSON."""
    objects = _load(tmp_path, text)
    assert objects and all(o["kind"] == "RolloutBatch" for o in objects)
    assert objects[0]["metadata"]["name"] == "a" and objects[0]["spec"] == {"episodes": 1}


def test_a_yaml_flow_mapping_is_still_yaml(tmp_path):
    """Text starting with `{` whose first key is no JSON is a YAML flow mapping, as it was read before."""
    (obj,) = _load(tmp_path, "{apiVersion: rl.agentruntime.io/v1alpha1, kind: RolloutBatch,\n"
                             " metadata: {name: flow}, spec: {episodes: 1, task: {files: {a.py: x}}}}\n", "b.yaml")
    assert obj["metadata"] == {"name": "flow"} and obj["spec"]["episodes"] == 1


# --- what neither format may carry -------------------------------------------------------------

_HEAD = f"apiVersion: {API_VERSION}\nkind: RolloutBatch\nmetadata: {{name: b}}\n"


@pytest.mark.parametrize("text", [
    _HEAD + "spec: {episodes: 1, episodes: 2}\n",
    _HEAD + "spec:\n  episodes: 1\n  task: {files: {a.py: x}}\n  inputs: [{1: a, true: b}]\n",
])
def test_a_yaml_key_given_twice_is_refused_not_one_of_them_kept(tmp_path, text):
    """PyYAML kept the last of two keys silently; the JSON reader and kubectl's strict decoding
    refuse them (1 and true: one key to a Python dict)."""
    assert re.search(r"not valid YAML \(line [457]\): the key .* is in one mapping twice", _refused(tmp_path, text,
                                                                                                 "b.yaml"))


def test_a_yaml_merge_may_still_be_overridden(tmp_path):
    (obj,) = _load(tmp_path, _HEAD + "spec:\n  episodes: 1\n  task: {files: {a.py: x}}\n"
                             "  inputs: [&base {a: 1, b: 2}, {<<: *base, a: 3}]\n", "b.yaml")
    assert obj["spec"]["inputs"] == [{"a": 1, "b": 2}, {"a": 3, "b": 2}]


@pytest.mark.parametrize("text, name, where", [
    (_HEAD + 'spec: {episodes: 1, task: {files: {a.py: "\\ud83d\\ude00"}}}\n', "b.yaml",
     r"spec\.task\.files\.a\.py: half of a UTF-16 surrogate pair, which is no character \('\\ud83d'\)"),
    (_HEAD + 'spec: {episodes: 1, task: {files: {"\\udc00.py": x}}}\n', "b.yaml",
     r"spec\.task\.files: the key '\\udc00\.py': half of a UTF-16 surrogate pair"),
    (json.dumps(_batch("x", env=[{"name": "A", "value": "\ud800"}])), "b.json",
     r"spec\.env\[0\]\.value: half of a UTF-16 surrogate pair"),
])
def test_a_lone_surrogate_is_refused_naming_where(tmp_path, text, name, where):
    """YAML reads `\\ud83d\\ude00` as two code points, each half of a pair, which no UTF-8 request
    can carry (a traceback in the SDK before); JSON may write one half alone."""
    message = _refused(tmp_path, text, name)
    assert re.search(rf"^{re.escape(str(tmp_path / name))}: object 1: {where}", message), message


@pytest.mark.parametrize("metadata", ["{name: [a]}", "{name: {a: 1}}", "{name: a, namespace: [x]}",
                                      "{generateName: 7}"])
@pytest.mark.parametrize("pool", [[], ["--pool", "warm"]])
def test_a_metadata_name_that_is_no_string_is_one_line(api, tmp_path, capsys, metadata, pool):
    """README: "Errors are one line on stderr". A metadata.name (or namespace) that was a list or
    a map passed check_object (truthy) and crashed batches._refuse_twins or, with --pool, the
    look-up of the pool by namespace (unhashable type)."""
    f = tmp_path / "b.yaml"
    f.write_text(f"apiVersion: {API_VERSION}\nkind: RolloutBatch\nmetadata: {metadata}\n"
                 "spec: {episodes: 1, task: {files: {a.py: x}}}\n")
    try:
        code, out, err = run(capsys, "submit", "-f", str(f), *pool)
    except TypeError as exc:   # the traceback a user saw
        pytest.fail(f"traceback: {exc!r}")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert re.search(r"object 1: metadata\.(name|namespace|generateName) must be a string, got (list|dict|int)$",
                     err.strip()), err
