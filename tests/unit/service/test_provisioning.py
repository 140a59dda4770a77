"""service.provisioning: a submitter who holds rights on RolloutBatches only gets nothing of the
cluster's own through the operator (docs/design.md §8.1), and is refused before anything exists."""
import asyncio

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import provisioning
from tests.support.memory_api import MemoryApi
from tests.unit.core.factories import MINIMAL, REF, inputs_configmap


def cluster(*objects: dict) -> MemoryApi:
    """The batch's namespace and ``objects`` (PriorityClasses, ConfigMaps of the batch's namespace)."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REF.namespace}})
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": REF.namespace}}
        api.put(obj)
    api.calls.clear()
    return api


def writes(api: MemoryApi) -> list[tuple[str, str]]:
    return [(method, path) for method, path in api.calls if method != "GET"]


def _pc(name, value):
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def _check(api, spec):
    return asyncio.run(provisioning.check(Storage(api), REF, spec, {}))


@pytest.mark.parametrize("value", [1_000_000_001, 2_000_000_000])
def test_a_priority_class_above_the_user_range_stalls_before_the_job_is_even_dry_run(value):
    api = cluster(_pc("critical", value))
    with pytest.raises(Stalled) as err:
        _check(api, parse_spec({**MINIMAL, "podTemplate": {"priorityClassName": "critical"}}))
    assert err.value.reason == "PriorityClassNotAllowed" and "critical" in err.value.message
    assert api.calls == [("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/critical")]


def test_a_missing_priority_class_stalls_and_a_user_one_passes():
    with pytest.raises(Stalled) as err:
        _check(cluster(), parse_spec({**MINIMAL, "podTemplate": {"priorityClassName": "nope"}}))
    assert err.value.reason == "PriorityClassNotFound"
    api = cluster(_pc("rl-high", 1_000_000_000))
    before = api.list_objects("Job")
    _check(api, parse_spec({**MINIMAL, "podTemplate": {"priorityClassName": "rl-high"}}))
    assert ("POST", f"/apis/batch/v1/namespaces/{REF.namespace}/jobs") in api.calls   # the dry run
    assert api.list_objects("Job") == before == []                                   # stored nothing


def _create(api, spec):
    storage = Storage(api)
    return asyncio.run(provisioning.create(storage, lambda obj: storage.create_or_adopt(obj, REF.uid), REF, spec,
                                           {}, None))


def test_inputs_from_a_configmap_not_opted_in_create_nothing_and_show_nothing():
    foreign = inputs_configmap({"input-0.json": '{"api_key": "s3cr3t"}'}, labels={}, name="app-config")
    api = cluster(foreign)
    spec = parse_spec({**MINIMAL, "episodes": 1, "inputsFrom": {"configMaps": ["app-config"], "count": 1}})
    with pytest.raises(Stalled) as err:
        _create(api, spec)
    assert err.value.reason == "InputsNotFound" and "app-config" in err.value.message
    assert LABEL_INPUTS in err.value.message
    assert "input-0" not in err.value.message and "s3cr3t" not in err.value.message
    assert writes(api) == [] and [ns["metadata"]["name"] for ns in api.list_objects("Namespace")] == [REF.namespace]


def test_inputs_from_an_opted_in_configmap_are_copied():
    mine = inputs_configmap({"input-0.json": '{"a": 1}'}, labels={LABEL_INPUTS: INPUTS_OPT_IN}, name="mine")
    api = cluster(mine)
    spec = parse_spec({**MINIMAL, "episodes": 1, "inputsFrom": {"configMaps": ["mine"], "count": 1}})
    job = _create(api, spec)
    namespace = naming.child_namespace(REF, spec)
    assert job["metadata"]["name"] == "rb-7d9f22ce63" and api.get_object("Job", "rb-7d9f22ce63", namespace)
    copies = [cm for cm in api.list_objects("ConfigMap", namespace) if cm["metadata"]["name"].endswith("-inputs-0")]
    assert len(copies) == 1 and '{"a": 1}' in str(copies[0].get("data") or copies[0].get("binaryData"))


def test_a_second_provisioning_adopts_what_the_first_created():
    # a restarted operator runs it again: every child is found, labelled as the batch's, and kept
    api = cluster()
    spec = parse_spec(MINIMAL)
    first = _create(api, spec)
    again = _create(api, spec)
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
