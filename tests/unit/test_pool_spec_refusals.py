"""A pool's spec that the API server would refuse in every warm pod is InvalidSpec before the pool's
namespace exists (docs/design.md §5.17): a pool has no dry run, its pods were refused one by one."""

from __future__ import annotations

import pytest

from rolloutbatch.core.model import SpecError
from rolloutbatch.core.pool_spec import parse_pool_spec

TASK = {"files": {"episode.py": "x"}}
CPU = {"cpu": "1", "memory": "1Gi"}

REFUSED_RESOURCES = {
    "extended request without a limit": {"requests": {**CPU, "example.com/gpu": "1"}, "limits": CPU},
    "extended request below its limit": {"requests": {"cpu": "1", "example.com/gpu": "1"},
                                         "limits": {"cpu": "1", "example.com/gpu": "2"}},
    "fractional extended resource": {"limits": {**CPU, "example.com/gpu": "500m"}},
    "non-standard kubernetes.io resource": {"limits": {**CPU, "kubernetes.io/widgets": "1"}},
    "hugepages without cpu or memory": {"limits": {"hugepages-2Mi": "2Mi"}},
}


@pytest.mark.parametrize("case", sorted(REFUSED_RESOURCES))
def test_a_pool_whose_pods_the_api_refuses_is_invalid_spec_before_its_namespace(case):
    with pytest.raises(SpecError) as err:
        parse_pool_spec({"size": 1, "task": TASK, "resources": REFUSED_RESOURCES[case]})
    assert err.value.field.startswith("spec.resources")
    with pytest.raises(SpecError) as err:
        parse_pool_spec({"size": 1, "task": TASK, "verifier": {"resources": REFUSED_RESOURCES[case]}})
    assert err.value.field.startswith("spec.verifier.resources")


def test_a_pool_with_no_node_selector_term_is_invalid_spec():
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    with pytest.raises(SpecError) as err:
        parse_pool_spec({"size": 1, "task": TASK, "podTemplate": {"affinity": {"nodeAffinity": required}}})
    assert err.value.field.startswith("spec.podTemplate.affinity.nodeAffinity.")


def test_a_pool_with_a_deeply_nested_affinity_is_invalid_spec_not_a_crash():
    value: object = 1
    for _ in range(995):
        value = {"a": value}
    with pytest.raises(SpecError):
        parse_pool_spec({"size": 1, "task": TASK, "podTemplate": {"affinity": {"nodeAffinity": value}}})


def test_a_pools_empty_resources_are_kept_and_its_zero_workspace_is_zero():
    spec = parse_pool_spec({"size": 1, "task": TASK, "resources": {}, "workspace": {"sizeLimit": 0},
                            "verifier": {}})
    assert spec.resources == {} and spec.verifier.resources == {} and spec.workspace_size_limit == "0"
    assert parse_pool_spec({"size": 1, "task": TASK}).resources["limits"]["memory"] == "128Mi"


@pytest.mark.parametrize("name", ["MY-VAR", "a.b", ".x"])
def test_a_pool_env_name_its_shell_launcher_drops_is_invalid_spec(name):
    """A pool's containers run ``/bin/sh -c <launcher>`` (core.pools), and dash or busybox ash pass on
    only variables named like shell identifiers: such a name was accepted, and every episode of the
    pool ran without it. Refused now as a cold batch under a shell launcher refuses it."""
    with pytest.raises(SpecError, match="dash") as err:
        parse_pool_spec({"size": 1, "task": TASK, "env": [{"name": name, "value": "1"}]})
    assert err.value.field == f"spec.env[{name}]"
    assert parse_pool_spec({"size": 1, "task": TASK, "env": [{"name": "MY_VAR", "value": "1"}]}).env == (("MY_VAR", "1"),)


REQ, PREF = "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"
# Selectors the API server refuses in every pod (ValidateLabelSelector), and the field it names.
REFUSED_SELECTORS = {
    "unknown operator": ({"matchExpressions": [{"key": "app", "operator": "Bogus", "values": ["a"]}]},
                         "matchExpressions[0].operator"),
    "In without values": ({"matchExpressions": [{"key": "app", "operator": "In"}]}, "matchExpressions[0].values"),
    "NotIn with no values": ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": []}]},
                             "matchExpressions[0].values"),
    "Exists with values": ({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]},
                           "matchExpressions[0].values"),
    "an expression's bad key": ({"matchExpressions": [{"key": "a b", "operator": "Exists"}]},
                                "matchExpressions[0].key"),
    "an expression's bad value": ({"matchExpressions": [{"key": "app", "operator": "In",
                                                         "values": ["ok", "not a label value!"]}]},
                                  "matchExpressions[0].values[1]"),
    "a matchLabels bad value": ({"matchLabels": {"app": "not a label value!"}}, "matchLabels[app]"),
    "a matchLabels bad key": ({"matchLabels": {"-app": "x"}}, "matchLabels"),
    "a matchLabels value too long": ({"matchLabels": {"app": "x" * 64}}, "matchLabels[app]"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_SELECTORS))
@pytest.mark.parametrize("selector", ["labelSelector", "namespaceSelector"])
@pytest.mark.parametrize("kind", ["podAffinity", "podAntiAffinity"])
def test_a_pool_whose_pod_affinity_selector_the_api_refuses_is_invalid_spec(case, selector, kind):
    """A pod (anti-)affinity term's label or namespace selector the API server refuses in every pod
    passed parse_pool_spec (only topologyKey was checked): the pool made its namespace, policies and
    task ConfigMap, then stalled pod by pod (PodsNotCreated). Refused now before anything is made."""
    bad, where = REFUSED_SELECTORS[case]
    term = {"topologyKey": "kubernetes.io/hostname", selector: bad}
    for affinity, at in (({kind: {REQ: [term]}}, f"{kind}.{REQ}[0]"),
                         ({kind: {PREF: [{"weight": 1, "podAffinityTerm": term}]}}, f"{kind}.{PREF}[0].podAffinityTerm")):
        with pytest.raises(SpecError) as err:
            parse_pool_spec({"size": 1, "task": TASK, "podTemplate": {"affinity": affinity}})
        assert err.value.field == f"spec.podTemplate.affinity.{at}.{selector}.{where}", err.value


def test_a_pool_with_valid_pod_affinity_selectors_passes():
    term = {"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "x", "example.com/tier": ""},
                              "matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b-c.d_e"]},
                                                   {"key": "spot", "operator": "DoesNotExist"},
                                                   {"key": "zone", "operator": "Exists", "values": []}]},
            "namespaceSelector": {}}
    affinity = {"podAntiAffinity": {REQ: [term], PREF: [{"weight": 5, "podAffinityTerm": term}]}}
    assert parse_pool_spec({"size": 1, "task": TASK, "podTemplate": {"affinity": affinity}}).pod_template == \
        {"affinity": affinity}
