"""handle.stop() and `rolloutbatch stop`, without a cluster: what is patched, and when nothing is."""
from __future__ import annotations

import asyncio

import pytest

from rolloutbatch.cli.main import build_parser
from rolloutbatch.core import vocabulary as v
from rolloutbatch.sdk import ops
from rolloutbatch.sdk.aio import run as run_async
from rolloutbatch.sdk.client import run

BATCH = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
         "metadata": {"name": "b", "namespace": "ns", "uid": "u-1"}, "spec": {"episodes": 2}}


class Api:
    def __init__(self, live: dict) -> None:
        self.live, self.patches = live, []

    def get(self, path, what, **_):
        return self.live

    def merge_patch(self, path, patch, what):
        self.patches.append((path, patch))
        return {**self.live, "spec": {**self.live["spec"], **patch["spec"]}}


class AsyncApi(Api):
    async def get(self, path, what, **_):
        return Api.get(self, path, what)

    async def merge_patch(self, path, patch, what):
        return Api.merge_patch(self, path, patch, what)


def test_stop_patches_spec_stop_under_the_uid():
    api = Api({**BATCH, "status": {"phase": v.RUNNING}})
    obj = run(api, ops.stop(BATCH))
    assert obj["spec"]["stop"] is True
    assert api.patches == [("/apis/rl.agentruntime.io/v1alpha1/namespaces/ns/rolloutbatches/b",
                            {"metadata": {"uid": "u-1"}, "spec": {"stop": True}})]


def test_the_async_client_stops_the_same_way():
    api = AsyncApi({**BATCH, "status": {"phase": v.PROVISIONING}})
    assert asyncio.run(run_async(api, ops.stop(BATCH)))["spec"]["stop"] is True and len(api.patches) == 1


@pytest.mark.parametrize("live", [
    {**BATCH, "status": {"phase": v.SUCCEEDED}},              # ended: its verdict stands, no generation bump
    {**BATCH, "spec": {"episodes": 2, "stop": True}, "status": {"phase": v.RUNNING}},   # asked already
])
def test_nothing_to_stop_is_not_patched(live):
    api = Api(live)
    assert run(api, ops.stop(BATCH)) == live and api.patches == []


def test_a_namesake_is_never_stopped():
    api = Api({**BATCH, "metadata": {**BATCH["metadata"], "uid": "u-2"}, "status": {"phase": v.RUNNING}})
    with pytest.raises(ops.NotFound):
        run(api, ops.stop(BATCH))
    assert api.patches == []


def test_the_cli_verbs():
    parser = build_parser(operator=False)
    args = parser.parse_args(["stop", "a", "b", "--wait", "--timeout", "60"])
    assert (args.names, args.wait, args.timeout) == (["a", "b"], True, 60.0)
    assert parser.parse_args(["cleanup", "a", "--keep-results"]).keep_results
    assert not parser.parse_args(["cleanup", "a"]).keep_results
    assert parser.parse_args(["results", "a", "-O", "d", "--retained"]).retained
