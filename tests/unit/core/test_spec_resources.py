"""A container's resources as the API server takes them (core.k8s_rules: ValidateResourceRequirements
and validateContainerResourceName), and `resources: {}` read as the API server stores it: no
requests and no limits, not the defaults."""
from __future__ import annotations

from decimal import Decimal

import pytest

from rolloutbatch.core import manifests
from rolloutbatch.core.k8s_rules import quota_usage
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.spec import parse_spec
from tests.support import crd_schema
from tests.unit.core.factories import MINIMAL

REF = BatchRef("ns", "b", "0123456789abcdef", 1)
SPEC_SCHEMA = crd_schema.openapi_schema()["properties"]["spec"]
CPU = {"cpu": "1", "memory": "1Gi"}

# Each refused by the API server in every pod: a batch's Job is saved by its dry run, a pool's pods
# are not (they are refused one by one after the pool's namespace is made).
REFUSED = {
    "extended request without a limit": ({"requests": {**CPU, "example.com/gpu": "1"}, "limits": CPU},
                                         "spec.resources.limits.example.com/gpu"),
    "extended request below its limit": ({"requests": {"cpu": "1", "example.com/gpu": "1"},
                                          "limits": {"cpu": "1", "example.com/gpu": "2"}},
                                         "spec.resources.requests.example.com/gpu"),
    "fractional extended resource": ({"limits": {**CPU, "example.com/gpu": "500m"}},
                                     "spec.resources.limits.example.com/gpu"),
    "non-standard kubernetes.io resource": ({"limits": {**CPU, "kubernetes.io/widgets": "1"}},
                                            "spec.resources.limits.kubernetes.io/widgets"),
    "extended name under requests.": ({"limits": {"requests.example.com/gpu": "1"}},
                                      "spec.resources.limits.requests.example.com/gpu"),
    "hugepages without cpu or memory": ({"limits": {"hugepages-2Mi": "2Mi"}}, "spec.resources"),
    "hugepages request without a limit": ({"requests": {"cpu": "1", "hugepages-2Mi": "2Mi"}},
                                          "spec.resources.limits.hugepages-2Mi"),
    "hugepages not whole pages": ({"limits": {"cpu": "1", "hugepages-2Mi": "3Mi"}},
                                  "spec.resources.limits.hugepages-2Mi"),
    "hugepages of no page size": ({"limits": {"cpu": "1", "hugepages-big": "2Mi"}},
                                  "spec.resources.limits.hugepages-big"),
    "cpu request above its limit": ({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, "spec.resources.requests.cpu"),
    "memory request above its limit": ({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
                                       "spec.resources.requests.memory"),
    "ephemeral-storage request above its limit": ({"requests": {"ephemeral-storage": "2Gi"},
                                                   "limits": {"ephemeral-storage": "1Gi"}},
                                                  "spec.resources.requests.ephemeral-storage"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_resources_the_api_server_refuses_in_every_pod_are_invalid_spec(case):
    resources, field = REFUSED[case]
    with pytest.raises(SpecError) as err:
        parse_spec({**MINIMAL, "resources": resources})
    assert err.value.field == field, err.value
    with pytest.raises(SpecError) as err:   # the verifier's container is read by the same rules
        parse_spec({**MINIMAL, "verifier": {"resources": resources}})
    assert err.value.field == field.replace("spec.resources", "spec.verifier.resources"), err.value


@pytest.mark.parametrize("resources", [
    {"limits": {**CPU, "example.com/gpu": "1"}},                                  # the request takes the limit
    {"requests": {**CPU, "nvidia.com/gpu": 2}, "limits": {**CPU, "nvidia.com/gpu": "2"}},
    {"requests": {"cpu": "1", "hugepages-2Mi": "4Mi"}, "limits": {"hugepages-2Mi": "4Mi"}},
    {"requests": {"cpu": "250m", "memory": "1Gi"}},                               # cpu and memory overcommit
    {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}},
])
def test_resources_the_api_server_takes_are_kept(resources):
    assert parse_spec({**MINIMAL, "resources": resources}).resources == resources


@pytest.mark.parametrize("where", ["spec.resources", "spec.verifier.resources"])
def test_empty_resources_mean_no_requests_or_limits_as_stored(where):
    """`resources: {}` is stored as it is (the CRD's default fills only an absent field): the pods
    get no requests and no limits, as `kubectl get -o yaml` says, not the default 128Mi."""
    raw: dict = {**MINIMAL, "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
    if where == "spec.resources":
        raw["resources"] = {}
    else:
        raw["verifier"] = {"files": {"verify.py": "x"}, "resources": {}}
    stored = crd_schema.apply_defaults(raw, SPEC_SCHEMA)
    assert not crd_schema.errors(stored, SPEC_SCHEMA)
    assert (stored["resources"] if where == "spec.resources" else stored["verifier"]["resources"]) == {}
    pod = manifests.job(REF, parse_spec(stored), None)["spec"]["template"]["spec"]
    container = (pod["containers"] if where == "spec.resources" else pod["containers"][-1:])[0]
    assert container["resources"] == {}, container


def test_absent_or_null_resources_are_the_default():
    default = parse_spec(MINIMAL).resources
    assert default["limits"]["memory"] == "128Mi"
    assert parse_spec({**MINIMAL, "resources": None}).resources == default


def test_a_verifier_follows_the_agents_empty_resources():
    spec = parse_spec({**MINIMAL, "resources": {}, "verifier": {"files": {"verify.py": "x"}}})
    assert spec.resources == {} and spec.verifier.resources == {}


def test_a_batch_without_requests_is_charged_nothing_but_its_pods():
    spec = parse_spec({**MINIMAL, "resources": {}, "isolation": {"resourceQuota": True}})
    quota = manifests.resource_quota(REF, spec, None)
    assert quota["spec"]["hard"] == {"pods": str(manifests.batch_pods(spec))}
    assert quota_usage(manifests.job(REF, spec, None)["spec"]["template"]["spec"])["pods"] == Decimal(1)
