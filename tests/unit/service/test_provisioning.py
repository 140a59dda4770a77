"""service.provisioning: a submitter who holds rights on RolloutBatches only gets nothing of the
cluster's own through the operator (docs/design.md §8.1), and is refused before anything exists."""
import asyncio

import pytest

from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube import resources
from rolloutbatch.service import provisioning
from tests.unit.core.factories import MINIMAL, REF, inputs_configmap


class Cluster:
    """Answers the reads of provisioning; records every write (a dry run counts as none)."""

    def __init__(self, priority_classes=(), configmaps=()) -> None:
        self.priority_classes = {pc["metadata"]["name"]: pc for pc in priority_classes}
        self.configmaps = {cm["metadata"]["name"]: cm for cm in configmaps}
        self.calls: list[tuple] = []

    async def call(self, fn, *args):
        self.calls.append((fn.__name__, args[:2]))
        if fn is resources.get_or_none:
            kind, name = args[0], args[1]
            return {"PriorityClass": self.priority_classes, "ConfigMap": self.configmaps}[kind].get(name)
        if fn is resources.dry_run_create:
            return args[0]
        if fn is resources.resource_quotas:
            return []
        raise AssertionError(f"unexpected call {fn.__name__}")

    async def create_one(self, obj):
        self.calls.append(("create", (obj["kind"], obj["metadata"]["name"])))
        return obj


def _pc(name, value):
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def _check(cluster, spec):
    return asyncio.run(provisioning.check(cluster.call, REF, spec, {}))


@pytest.mark.parametrize("value", [1_000_000_001, 2_000_000_000])
def test_a_priority_class_above_the_user_range_stalls_before_the_job_is_even_dry_run(value):
    cluster = Cluster([_pc("critical", value)])
    with pytest.raises(Stalled) as err:
        _check(cluster, parse_spec({**MINIMAL, "podTemplate": {"priorityClassName": "critical"}}))
    assert err.value.reason == "PriorityClassNotAllowed" and "critical" in err.value.message
    assert [name for name, _ in cluster.calls] == ["get_or_none"]


def test_a_missing_priority_class_stalls_and_a_user_one_passes():
    with pytest.raises(Stalled) as err:
        _check(Cluster(), parse_spec({**MINIMAL, "podTemplate": {"priorityClassName": "nope"}}))
    assert err.value.reason == "PriorityClassNotFound"
    cluster = Cluster([_pc("rl-high", 1_000_000_000)])
    _check(cluster, parse_spec({**MINIMAL, "podTemplate": {"priorityClassName": "rl-high"}}))
    assert "dry_run_create" in [name for name, _ in cluster.calls]


def _create(cluster, spec):
    return asyncio.run(provisioning.create(cluster.call, cluster.create_one, REF, spec, {}, None))


def test_inputs_from_a_configmap_not_opted_in_create_nothing_and_show_nothing():
    foreign = inputs_configmap({"input-0.json": '{"api_key": "s3cr3t"}'}, labels={}, name="app-config")
    cluster = Cluster(configmaps=[foreign])
    spec = parse_spec({**MINIMAL, "episodes": 1, "inputsFrom": {"configMaps": ["app-config"], "count": 1}})
    with pytest.raises(Stalled) as err:
        _create(cluster, spec)
    assert err.value.reason == "InputsNotFound" and "app-config" in err.value.message
    assert LABEL_INPUTS in err.value.message
    assert "input-0" not in err.value.message and "s3cr3t" not in err.value.message
    assert not [c for c in cluster.calls if c[0] == "create"]


def test_inputs_from_an_opted_in_configmap_are_copied():
    mine = inputs_configmap({"input-0.json": '{"a": 1}'}, labels={LABEL_INPUTS: INPUTS_OPT_IN}, name="mine")
    cluster = Cluster(configmaps=[mine])
    spec = parse_spec({**MINIMAL, "episodes": 1, "inputsFrom": {"configMaps": ["mine"], "count": 1}})
    _create(cluster, spec)
    created = [args for name, args in cluster.calls if name == "create"]
    assert ("Job", "rb-7d9f22ce63") in created and any(kind == "ConfigMap" and n.endswith("-inputs-0")
                                                        for kind, n in created)
