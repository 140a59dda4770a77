"""`rolloutbatch submit -f batch.yaml --pool warm` of a manifest that runs on that pool with
`poolRef.whenEmpty: Wait` keeps the Wait."""
from __future__ import annotations

import yaml

from rolloutbatch import GROUP, VERSION
from rolloutbatch.cli import batches
from rolloutbatch.sdk import Client
from tests.support.memory_api import MemoryApi
from tests.unit.cli.cli_runner import run

NS = "team"


def test_submit_pool_keeps_the_manifests_when_empty(capsys, monkeypatch, tmp_path):
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    monkeypatch.setattr(batches, "make_client", lambda args: Client(api=api, namespace=args.namespace or NS))
    batch = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RolloutBatch", "metadata": {"name": "waits"},
             "spec": {"episodes": 2, "command": ["python", "/task/episode.py"],
                      "poolRef": {"name": "warm", "whenEmpty": "Wait"}}}
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(batch))
    code, _, err = run(capsys, "submit", "-f", str(path), "--pool", "warm")
    assert code == 0, err
    assert api.get_object("RolloutBatch", "waits", NS)["spec"]["poolRef"] == {"name": "warm", "whenEmpty": "Wait"}
