"""A batch the operator has not written a status for yet, as the CLI shows it."""
from __future__ import annotations

import pathlib

import pytest

from rolloutbatch.cli import batches
from rolloutbatch.sdk import Client, Task, build_batch
from tests.support.memory_api import MemoryApi
from tests.unit.cli.cli_runner import run

ROOT = pathlib.Path(__file__).resolve().parents[3]
DESIGN = (ROOT / "docs" / "design.md").read_text()
NS = "rl"


@pytest.fixture
def api(monkeypatch) -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    monkeypatch.setattr(batches, "make_client", lambda args: Client(api=api, namespace=args.namespace or NS))
    task = Task(files={"episode.py": "x"}, command=["python", "/task/episode.py"])
    Client(api=api, namespace=NS).submit(build_batch("fresh", task, episodes=2))   # no status yet
    return api


@pytest.mark.parametrize("argv", [["list"], ["get", "fresh"], ["list", "-o", "wide"]])
def test_a_batch_without_a_status_is_shown_as_pending_by_the_cli(capsys, api, argv):
    """docs/design.md §3 "Status": "`Pending` stays in the schema's enum, but the operator never
    writes it: a batch without a status is shown as `Pending` by the CLI and SDK." `rolloutbatch
    list`/`get` show an empty STATUS cell instead (the column is status.phase, read raw)."""
    assert "a batch without a status is shown as `Pending` by the CLI" in DESIGN
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    header, row = out.splitlines()[:2]
    status = row[header.index("STATUS"):header.index("PROGRESS")].strip()
    assert status == "Pending", f"STATUS of a batch without a status: {status!r}\n{out}"
