"""Spec defaults (docs/design.md), the checks a schema cannot make, and quantities."""
import pytest

from rolloutbatch.core.model import SpecError
from rolloutbatch.core.k8s_rules import format_quantity, parse_quantity
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL

F = {"files": {"a": "x"}}


def test_defaults():
    spec = parse_spec(MINIMAL)
    assert (spec.parallelism, spec.min_successful_episodes, spec.image) == (3, 3, "python:3.12-alpine")
    assert spec.command == ("python", "-B", "/task/episode.py") and spec.args == () and spec.env == ()
    assert (spec.task_mount_path, spec.workspace_mount_path, spec.workspace_size_limit) == ("/task", "/workspace", "1Gi")
    assert spec.resources == {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}
    assert (spec.episode_timeout_seconds, spec.active_deadline_seconds, spec.infrastructure_retries) == (600, 3600, 2)
    assert (spec.isolation_namespace, spec.isolation_network, spec.cleanup_sandbox) == ("Dedicated", "DenyAll",
                                                                                      "DeleteOnSuccess")
    assert spec.ttl_seconds_after_finished is None and spec.runtime_class_name is None and spec.inputs == ()


def test_default_command_follows_the_mount_path():
    assert parse_spec({**MINIMAL, "task": {"mountPath": "/t/", **MINIMAL["task"]}}).command[-1] == "/t/episode.py"


def test_explicit_values_are_kept():
    spec = parse_spec({**MINIMAL, "parallelism": 1, "minSuccessfulEpisodes": 0, "command": ["sh"], "args": ["-c", "x"],
                       "env": [{"name": "A", "value": "1"}], "inputs": [{}, {}, {}],
                       "isolation": {"namespace": "Shared", "network": "AllowEgress"},
                       "cleanup": {"sandbox": "Never", "ttlSecondsAfterFinished": 60}})
    assert (spec.parallelism, spec.min_successful_episodes, spec.command, spec.args) == (1, 0, ("sh",), ("-c", "x"))
    assert spec.env == ({"name": "A", "value": "1"},) and len(spec.inputs) == 3
    assert (spec.isolation_namespace, spec.isolation_network, spec.cleanup_sandbox,
            spec.ttl_seconds_after_finished) == ("Shared", "AllowEgress", "Never", 60)


