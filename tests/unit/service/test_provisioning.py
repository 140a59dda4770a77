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


# -- the namespace's ResourceQuotas (docs/design.md §8.1): the admin's bound on what it may run ----

def _team_bound(hard: dict, used: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-bound", "namespace": REF.namespace},
            "spec": {"hard": hard, **spec}, "status": {"hard": hard, "used": used or {}}}


def _cpus(isolation: str, episodes: int = 100, cpu: str = "8", **extra) -> dict:
    return {**MINIMAL, "episodes": episodes, "isolation": {"namespace": isolation},
            "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}, **extra}


def test_a_shared_batch_needs_its_namespace_quota_to_hold_one_of_its_pods():
    with pytest.raises(Stalled) as err:
        _check(cluster(_team_bound({"requests.cpu": "1", "pods": "2"}, {"requests.cpu": "0", "pods": "0"})),
               parse_spec(_cpus("Shared")))
    assert err.value.reason == "QuotaExceeded"


def test_a_dedicated_batch_is_held_to_its_namespace_quota_before_anything_exists():
    """Its pods run in rb-<uid10>, where no quota of the namespace reaches: 100 pods of 8 CPU for a
    namespace bounded to 1 CPU and 2 pods stall, as a Shared batch's would."""
    api = cluster(_team_bound({"requests.cpu": "1", "pods": "2"}, {"requests.cpu": "0", "pods": "0"}))
    with pytest.raises(Stalled) as err:
        _check(api, parse_spec(_cpus("Dedicated")))
    assert err.value.reason == "QuotaExceeded" and "team-bound" in err.value.message
    assert api.list_objects("Job") == [] and api.list_objects("Namespace") == [api.get_object("Namespace", REF.namespace)]
    # everything it may hold at once must fit, not one pod: parallelism 10 (+2 terminating) of 1 CPU in 11 free
    with pytest.raises(Stalled) as err:
        _check(cluster(_team_bound({"requests.cpu": "12"}, {"requests.cpu": "1"})),
               parse_spec(_cpus("Dedicated", 10, "1")))
    assert "12 pods" in err.value.message and "leaves 11 of requests.cpu" in err.value.message


def test_a_dedicated_batch_that_fits_carries_the_bound_into_its_sandbox():
    """The sandbox gets a ResourceQuota of what was checked (the batch's own parallelism + 2
    pods), so retries or pods made later cannot run past what the namespace left."""
    api = cluster(_team_bound({"cpu": "20"}, {"cpu": "2"}))
    spec, overhead = _check(api, parse_spec(_cpus("Dedicated", 10, "1")))
    assert spec.sandbox_quota
    _create(api, spec)
    quota = api.get_object("ResourceQuota", "episodes", naming.sandbox_namespace(REF))
    assert quota["spec"]["hard"] == {"pods": "12", "requests.cpu": "12", "limits.cpu": "12"}
    # no quota in the namespace: nothing to carry, and the sandbox's own stays the submitter's choice
    spec, _ = _check(cluster(), parse_spec(_cpus("Dedicated", 10, "1")))
    assert not spec.sandbox_quota


def test_a_quota_scoped_to_another_priority_class_does_not_hold_the_batch():
    """An admin keeps a class to some teams with a quota of 0 pods scoped to it (§11): it holds a
    batch that names that class, in its sandbox too, and no other."""
    api = cluster(_pc("rl-high", 1000), _team_bound({"pods": "0"}, scopeSelector={"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["rl-high"]}]}))
    spec, _ = _check(api, parse_spec(_cpus("Dedicated", 4, "1")))
    assert not spec.sandbox_quota
    with pytest.raises(Stalled) as err:
        _check(api, parse_spec(_cpus("Dedicated", 4, "1", podTemplate={"priorityClassName": "rl-high"})))
    assert err.value.reason == "QuotaExceeded"
