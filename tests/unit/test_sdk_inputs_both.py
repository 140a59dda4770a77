"""spec.inputs and spec.inputsFrom together, as the SDK reads them: refused whatever the inputs' size."""
from __future__ import annotations

import pytest

from rolloutbatch.sdk import Client, Task, build_batch
from tests.support.memory_api import MemoryApi

TASK = Task(files={"episode.py": "x"}, command=["python", "/task/episode.py"])
THEIRS = {"configMaps": ["my-inputs"], "count": 4}


def _api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rl"}})
    return api


@pytest.mark.parametrize("size", [10, 40_000], ids=["small", "large"])
def test_inputs_and_inputs_from_together_are_refused_whatever_the_inputs_size(size):
    """CRD rule (and parse_spec): "give inputs inline (spec.inputs) or by reference
    (spec.inputsFrom), not both"; README: build_batch raises ValueError "for what the operator
    would refuse, before any network call". With small inputs it is refused; with inputs past
    INLINE_INPUTS_MAX, build_batch accepts it and submit silently replaces the user's own
    spec.inputsFrom (their ConfigMaps) by its own."""
    inputs = [{"p": i, "text": "x" * size} for i in range(4)]
    with pytest.raises(ValueError, match="not both"):
        build_batch("both", TASK, episodes=4, inputs=inputs, inputs_from=THEIRS)


def test_submit_of_an_object_with_large_inputs_and_inputs_from_is_refused_not_rewritten():
    """The same object submitted as written (the CLI's `submit -f`, or a dict): the API would
    refuse both (CEL rule `!has(self.inputsFrom) || !has(self.inputs) || size(self.inputs) == 0`),
    but Client.submit drops the user's spec.inputsFrom without a word."""
    api = _api()
    body = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": "both"},
            "spec": {"episodes": 4, "task": {"files": {"episode.py": "x"}},
                     "inputs": [{"p": i, "text": "x" * 40_000} for i in range(4)], "inputsFrom": THEIRS}}
    try:
        handle = Client(api=api, namespace="rl").submit(body)
    except ValueError:
        return
    except Exception as exc:   # noqa: BLE001 - an API refusal is fine too
        if "not both" in str(exc):
            return
        raise
    assert handle.obj["spec"].get("inputsFrom") == THEIRS, (
        f"submitted with spec.inputsFrom {handle.obj['spec'].get('inputsFrom')}, not the user's {THEIRS}")
