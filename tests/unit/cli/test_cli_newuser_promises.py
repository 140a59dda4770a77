"""The CLI as a new user reads it: promises of README "The `rolloutbatch` command" and the help texts."""
from __future__ import annotations

import pytest

from tests.unit.cli.cli_runner import run

MANIFEST = """apiVersion: rl.agentruntime.io/v1alpha1
kind: RolloutBatch
metadata: {{name: tagged}}
spec:
  episodes: 1
  task: {{files: {{episode.py: "print(1)"}}}}
  env: [{{name: SEED, value: {value}}}]
"""


@pytest.mark.parametrize("value", ["!!int abc", "!!float abc", "!!bool maybe", "!!int 0x_", "!!int ''"])
def test_submit_a_yaml_tag_that_does_not_parse_is_one_line_error_not_a_traceback(capsys, tmp_path, value):
    """README: "Errors are one line on stderr (bad arguments exit 2, everything else 1): ... a file
    that is not YAML". An explicit YAML tag whose text is no such value (`!!int abc`) escapes the
    loader as a ValueError/KeyError/IndexError, and the user gets a Python traceback."""
    path = tmp_path / "batch.yaml"
    path.write_text(MANIFEST.format(value=value))
    try:
        code, out, err = run(capsys, "--kubeconfig", str(tmp_path / "none"), "submit", "-f", str(path))
    except Exception as exc:   # noqa: BLE001 - what the user sees as a traceback
        pytest.fail(f"`rolloutbatch submit -f` of `value: {value}` raised {type(exc).__name__}: {exc}")
    assert code == 1 and err.startswith("rolloutbatch: error:") and len(err.splitlines()) == 1, (code, err)
    assert str(path) in err


# --- submit -f of several batches with large inputs -------------------------------------------
import json  # noqa: E402

from rolloutbatch.cli import batches  # noqa: E402
from rolloutbatch.kube.errors import TooLarge  # noqa: E402
from rolloutbatch.sdk import Client  # noqa: E402
from tests.support.memory_api import MemoryApi  # noqa: E402

MAX_REQUEST_BYTES = 3 * 1024 * 1024   # kube-apiserver's limit of a request body (413 past it)


class SizedApi(MemoryApi):
    """The API server's 413 for a request body past 3 MiB, dry run or not."""

    def create(self, path, body, what, *, dry_run=False):
        if len(json.dumps(body)) > MAX_REQUEST_BYTES:
            raise TooLarge(f"{what}: the server responded with 413 Request Entity Too Large", status=413)
        return super().create(path, body, what, dry_run=dry_run)


def _big_batch(name: str) -> dict:
    inputs = [{"problem": g, "text": "x" * 8000} for g in range(512)]   # ~4 MiB of inputs
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": name},
            "spec": {"episodes": 512, "task": {"files": {"episode.py": "print(1)"}}, "inputs": inputs}}


def test_submit_a_file_of_two_big_input_batches_creates_both_as_one_would_be(capsys, tmp_path, monkeypatch):
    """README: `submit -f` reads big batches (inputs past 128 KiB go into ConfigMaps: "create big
    batches with ... `rolloutbatch submit -f`"), and "a file of several batches is checked whole
    first (server dry run)". The dry run sends each object as written, its megabytes of inputs
    inline, so the API server's 413 refuses a file of two batches that `submit -f` of each one
    alone creates."""
    api = SizedApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rl"}})
    monkeypatch.setattr(batches, "make_client", lambda args: Client(api=api, namespace="rl"))
    one, both = tmp_path / "one.json", tmp_path / "both.json"
    one.write_text(json.dumps(_big_batch("alone")))
    code, out, err = run(capsys, "submit", "-f", str(one))
    assert code == 0, err          # one big batch alone: its inputs go into ConfigMaps
    both.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [_big_batch("first"), _big_batch("second")]}))
    code, out, err = run(capsys, "submit", "-f", str(both))
    assert code == 0, f"two such batches in one file: exit {code}: {err}"
    assert {o["metadata"]["name"] for o in api.list_objects("RolloutBatch", "rl")} == {"alone", "first", "second"}


# --- AGE as kubectl prints it ------------------------------------------------------------------
import datetime  # noqa: E402

from rolloutbatch.cli import render  # noqa: E402


@pytest.mark.parametrize("days, text", [(800, "2y70d"), (730, "2y"), (3000, "8y")])
def test_age_of_an_old_batch_is_kubectls(days, text):
    """render.age is "kubectl's short human duration" (the AGE column of `list`/`get`, as `kubectl
    get rb` prints it: apimachinery's duration.HumanDuration). Past two years kubectl says years
    (`2y70d`, `8y`); the CLI keeps counting days (`800d`)."""
    now = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    then = (now - datetime.timedelta(days=days)).isoformat().replace("+00:00", "Z")
    assert render.age(then, now) == text


def test_age_ahead_of_the_clock_is_kubectls():
    """kubectl prints `<invalid>` for a time more than a second ahead, `0s` within it."""
    now = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    ahead = lambda s: (now + datetime.timedelta(seconds=s)).isoformat().replace("+00:00", "Z")  # noqa: E731
    assert (render.age(ahead(1), now), render.age(ahead(5), now)) == ("0s", "<invalid>")
