"""build_sessions / open_sessions: bad input refused with a clear error before any call, and the
spec fields its docstring promises taken ("spec: further spec fields (build_batch's)")."""
from __future__ import annotations

import pytest

from rolloutbatch import sdk
from rolloutbatch.sdk.sessions import build_sessions
from tests.support.memory_api import MemoryApi

NS = "rl"
VERIFIER = {"files": {"verify.sh": "exit 0"}, "command": ["sh", "/verifier/verify.sh"]}


def test_build_sessions_takes_parallelism_a_spec_field_of_build_batch():
    """parallelism is a spec field (build_batch's): a trainer bounding how many sandboxes hold at once
    passes it through open_sessions(**options). It crashed: TypeError 'got multiple values for
    argument parallelism' (build_sessions passes parallelism=None positionally)."""
    batch = build_sessions("graded", 4, verifier=VERIFIER, parallelism=2)
    assert batch["spec"]["parallelism"] == 2


def test_open_sessions_with_parallelism_submits_the_batch():
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    client = sdk.Client(api=api, namespace=NS)
    sessions = client.open_sessions("graded", 4, verifier=VERIFIER, parallelism=2)
    assert api.get_object("RolloutBatch", sessions.name, NS)["spec"]["parallelism"] == 2


@pytest.mark.parametrize("verifier", [5, True, "verify.sh"])
def test_a_verifier_that_is_no_mapping_is_a_clear_value_error(verifier):
    """open_sessions promises ValueError (a SpecError naming the field) before any call; a
    verifier that is not a mapping gave a bare TypeError from dict() ('int' object is not
    iterable) or a ValueError about a 'dictionary update sequence'."""
    with pytest.raises(ValueError, match="verifier"):
        build_sessions("graded", 2, verifier=verifier)


def test_a_verifier_given_as_a_list_is_not_silently_read_as_empty():
    """verifier=[] became {} (dict([])): a verifier of defaults, not what the caller wrote."""
    with pytest.raises(ValueError, match="verifier"):
        build_sessions("graded", 2, verifier=[])


def test_a_task_is_the_pools_and_refused_by_name():
    """task= went to build_batch twice (a TypeError): the pool's task runs, as for any pooled batch."""
    with pytest.raises(ValueError, match="spec.task"):
        build_sessions("graded", 2, verifier=VERIFIER, task={"files": {"a": "b"}})