@pytest.mark.parametrize("raw,field", [
    ({"task": F}, "spec.episodes"),
    ({"episodes": 0, "task": F}, "spec.episodes"),
    ({"episodes": True, "task": F}, "spec.episodes"),
    ({"episodes": 100001, "task": F}, "spec.episodes"),
    ({"episodes": 2, "parallelism": 3, "task": F}, "spec.parallelism"),
    ({"episodes": 2, "minSuccessfulEpisodes": 3, "task": F}, "spec.minSuccessfulEpisodes"),
    ({"episodes": 2}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"../a": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"a/b": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"a": 3}}}, "spec.task.files[a]"),
    ({"episodes": 2, "task": {"files": {"a": "x"}, "mountPath": "relative"}}, "spec.task.mountPath"),
    ({"episodes": 2, "inputs": [{}], "task": F}, "spec.inputs"),
    ({"episodes": 2, "inputs": "ab", "task": F}, "spec.inputs"),
    ({"episodes": 2, "task": {"files": {"a": "x" * 1000000}}}, "spec.task"),
    ({"episodes": 2, "task": {"files": {"a": "x" * 500000}}, "inputs": [{"p": "y" * 250000}] * 2}, "spec.task"),
    ({"episodes": 2, "env": [{"name": "EPISODE_ID"}], "task": F}, "spec.env"),
    ({"episodes": 2, "env": [{"name": "1BAD"}], "task": F}, "spec.env"),
    ({"episodes": 2, "env": ["A=1"], "task": F}, "spec.env"),
    ({"episodes": 2, "env": [{"name": "T", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], "task": F},
     "spec.env[T].valueFrom.fieldRef"),
    ({"episodes": 2, "env": [{"name": "T", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
      "task": F}, "spec.env[T]"),
    ({"episodes": 2, "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}}],
      "task": F}, "spec.env[T].valueFrom.secretKeyRef.optional"),
    ({"episodes": 2, "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "S", "key": "k"}}}], "task": F},
     "spec.env[T].valueFrom.secretKeyRef.name"),
    ({"episodes": 2, "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "..k"}}}], "task": F},
     "spec.env[T].valueFrom.secretKeyRef.key"),
    ({"episodes": 2, "verifier": {"env": [{"name": "T", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]},
      "task": F}, "spec.verifier.env[T].valueFrom.configMapKeyRef"),
    ({"episodes": 2, "env": [{"name": "T", "value": 1}], "task": F}, "spec.env[T]"),
    ({"episodes": 2, "episodeTimeoutSeconds": 100, "activeDeadlineSeconds": 50, "task": F}, "spec.episodeTimeoutSeconds"),
    ({"episodes": 2, "resources": {"limits": {"cpu": "lots"}}, "task": F}, "spec.resources.limits.cpu"),
    ({"episodes": 2, "resources": {"claims": []}, "task": F}, "spec.resources.claims"),
    ({"episodes": 2, "workspace": {"sizeLimit": "big"}, "task": F}, "spec.workspace.sizeLimit"),
    ({"episodes": 2, "workspace": {"mountPath": "/task/ws"}, "task": F}, "spec.task.mountPath"),
    ({"episodes": 2, "retries": {"infrastructure": 11}, "task": F}, "spec.retries.infrastructure"),
    ({"episodes": 2, "isolation": {"namespace": "dedicated"}, "task": F}, "spec.isolation.namespace"),
    ({"episodes": 2, "isolation": {"network": "Open"}, "task": F}, "spec.isolation.network"),
    ({"episodes": 2, "cleanup": {"sandbox": "Sometimes"}, "task": F}, "spec.cleanup.sandbox"),
    ({"episodes": 2, "cleanup": {"ttlSecondsAfterFinished": -1}, "task": F}, "spec.cleanup.ttlSecondsAfterFinished"),
    ({"episodes": 2, "podTemplate": {"hostNetwork": True}, "task": F}, "spec.podTemplate"),
    ({"episodes": 2, "image": "bad image", "task": F}, "spec.image"),
    # what the API server would refuse only once a child object is created
    ({"episodes": 2, "task": {"files": {"..": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"..data": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"a" * 254: "x"}}}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "podTemplate": {"nodeSelector": ["pool=rl"]}, "task": F}, "spec.podTemplate.nodeSelector"),
    ({"episodes": 2, "podTemplate": {"nodeSelector": {"pool": 1}}, "task": F}, "spec.podTemplate.nodeSelector[pool]"),
    ({"episodes": 2, "podTemplate": {"nodeSelector": {"pool": "a b"}}, "task": F},
     "spec.podTemplate.nodeSelector[pool]"),
    ({"episodes": 2, "podTemplate": {"nodeSelector": {"bad key!": "x"}}, "task": F}, "spec.podTemplate.nodeSelector"),
    ({"episodes": 2, "podTemplate": {"tolerations": {"key": "x"}}, "task": F}, "spec.podTemplate.tolerations"),
    ({"episodes": 2, "podTemplate": {"tolerations": ["gpu"]}, "task": F}, "spec.podTemplate.tolerations[0]"),
    ({"episodes": 2, "podTemplate": {"tolerations": [{"key": "a", "operator": "In"}]}, "task": F},
     "spec.podTemplate.tolerations[0].operator"),
    ({"episodes": 2, "podTemplate": {"tolerations": [{"operator": "Equal", "value": "x"}]}, "task": F},
     "spec.podTemplate.tolerations[0].operator"),
    ({"episodes": 2, "podTemplate": {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "task": F},
     "spec.podTemplate.tolerations[0].value"),
    ({"episodes": 2, "podTemplate": {"tolerations": [{"key": "a", "effect": "Sometimes"}]}, "task": F},
     "spec.podTemplate.tolerations[0].effect"),
    ({"episodes": 2, "podTemplate": {"tolerations": [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]},
      "task": F}, "spec.podTemplate.tolerations[0].tolerationSeconds"),
    ({"episodes": 2, "podTemplate": {"tolerations": [{"key": "a", "colour": "x"}]}, "task": F},
     "spec.podTemplate.tolerations[0]"),
    ({"episodes": 2, "podTemplate": {"priorityClassName": 5}, "task": F}, "spec.podTemplate.priorityClassName"),
    ({"episodes": 2, "podTemplate": {"priorityClassName": "High"}, "task": F}, "spec.podTemplate.priorityClassName"),
    ({"episodes": 2, "podTemplate": {"affinity": "near"}, "task": F}, "spec.podTemplate.affinity"),
    ({"episodes": 2, "podTemplate": {"affinity": {"nodeAfinity": {}}}, "task": F}, "spec.podTemplate.affinity"),
    ({"episodes": 2, "podTemplate": {"affinity": {"nodeAffinity": []}}, "task": F},
     "spec.podTemplate.affinity.nodeAffinity"),
    ({"episodes": 2, "runtimeClassName": "Cube_1", "task": F}, "spec.runtimeClassName"),
    ({"episodes": 2, "resources": {"limits": {"cpu": "-1"}}, "task": F}, "spec.resources.limits.cpu"),
    ({"episodes": 2, "resources": {"limits": {"cpu": True}}, "task": F}, "spec.resources.limits.cpu"),
    ({"episodes": 2, "resources": {"limits": {"gpu": "1"}}, "task": F}, "spec.resources.limits.gpu"),
    ({"episodes": 2, "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, "task": F},
     "spec.resources.requests.cpu"),
    ({"episodes": 2, "workspace": {"sizeLimit": "-1Gi"}, "task": F}, "spec.workspace.sizeLimit"),
    ({"episodes": 2, "cleanup": {"ttlSecondsAfterFinished": 2**31}, "task": F}, "spec.cleanup.ttlSecondsAfterFinished"),
    ({"episodes": 2, "command": "python x.py", "task": F}, "spec.command"),
])
def test_errors_name_the_field(raw, field):
    with pytest.raises(SpecError) as err:
        parse_spec(raw)
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ") and len(str(err.value)) > len(field) + 5


def test_inputs_mount_cannot_be_shadowed():
    with pytest.raises(SpecError):
        parse_spec({**MINIMAL, "inputs": [{}] * 3, "workspace": {"mountPath": "/rollout"}})
    assert parse_spec({**MINIMAL, "workspace": {"mountPath": "/rollout"}}).workspace_mount_path == "/rollout"


@pytest.mark.parametrize("text,value", [("500m", 0.5), ("128Mi", 134217728), ("1.5", 1.5), ("2k", 2000),
                                        ("1Gi", 2**30), ("1M", 10**6), ("3G", 3 * 10**9), ("100", 100),
                                        ("250u", 0.00025), ("1e3", 1000), (2, 2)])
def test_quantities(text, value):
    assert float(parse_quantity(text)) == pytest.approx(value)


@pytest.mark.parametrize("text", ["500m", "128Mi", "1.5", "2k", "1Gi", "3"])
def test_format_quantity_round_trips(text):
    assert parse_quantity(format_quantity(parse_quantity(text))) == parse_quantity(text)


@pytest.mark.parametrize("text", ["", "lots", "1XB", "m", ".", "1..2"])
def test_bad_quantities(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_valid_pod_templates_and_resources_pass():
    spec = parse_spec({**MINIMAL, "runtimeClassName": "kata.v2",
                       "resources": {"requests": {"cpu": 1, "memory": "64Mi", "example.com/gpu": "1"},
                                     "limits": {"cpu": "1", "hugepages-2Mi": "2Mi", "example.com/gpu": "1"}},
                       "podTemplate": {"nodeSelector": {"kubernetes.io/arch": "amd64", "pool": ""},
                                       "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute",
                                                        "tolerationSeconds": 30}, {"key": "spot", "operator": "Exists"},
                                                       {"key": "a", "value": "b", "effect": "NoSchedule"}],
                                       "affinity": {"nodeAffinity": {"x": 1}}, "priorityClassName": "rl-low",
                                       }})
    assert spec.pod_template["priorityClassName"] == "rl-low" and len(spec.pod_template["tolerations"]) == 3
    assert parse_spec({**MINIMAL, "podTemplate": {"nodeSelector": None}}).pod_template == {}


def test_configmap_key_rule():
    from rolloutbatch.core.k8s_rules import check_configmap_key
    for good in ("episode.py", ".hidden", "a..b", "-_.", "x" * 253):
        assert check_configmap_key(good) is None, good
    for bad in (".", "..", "..data", "a/b", "", "x" * 254, None, "é"):
        assert check_configmap_key(bad), bad


# -- groups and inputs by reference ---------------------------------------------------------------
def test_samples_per_input_must_divide_episodes_and_match_inputs():
    import pytest

    from rolloutbatch.core.model import SpecError
    from rolloutbatch.core.spec import parse_spec
    base = {"task": {"files": {"episode.py": "x"}}}
    assert parse_spec({**base, "episodes": 6, "samplesPerInput": 3, "inputs": [{}, {}]}).samples_per_input == 3
    assert parse_spec({**base, "episodes": 6, "samplesPerInput": 3}).inputs_count == 0
    for bad, field in (({"episodes": 5, "samplesPerInput": 2}, "spec.samplesPerInput"),
                       ({"episodes": 6, "samplesPerInput": 3, "inputs": [{}]}, "spec.inputs"),
                       ({"episodes": 4, "inputsFrom": {"configMaps": ["a"], "count": 3}}, "spec.inputsFrom.count"),
                       ({"episodes": 2, "inputs": [{}, {}], "inputsFrom": {"configMaps": ["a"], "count": 2}},
                        "spec.inputsFrom"),
                       ({"episodes": 2, "inputsFrom": {"configMaps": ["a", "a"], "count": 2}},
                        "spec.inputsFrom.configMaps"),
                       ({"episodes": 2, "inputsFrom": {"configMaps": ["A_b"], "count": 2}},
                        "spec.inputsFrom.configMaps"),
                       ({"episodes": 2, "inputsFrom": {"configMaps": ["a"]}}, "spec.inputsFrom.count")):
        with pytest.raises(SpecError) as err:
            parse_spec({**base, **bad})
        assert err.value.field == field, (bad, err.value)


def test_inputs_from_shards_are_checked_before_anything_is_created():
    import pytest

    from rolloutbatch.core.admission import Stalled, input_shards
    from tests.unit.core.factories import inputs_configmap as cm

    good = [cm({"input-0.json": "{}", "input-2.json": '{"a": 1}'}), cm({"input-1.json": "{}"})]
    assert [sorted(d) for d in input_shards(good, ["a", "b"], 3)] == [["input-0.json", "input-2.json"],
                                                                      ["input-1.json"]]
    cases = [([None], 1, "InputsNotFound"), ([cm({"input-1.json": "{}"})], 1, "InvalidInputs"),
             ([cm({"input-0.json": "[1]"})], 1, "InvalidInputs"),
             ([cm({"input-0.json": "NaN"})], 1, "InvalidInputs"),
             ([cm({"input-0.json": "{}"}), cm({"input-0.json": "{}"})], 1, "InvalidInputs"),
             ([cm({"input-0.json": "{}"})], 2, "InvalidInputs"),
             ([{**cm({}), "binaryData": {"input-0.json": "e30="}}], 1, "InvalidInputs")]
    for cms, count, reason in cases:
        with pytest.raises(Stalled) as err:
            input_shards(cms, [f"cm{i}" for i in range(len(cms))], count)
        assert err.value.reason == reason, (cms, err.value)


def test_launcher_variables_cannot_be_referenced_when_k_is_above_one():
    import pytest

    from rolloutbatch.core.model import SpecError
    from rolloutbatch.core.spec import parse_spec
    base = {"episodes": 4, "samplesPerInput": 2, "task": {"files": {"episode.py": "x"}}}
    for field, value in (("args", ["$(EPISODE_INPUT)"]), ("command", ["python", "$(EPISODE_GROUP)"]),
                         ("env", [{"name": "X", "value": "s=$(EPISODE_SAMPLE)"}])):
        with pytest.raises(SpecError) as err:
            parse_spec({**base, field: value})
        assert err.value.field == "spec.samplesPerInput"
    assert parse_spec({**base, "samplesPerInput": 1, "args": ["$(EPISODE_INPUT)"]}).args == ("$(EPISODE_INPUT)",)


def test_launcher_variables_cannot_be_referenced_by_the_verifier_either():
    import pytest

    from rolloutbatch.core.model import SpecError
    from rolloutbatch.core.spec import parse_spec
    base = {"episodes": 4, "samplesPerInput": 2, "task": {"files": {"episode.py": "x"}},
            "verifier": {"command": ["python", "/verifier/check.py", "$(EPISODE_GROUP)"], "files": {"check.py": "x"}}}
    with pytest.raises(SpecError) as err:
        parse_spec(base)
    assert err.value.field == "spec.samplesPerInput"


# -- what a submitter cannot get through the operator (docs/design.md §8.1) ----------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rolloutbatch.core.spec_pod_template import MAX_TOLERATIONS, PROTECTED_TAINT_KEYS  # noqa: E402


def _template(**template):
    return {**MINIMAL, "podTemplate": template}


@pytest.mark.parametrize("name", ["system-node-critical", "system-cluster-critical", "system-x"])
def test_system_priority_classes_are_refused(name):
    with pytest.raises(SpecError) as err:
        parse_spec(_template(priorityClassName=name))
    assert err.value.field == "spec.podTemplate.priorityClassName" and "system" in str(err.value)


@pytest.mark.parametrize("name", ["rl-low", "systemic", "my-system-class", "system"])
def test_user_priority_classes_stay_allowed(name):
    assert parse_spec(_template(priorityClassName=name)).pod_template["priorityClassName"] == name


BLANKET = [{"operator": "Exists"}, {"key": "", "operator": "Exists"}, {"operator": "Exists", "effect": "NoSchedule"},
           {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}, {"key": None, "operator": "Exists"}]


@pytest.mark.parametrize("toleration", BLANKET)
def test_a_toleration_of_every_taint_is_refused(toleration):
    with pytest.raises(SpecError) as err:
        parse_spec(_template(tolerations=[{"key": "gpu", "operator": "Exists"}, toleration]))
    assert err.value.field == "spec.podTemplate.tolerations[1].key" and "every taint" in str(err.value)


def _protected_forms(key):
    return [{"key": key, "operator": "Exists"}, {"key": key, "operator": "Exists", "effect": "NoSchedule"},
            {"key": key, "operator": "Equal", "value": "true", "effect": "NoExecute"},
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600}]


@pytest.mark.parametrize("key", sorted(PROTECTED_TAINT_KEYS))
def test_tolerations_of_the_clusters_protective_taints_are_refused(key):
    for toleration in _protected_forms(key):
        with pytest.raises(SpecError) as err:
            parse_spec(_template(tolerations=[toleration]))
        assert err.value.field == "spec.podTemplate.tolerations[0].key" and key in str(err.value), toleration


def test_the_protected_taints_are_the_documented_ones():
    assert PROTECTED_TAINT_KEYS == {
        "node.kubernetes.io/unschedulable", "node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master",
        "CriticalAddonsOnly", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable", "node.cloudprovider.kubernetes.io/uninitialized",
        "node.kubernetes.io/out-of-service", "ToBeDeletedByClusterAutoscaler",
        "node-role.kubernetes.io/controlplane", "node-role.kubernetes.io/etcd", "node.cloudprovider.kubernetes.io/shutdown",
        "node.cilium.io/agent-not-ready", "karpenter.sh/unregistered", "karpenter.sh/disrupted",
        "karpenter.sh/disruption"}


@pytest.mark.parametrize("key,effect", [
    ("node-role.kubernetes.io/controlplane", "NoSchedule"),   # RKE1's control plane
    ("node-role.kubernetes.io/etcd", "NoExecute"),            # RKE / RKE2 etcd nodes
    ("node.cilium.io/agent-not-ready", "NoSchedule"),         # NetworkPolicy not enforced yet
    ("karpenter.sh/unregistered", "NoExecute"),               # a node's startup taints not set yet
    ("karpenter.sh/disrupted", "NoSchedule"),                 # a node Karpenter is deleting
    ("karpenter.sh/disruption", "NoSchedule"),                # the same, before Karpenter v1
    ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule"),   # a node its cloud shut down
])
def test_another_distributions_spelling_of_a_protected_taint_is_refused(key, effect):
    # Named here, not through the constant: keys match exactly, so each spelling must be listed.
    template = {"tolerations": [{"key": key, "operator": "Exists", "effect": effect}]}
    if key == "node-role.kubernetes.io/etcd":
        template["nodeSelector"] = {key: "true"}
    with pytest.raises(SpecError) as err:
        parse_spec(_template(**template))
    assert err.value.field == "spec.podTemplate.tolerations[0].key" and key in str(err.value)


@pytest.mark.parametrize("key", ["CriticalAddonsOnly", "node.kubernetes.io/network-unavailable",
                                 "node.cloudprovider.kubernetes.io/uninitialized", "ToBeDeletedByClusterAutoscaler"])
def test_system_pools_unready_networks_and_nodes_being_removed_are_protected(key):
    # Named here, not through the constant: the test must fail if a key leaves it.
    for toleration in _protected_forms(key):
        with pytest.raises(SpecError) as err:
            parse_spec(_template(tolerations=[{"key": "gpu", "operator": "Exists"}, toleration]))
        assert err.value.field == "spec.podTemplate.tolerations[1].key" and key in str(err.value), toleration


def test_specific_tolerations_stay_allowed():
    tolerations = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                   {"key": "dedicated", "operator": "Equal", "value": "rl", "effect": "NoExecute",
                    "tolerationSeconds": 60},
                   {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
                   {"key": "example.com/node-role.kubernetes.io-master", "operator": "Exists"},
                   {"key": "example.com/CriticalAddonsOnly", "operator": "Exists"},      # a custom key alike
                   {"key": "criticaladdonsonly", "operator": "Exists"},                  # keys are case-sensitive
                   {"key": "DeletionCandidateOfClusterAutoscaler", "operator": "Exists"}]   # a soft taint
    assert parse_spec(_template(tolerations=tolerations)).pod_template["tolerations"] == tolerations


def test_too_many_tolerations_are_refused():
    many = [{"key": f"k{i}", "operator": "Exists"} for i in range(MAX_TOLERATIONS + 1)]
    with pytest.raises(SpecError, match="at most"):
        parse_spec(_template(tolerations=many))
    assert len(parse_spec(_template(tolerations=many[:-1])).pod_template["tolerations"]) == MAX_TOLERATIONS


_KEYS = st.from_regex(r"\A[a-z]([a-z0-9-]{0,9}[a-z0-9])?(\.[a-z]{1,5})?(/[a-z][a-z0-9]{0,8})?\Z")
_SPECIFIC = st.builds(lambda key, effect: {"key": key, "operator": "Exists", **({"effect": effect} if effect else {})},
                      _KEYS.filter(lambda k: k not in PROTECTED_TAINT_KEYS),
                      st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute"]))
_PROTECTED = st.sampled_from(sorted(PROTECTED_TAINT_KEYS)).flatmap(lambda k: st.sampled_from(_protected_forms(k)))
_FORBIDDEN = st.one_of(st.sampled_from(BLANKET), _PROTECTED)


@settings(max_examples=100, deadline=None, database=None)
@given(before=st.lists(_SPECIFIC, max_size=5), forbidden=_FORBIDDEN, after=st.lists(_SPECIFIC, max_size=5))
def test_any_toleration_list_with_a_blanket_or_protected_toleration_is_refused(before, forbidden, after):
    with pytest.raises(SpecError) as err:
        parse_spec(_template(tolerations=[*before, forbidden, *after]))
    assert err.value.field == f"spec.podTemplate.tolerations[{len(before)}].key"


@settings(max_examples=100, deadline=None, database=None)
@given(tolerations=st.lists(_SPECIFIC, max_size=8))
def test_any_list_of_specific_tolerations_is_kept(tolerations):
    assert parse_spec(_template(tolerations=tolerations)).pod_template.get("tolerations", []) == tolerations


# -- free-form JSON: bounded in depth, refused with the spec's own error ---------------------------
def _nested(depth: int) -> dict:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[return-value]


@pytest.mark.parametrize("depth", [101, 995, 5000])
def test_a_deeply_nested_input_is_refused_not_a_crash(depth):
    """The API server takes JSON nested 10000 levels deep in spec.inputs' objects; encoding one
    raised RecursionError (a traceback in the CLI, an InternalError stall in the operator)."""
    with pytest.raises(SpecError) as err:
        parse_spec({"episodes": 2, "task": F, "inputs": [{}, _nested(depth)]})
    assert err.value.field == "spec.inputs[1]" and "deep" in str(err.value)
    assert parse_spec({**MINIMAL, "episodes": 1, "inputs": [_nested(100)]}).inputs   # bounded, not refused


def test_a_deeply_nested_affinity_is_refused_not_a_crash():
    with pytest.raises(SpecError) as err:
        parse_spec({**MINIMAL, "podTemplate": {"affinity": {"nodeAffinity": _nested(995)}}})
    assert err.value.field == "spec.podTemplate.affinity"


# -- affinity the API server refuses in every pod ---------------------------------------------------
REQ, PREF = "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize("affinity,where", [
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": []}}}, f"nodeAffinity.{REQ}.nodeSelectorTerms"),
    ({"nodeAffinity": {REQ: {}}}, f"nodeAffinity.{REQ}.nodeSelectorTerms"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": "gpu"}}}, f"nodeAffinity.{REQ}.nodeSelectorTerms"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In"}]}]}}},
     f"nodeAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].values"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gpu", "operator": "Exists", "values": ["a"]}]}]}}},
     f"nodeAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].values"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gpu", "operator": "Gt", "values": ["1", "2"]}]}]}}},
     f"nodeAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].values"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Is"}]}]}}},
     f"nodeAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].operator"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a b", "operator": "Exists"}]}]}}},
     f"nodeAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].key"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.labels", "operator": "In", "values": ["n1"]}]}]}}},
     f"nodeAffinity.{REQ}.nodeSelectorTerms[0].matchFields[0].key"),
    ({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}]}}},
     f"nodeAffinity.{REQ}.nodeSelectorTerms[0].matchFields[0].values"),
    ({"nodeAffinity": {PREF: [{"weight": 0, "preference": {}}]}}, f"nodeAffinity.{PREF}[0].weight"),
    ({"nodeAffinity": {PREF: [{"weight": 101, "preference": {}}]}}, f"nodeAffinity.{PREF}[0].weight"),
    ({"podAffinity": {REQ: [{"labelSelector": {"matchLabels": {"a": "b"}}}]}}, f"podAffinity.{REQ}[0].topologyKey"),
    ({"podAntiAffinity": {PREF: [{"weight": 1, "podAffinityTerm": {"topologyKey": ""}}]}},
     f"podAntiAffinity.{PREF}[0].podAffinityTerm.topologyKey"),
    ({"podAntiAffinity": {PREF: [{"weight": 1000, "podAffinityTerm": {"topologyKey": "zone"}}]}},
     f"podAntiAffinity.{PREF}[0].weight"),
    ({"podAffinity": {REQ: [{"topologyKey": "zone", "labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "Bogus"}]}}]}}, f"podAffinity.{REQ}[0].labelSelector.matchExpressions[0].operator"),
    ({"podAntiAffinity": {PREF: [{"weight": 1, "podAffinityTerm": {"topologyKey": "zone", "namespaceSelector": {
        "matchLabels": {"team": "not a label value!"}}}}]}},
     f"podAntiAffinity.{PREF}[0].podAffinityTerm.namespaceSelector.matchLabels[team]"),
])
def test_an_affinity_no_pod_may_have_is_refused_naming_its_field(affinity, where):
    with pytest.raises(SpecError) as err:
        parse_spec({**MINIMAL, "podTemplate": {"affinity": affinity}})
    assert err.value.field == f"spec.podTemplate.affinity.{where}", err.value


def test_a_usual_affinity_passes():
    affinity = {
        "nodeAffinity": {REQ: {"nodeSelectorTerms": [
                             {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]},
                                                   {"key": "spot", "operator": "DoesNotExist"},
                                                   {"key": "cores", "operator": "Gt", "values": ["8"]}]},
                             {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]},
                         PREF: [{"weight": 100, "preference": {"matchExpressions": [
                             {"key": "zone", "operator": "In", "values": ["a"]}]}}]},
        "podAntiAffinity": {PREF: [{"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                                     "labelSelector": {"matchLabels": {"a": "b"}}}}]},
        "podAffinity": {REQ: None},
    }
    assert parse_spec({**MINIMAL, "podTemplate": {"affinity": affinity}}).pod_template["affinity"] == affinity


# -- one quantity, one meaning ---------------------------------------------------------------------
@pytest.mark.parametrize("written", [0, "0"])
def test_a_zero_workspace_size_is_zero_however_written(written):
    """An integer 0 became the default 1Gi while "0" stayed "0": both are the quantity 0 (the API
    server stores either as written)."""
    assert parse_spec({**MINIMAL, "workspace": {"sizeLimit": written}}).workspace_size_limit == "0"
    assert parse_spec({**MINIMAL, "workspace": {"sizeLimit": None}}).workspace_size_limit == "1Gi"


def test_a_resource_quota_asked_of_a_shared_sandbox_is_refused():
    """README: isolation.resourceQuota is "Dedicated only". Asked with namespace Shared, it was
    taken without a word and no quota was made."""
    with pytest.raises(SpecError, match="Dedicated sandbox only") as err:
        parse_spec({**MINIMAL, "isolation": {"namespace": "Shared", "resourceQuota": True}})
    assert err.value.field == "spec.isolation.resourceQuota"
    assert parse_spec({**MINIMAL, "isolation": {"namespace": "Dedicated", "resourceQuota": True}}).sandbox_quota
    assert not parse_spec({**MINIMAL, "isolation": {"namespace": "Shared", "resourceQuota": False}}).sandbox_quota
