"""A pool's spec.runtimeClassName is read by the batch's rule (core.spec_fields.checked_runtime_class):
the CRD's pattern (``^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$``) admits names no RuntimeClass can have
(``a..b``), and such a pool stalls InvalidSpec before its namespace is made."""
from __future__ import annotations

import pytest

from rolloutbatch import sdk
from rolloutbatch.core import pool_spec
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import parse_spec
from tests.unit.service.memory_pool import POOL_NS, daemon_until_its_status, live, make_pool, reconciler

NOT_A_NAME = ["a..b", "a.-b"]


@pytest.mark.parametrize("name", NOT_A_NAME)
def test_the_batch_refuses_it(name) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"episodes": 1, "task": {"files": {"e.py": "x"}}, "command": ["x"], "runtimeClassName": name})
    assert err.value.field == "spec.runtimeClassName"


@pytest.mark.parametrize("name", NOT_A_NAME)
def test_the_pool_refuses_it_as_the_batch_does(name) -> None:
    with pytest.raises(SpecError) as err:
        pool_spec.parse_pool_spec({"size": 1, "task": {"files": {"e.py": "x"}}, "runtimeClassName": name})
    assert err.value.field == "spec.runtimeClassName"


def test_build_pool_refuses_it_before_any_call() -> None:
    with pytest.raises(ValueError):
        sdk.build_pool("warm", 1, task_files={"e.py": "x"}, runtime_class_name="a..b")


def test_such_a_pool_stalls_invalid_spec_before_its_namespace_is_made(api) -> None:
    make_pool(api, 2, runtimeClassName="a..b")
    daemon_until_its_status(reconciler(api))   # its first round
    stalled = {c["type"]: c for c in live(api)["status"]["conditions"]}["Stalled"]
    assert stalled["status"] == "True"
    assert stalled["reason"] == v.PoolReason.INVALID_SPEC, stalled
    assert not [ns for ns in api.list_objects("Namespace") if ns["metadata"]["name"] == POOL_NS]
