"""Can a cluster's quotas hold one episode pod (with the RuntimeClass overhead)?"""
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core.admission import check_quota_fits, pod_footprint, runtime_overhead
from rolloutbatch.core.k8s_rules import parse_quantity, unset_by_containers
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL, RAW


def test_quota_that_cannot_hold_one_pod_is_reported():
    spec = parse_spec(RAW)
    quota = {"metadata": {"name": "tight"}, "status": {"hard": {"limits.memory": "100Mi"}, "used": {}}}
    assert "tight" in check_quota_fits([quota], spec, None)
    roomy = {"metadata": {"name": "ok"}, "status": {"hard": {"limits.memory": "10Gi"}, "used": {"limits.memory": "1Gi"}}}
    assert check_quota_fits([roomy], spec, None) is None


def test_footprint_includes_overhead():
    spec = parse_spec(RAW)
    assert pod_footprint(spec, {"cpu": "250m"})["requests.cpu"] == pytest.approx(0.35)
    assert runtime_overhead({"overhead": {"podFixed": {"cpu": "250m"}}}) == {"cpu": "250m"}
    assert runtime_overhead({"handler": "x"}) is None


# -- what one pod is charged: the pod the operator builds, as Kubernetes counts it ----------------
from rolloutbatch.core import pool_children, pool_spec  # noqa: E402
from rolloutbatch.core.admission import check_quota_outside, episode_pod, pod_resources, quotas_bound  # noqa: E402
from rolloutbatch.core.manifests import resource_quota  # noqa: E402
from rolloutbatch.core.naming import AGENT_CONTAINER, VERIFIER_CONTAINER, VERIFIER_FILES_CONTAINER  # noqa: E402
from tests.unit.core.factories import REF  # noqa: E402

GI = 1024 ** 3
TASK = {"files": {"episode.py": "x"}}
# The team's namespace: at most 1Gi of memory requests and 1 cpu, all of it in use already.
FULL = {"metadata": {"name": "team"}, "spec": {"hard": {"requests.memory": "1Gi", "requests.cpu": "1"}},
        "status": {"hard": {"requests.memory": "1Gi", "requests.cpu": "1"},
                   "used": {"requests.memory": "1Gi", "requests.cpu": "1"}}}


def _quota(hard, used=None, name="team"):
    return {"metadata": {"name": name}, "status": {"hard": hard, "used": used or {}}}


def _pool(resources, verifier=None, **extra):
    raw = {"size": 10, "task": TASK, "resources": resources, **extra}
    if verifier is not None:
        raw["verifier"] = verifier
    return pool_spec.parse_pool_spec(raw)


def test_a_limit_without_a_request_is_charged_as_the_request_the_api_server_defaults():
    spec = parse_spec({**MINIMAL, "episodes": 50, "parallelism": 50,
                       "resources": {"limits": {"cpu": "4", "memory": "16Gi"}}})
    footprint = pod_footprint(spec, None)
    assert footprint["requests.memory"] == footprint["memory"] == footprint["limits.memory"] == 16 * GI
    assert check_quota_outside([FULL], spec, None) is not None, "52 pods of 16Gi passed a full 1Gi quota"
    roomy = {**FULL, "status": {"hard": FULL["status"]["hard"], "used": {}}}
    assert quotas_bound([roomy], spec, None)
    hard = resource_quota(REF, spec, None)["spec"]["hard"]
    assert hard["requests.memory"] == hard["limits.memory"] == "832Gi" and hard["requests.cpu"] == "208"


@pytest.mark.parametrize("hard, field", [({"requests.memory": "1Gi"}, "spec.resources.requests.memory"),
                                         ({"memory": "100Gi"}, "spec.resources.requests.memory"),
                                         ({"limits.cpu": "100"}, "spec.resources.limits.cpu")])
def test_a_quota_on_cpu_or_memory_refuses_pods_that_do_not_set_it(hard, field):
    # the quota admission's "must specify requests.memory": however roomy the quota, such a pod is refused
    spec = parse_spec({**MINIMAL, "episodes": 50, "parallelism": 50, "resources": {"requests": {"cpu": "10m"}}})
    for problem in (check_quota_outside([_quota(hard)], spec, None), check_quota_fits([_quota(hard)], spec, None)):
        assert problem and field in problem and "must specify" in problem, problem
    assert check_quota_fits([_quota({"requests.ephemeral-storage": "1Gi"})], spec, None) is None   # charged 0


def test_a_verifier_that_does_not_set_a_quotad_resource_is_named():
    spec = parse_spec({**MINIMAL, "resources": {"requests": {"memory": "1Gi"}},
                       "verifier": {"command": ["true"], "resources": {"requests": {"cpu": "1"}}}})
    problem = check_quota_fits([_quota({"requests.memory": "10Gi"})], spec, None)
    assert "spec.verifier.resources.requests.memory" in problem and "spec.resources" not in problem.split("set ")[-1]
    pool = _pool({"requests": {"cpu": "1"}}, verifier={})
    assert "the RolloutPool's spec.resources.requests.memory" in check_quota_fits([_quota({"memory": "1Gi"})], pool,
                                                                                  None)


def test_a_sandbox_is_bounded_whenever_a_quota_of_the_namespace_bounds_what_pods_are_charged():
    spec = parse_spec(MINIMAL)
    assert quotas_bound([_quota({"requests.nvidia.com/gpu": "4"})], spec, None)   # the pods ask for none
    assert quotas_bound([_quota({"count/pods": "100"})], spec, None)
    assert not quotas_bound([_quota({"configmaps": "10", "requests.storage": "1Ti"})], spec, None)
    best_effort_only = {**_quota({"pods": "1"}), "spec": {"scopes": ["BestEffort"]}}
    assert not quotas_bound([best_effort_only], spec, None)                       # does not charge them


def test_a_job_pod_is_charged_the_larger_phase_and_a_pool_pod_both_containers():
    agent, verifier = {"requests": {"cpu": "1", "memory": "1Gi"}}, {"requests": {"cpu": "2", "memory": "256Mi"}}
    batch = parse_spec({**MINIMAL, "resources": agent, "verifier": {"command": ["true"], "resources": verifier}})
    pod = episode_pod(batch, None)
    assert [c["name"] for c in pod["initContainers"]] == [AGENT_CONTAINER]      # the agent runs first, alone
    assert pod_resources(batch, None)["requests"] == {"cpu": 2, "memory": GI}
    pool = _pool(agent, verifier={"resources": verifier})
    assert [c["name"] for c in episode_pod(pool, None)["containers"]][1:] == [VERIFIER_CONTAINER,
                                                                             VERIFIER_FILES_CONTAINER]
    # the verifier's files writer is charged too (its requests are the operator's own)
    assert pod_resources(pool, None)["requests"] == {"cpu": Decimal("3.01"), "memory": GI + 272 * 1024 ** 2}
    assert pod_resources(_pool(agent), None)["requests"] == {"cpu": 1, "memory": GI}      # no verifier
    assert pod_resources(parse_spec({**MINIMAL, "resources": agent}), None)["requests"] == {"cpu": 1, "memory": GI}


def test_a_pool_with_a_verifier_is_held_to_a_quota_at_its_pods_whole_size():
    spec = _pool({"requests": {"memory": "1Gi", "cpu": "1"}, "limits": {"memory": "1Gi", "cpu": "1"}}, verifier={})
    # all containers run at once (the files writer's 64Mi: at its limit in a Guaranteed pod)
    assert pod_footprint(spec, None)["requests.memory"] == 2 * GI + 64 * 1024 ** 2
    quota = _quota({"requests.memory": "10Gi"})
    assert check_quota_fits([quota], spec, None, spec.size, "the pool's warm pods") is not None, \
        "10 warm pods charging 20Gi passed a 10Gi quota"
    assert check_quota_fits([quota], spec, None, 4, "four") is None
    assert check_quota_fits([quota], spec, None, 5, "five") is not None    # 5 x 2Gi and the writers' 64Mi
    batch = parse_spec({**MINIMAL, "parallelism": 3, "verifier": {"command": ["true"]}})   # 5 pods of the pool's
    assert check_quota_outside([_quota({"requests.memory": "10Gi"})], batch, None, spec) is not None
    assert check_quota_outside([_quota({"requests.memory": "10560Mi"})], batch, None, spec) is None


def test_the_overhead_is_added_to_every_request_and_to_the_limits_the_pod_sets():
    spec = parse_spec({**MINIMAL, "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}})
    amounts = pod_resources(spec, {"cpu": "250m", "memory": "120Mi", "example.com/slot": "1"})
    assert amounts["requests"] == {"cpu": Decimal("1.25"), "memory": GI + 120 * 1024 ** 2, "example.com/slot": 1}
    assert amounts["limits"] == {"memory": GI + 120 * 1024 ** 2}                 # no cpu limit: none added
    assert pod_resources(spec, {"cpu": "250m"})["requests"] == {"cpu": Decimal("1.25"), "memory": GI}


_AMOUNT = st.integers(0, 64).map(lambda n: f"{n * 125}m")
_RESOURCES = st.fixed_dictionaries({}, optional={
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), _AMOUNT, max_size=2),
    "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), _AMOUNT, max_size=2)}).filter(
    lambda r: all(Decimal(str(parse_quantity(q))) <= parse_quantity((r.get("limits") or {}).get(k, "1e9"))
                  for k, q in (r.get("requests") or {}).items()))


def _container(resources, resource, kind):
    """One container's amount as the API server stores it: a missing request is its limit."""
    amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})} if kind == "requests" \
        else resources.get("limits") or {}
    return parse_quantity(amounts.get(resource, "0"))


@settings(max_examples=100, deadline=None, database=None)
@given(agent=_RESOURCES.filter(bool), verifier=st.none() | _RESOURCES.filter(bool),
       overhead=st.none() | st.dictionaries(st.sampled_from(["cpu", "memory"]), _AMOUNT, min_size=1))
def test_every_pod_is_charged_as_the_quota_evaluator_counts_it(agent, verifier, overhead):
    batch = parse_spec({**MINIMAL, "resources": agent,
                        **({"verifier": {"command": ["true"], "resources": verifier}} if verifier else {})})
    pool = _pool(agent, verifier={"resources": verifier} if verifier else None)
    for spec, combine in ((batch, max), (pool, sum)):   # init container then container; side by side
        # a pool's pod with a verifier has its files writer beside it (core.pools)
        phases = [agent] + ([verifier] if verifier else []) + \
            ([pool_children.files_writer_resources(pool)] if verifier and spec is pool else [])
        footprint = pod_footprint(spec, overhead)
        for kind in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                amounts = [_container(p, resource, kind) for p in phases]
                set_by_any = any(resource in (p.get(kind) or {}) or kind == "requests" and resource in
                                 (p.get("limits") or {}) for p in phases)
                extra = parse_quantity((overhead or {}).get(resource, "0"))
                want = combine(amounts) + (extra if kind == "requests" or set_by_any else 0)
                got = footprint.get(f"{kind}.{resource}")
                if not set_by_any and (kind == "limits" or resource not in (overhead or {})):
                    assert got is None
                else:
                    assert got == pytest.approx(float(want))
                if kind == "requests" and got is not None:
                    assert footprint[resource] == got
        assert footprint["pods"] == footprint["count/pods"] == 1


# -- what a submitter cannot get through the operator (docs/design.md §8.1) ----------------------
from rolloutbatch.core.admission import Stalled, check_priority_class, input_shards, opted_in  # noqa: E402
from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS  # noqa: E402
from rolloutbatch.core.vocabulary import STALL_INPUTS_INVALID  # noqa: E402
from tests.unit.core.factories import inputs_configmap  # noqa: E402


def _priority_class(value, name="pc"):
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


@pytest.mark.parametrize("value", [1_000_000_001, 2_000_000_000, 2_000_001_000])
def test_a_priority_class_of_the_system_range_is_refused_without_showing_its_value(value):
    message = check_priority_class(_priority_class(value, "critical"))
    assert message and "critical" in message and "system range" in message and str(value) not in message


@pytest.mark.parametrize("value", [1_000_000_000, 1000, 0, -5])
def test_a_priority_class_of_the_user_range_stays_allowed(value):
    assert check_priority_class(_priority_class(value)) is None


@pytest.mark.parametrize("value", [None, "2000001000", True, 1.5])
def test_a_priority_class_without_an_integer_value_is_refused(value):
    assert "no integer value" in check_priority_class(_priority_class(value))


SECRET = {"input-0.json": '{"token": "hunter2"}', "password.txt": "hunter2", "config.yaml": "x" * 5000}


@pytest.mark.parametrize("labels", [None, {}, {LABEL_INPUTS: "false"}, {LABEL_INPUTS: "True"},
                                    {"rl.agentruntime.io/role": "inputs"}])
def test_a_configmap_not_opted_in_is_refused_and_nothing_of_it_is_shown(labels):
    cm = inputs_configmap(SECRET, labels={} if labels is None else labels)
    if labels is None:
        del cm["metadata"]["labels"]
    assert not opted_in(cm)
    with pytest.raises(Stalled) as err:
        input_shards([cm], ["app-secrets"], 1)
    message = str(err.value)
    assert err.value.reason == "InputsNotFound" and "app-secrets" in message
    assert f"{LABEL_INPUTS}={INPUTS_OPT_IN}" in message
    for leak in ("input-0", "password", "config", "hunter2", "5000"):
        assert leak not in message, leak
    # the same answer as for a ConfigMap that does not exist: not even its existence is shown
    with pytest.raises(Stalled) as missing:
        input_shards([None], ["app-secrets"], 1)
    assert (missing.value.reason, missing.value.message) == (err.value.reason, err.value.message)


def test_every_configmap_is_checked_for_the_label_before_any_content():
    good = inputs_configmap({"input-0.json": "{}", "bogus-key": "x"})   # malformed, but opted in
    foreign = inputs_configmap({"input-1.json": "{}", "private.pem": "k"}, labels={})
    with pytest.raises(Stalled) as err:
        input_shards([good, foreign], ["mine", "theirs"], 2)
    assert err.value.reason == "InputsNotFound" and "theirs" in err.value.message
    assert "bogus-key" not in err.value.message and "private" not in err.value.message


def test_opted_in_configmaps_are_read():
    shards = input_shards([inputs_configmap({"input-0.json": '{"a": 1}'})], ["mine"], 1)
    assert shards == [{"input-0.json": '{"a": 1}'}]


_TEXT = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)


@settings(max_examples=150, deadline=None, database=None)
@given(data=st.dictionaries(_TEXT, _TEXT, max_size=6),
       labels=st.dictionaries(_TEXT, _TEXT, max_size=3).filter(lambda d: d.get(LABEL_INPUTS) != INPUTS_OPT_IN),
       count=st.integers(1, 50))
def test_whatever_a_configmap_not_opted_in_holds_the_answer_is_the_same(data, labels, count):
    with pytest.raises(Stalled) as err:
        input_shards([inputs_configmap(data, labels=labels)], ["cm"], count)
    with pytest.raises(Stalled) as missing:
        input_shards([None], ["cm"], count)
    assert (err.value.reason, err.value.message) == (missing.value.reason, missing.value.message)


# -- pods the scheduler cannot place ------------------------------------------------------------
def test_an_impossible_pod_is_told_from_one_waiting_for_room():
    from rolloutbatch.core.admission import fits_an_empty_node
    nodes = [{"cpu": "2", "memory": "64Gi", "pods": "110"}, {"cpu": "4", "memory": "8Gi"}]
    huge = parse_spec({**MINIMAL, "resources": {"requests": {"memory": "1Ei"}, "limits": {"memory": "1Ei"}}})
    assert not fits_an_empty_node(pod_resources(huge, None)["requests"], nodes)
    busy = parse_spec({**MINIMAL, "resources": {"requests": {"memory": "8Gi", "cpu": "1"}}})
    assert fits_an_empty_node(pod_resources(busy, None)["requests"], nodes)          # fits, when there is room
    limits_only = parse_spec({**MINIMAL, "resources": {"limits": {"cpu": "3", "memory": "16Gi"}}})
    assert pod_resources(limits_only, None)["requests"]["cpu"] == Decimal(3)       # the limit stands in
    assert not fits_an_empty_node(pod_resources(limits_only, None)["requests"], nodes)  # no node has 3 cpu and 16Gi
    gpu = parse_spec({**MINIMAL, "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    assert not fits_an_empty_node(pod_resources(gpu, None)["requests"], nodes)
    assert fits_an_empty_node(pod_resources(busy, {"memory": "1Gi"})["requests"], nodes)
    assert not fits_an_empty_node(pod_resources(busy, None)["requests"], [])       # no node at all
    assert fits_an_empty_node(pod_resources(busy, None)["requests"], [{"cpu": "??", "memory": "64Gi"}])   # unreadable


@pytest.mark.parametrize("text", ['{"x": 1e999}', '{"x": -1e400}', '{"x": [1, {"y": 2e308}]}'])
def test_an_input_with_a_number_past_a_doubles_range_is_refused(text):
    """Python reads 1e999 as infinity (the API server's decoder refuses it): no episode is handed
    a number that is not finite."""
    with pytest.raises(Stalled) as refused:
        input_shards([inputs_configmap({"input-0.json": text})], ["inputs"], 1)
    assert refused.value.reason == STALL_INPUTS_INVALID and "range" in str(refused.value)
    assert input_shards([inputs_configmap({"input-0.json": '{"x": 1.5e300}'})], ["inputs"], 1)


@pytest.mark.parametrize("depth", [101, 990])
def test_an_input_by_reference_nested_too_deep_is_refused_as_an_inline_one(depth):
    text = '{"a":' * depth + "1" + "}" * depth
    with pytest.raises(Stalled) as refused:
        input_shards([inputs_configmap({"input-0.json": text})], ["inputs"], 1)
    assert refused.value.reason == STALL_INPUTS_INVALID and "deep" in str(refused.value)


# -- the sandbox's own ResourceQuota admits the pods it is made for --------------------------------
KATA = {"cpu": "250m", "memory": "160Mi"}   # a typical RuntimeClass overhead.podFixed


def _refused_in_sandbox(spec, overhead):
    """What the quota admission of the sandbox refuses ("must specify ..."), by the operator's own model."""
    hard = resource_quota(REF, spec, overhead)["spec"]["hard"]
    return hard, unset_by_containers(episode_pod(spec, overhead), set(hard))


def test_the_sandbox_quota_bounds_no_cpu_the_containers_leave_to_the_overhead():
    # memory set, cpu not: the overhead's cpu becomes requests.cpu in the sandbox's quota, and every
    # pod (whose containers set no cpu) is then refused there: "must specify requests.cpu"
    spec = parse_spec({**MINIMAL, "isolation": {"resourceQuota": True},
                       "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}})
    hard, missing = _refused_in_sandbox(spec, KATA)
    assert not missing, f"the sandbox quota {hard} refuses every episode pod: {missing}"


def test_the_sandbox_quota_bounds_no_memory_one_phase_leaves_unset():
    spec = parse_spec({**MINIMAL, "isolation": {"resourceQuota": True},
                       "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                       "verifier": {"command": ["true"], "resources": {"requests": {"memory": "256Mi"}}}})
    hard, missing = _refused_in_sandbox(spec, None)
    assert not missing, f"the sandbox quota {hard} refuses every episode pod: {missing}"


# -- exact fits: quantities compared exactly, as the quota admission does ---------------------------


def _quota(hard, used=None):
    return {"metadata": {"name": "team"}, "status": {"hard": hard, "used": used or {}}}


def test_a_dedicated_batch_that_exactly_fits_what_the_quota_leaves_is_admitted():
    # parallelism 1 + 2 terminating = 3 pods of 100m: exactly the 300m the quota holds
    spec = parse_spec({**MINIMAL, "parallelism": 1,
                       "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                     "limits": {"cpu": "100m", "memory": "64Mi"}}})
    problem = check_quota_outside([_quota({"requests.cpu": "300m"})], spec, None)
    assert problem is None, problem


def test_a_shared_pod_that_exactly_fits_what_the_quota_leaves_is_admitted():
    spec = parse_spec({**MINIMAL, "resources": {"requests": {"cpu": "300m", "memory": "64Mi"},
                                                "limits": {"cpu": "300m", "memory": "64Mi"}}})
    problem = check_quota_fits([_quota({"requests.cpu": "1200m"}, {"requests.cpu": "900m"})], spec, None)
    assert problem is None, problem


# -- quota scopes: a pod is in a scope as Kubernetes' quota evaluator decides it -------------------
# (pkg/quota/v1/evaluator/core/pods.go, podMatchesScopeFunc)
from rolloutbatch.core.k8s_rules import best_effort  # noqa: E402

REQUESTED = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}


def _scoped(hard, used=None, name="scoped", scopes=None, selector=None):
    spec = {"hard": hard, **({"scopes": scopes} if scopes else {}),
            **({"scopeSelector": {"matchExpressions": selector}} if selector else {})}
    return {"metadata": {"name": name}, "spec": spec, "status": {"hard": hard, "used": used or {}}}


def _full(**scope):
    """A quota of one pod, in use: it refuses every pod it charges."""
    return _scoped({"pods": "1"}, {"pods": "1"}, **scope)


@pytest.mark.parametrize("resources", [{"requests": {"cpu": "0", "memory": "0"}},
                                       {"requests": {"cpu": "0m"}, "limits": {"memory": "0Gi"}}])
def test_a_pod_whose_cpu_and_memory_are_all_zero_is_best_effort(resources):
    """qos.GetPodQOS (the evaluator's isBestEffort) counts only amounts above zero: such a pod is
    charged to a BestEffort quota (the API server refuses it when full) and never to NotBestEffort."""
    spec = parse_spec({**MINIMAL, "resources": resources})
    assert best_effort(episode_pod(spec, None))
    assert check_quota_fits([_full(scopes=["BestEffort"])], spec, None) is not None
    assert check_quota_fits([_full(scopes=["NotBestEffort"])], spec, None) is None
    requested = parse_spec({**MINIMAL, "resources": {"requests": {"cpu": "0", "memory": "1Mi"}}})
    assert not best_effort(episode_pod(requested, None))
    assert check_quota_fits([_full(scopes=["BestEffort"])], requested, None) is None


SHARED = {**MINIMAL, "isolation": {"namespace": "Shared"}, "resources": REQUESTED}


@pytest.mark.parametrize("scope", [{"scopes": ["NotTerminating"]},
                                   {"selector": [{"scopeName": "NotTerminating", "operator": "Exists"}]}])
def test_a_full_not_terminating_quota_does_not_hold_a_batchs_pods(scope):
    """Every pod of a batch's Job has an activeDeadlineSeconds: a NotTerminating quota (the usual one
    for a namespace's long-running services) never charges it, a Terminating one does. Neither a
    Shared batch, nor a Dedicated one, nor its sandbox is held to the first."""
    shared = parse_spec(SHARED)
    assert check_quota_fits([_full(**scope)], shared, None) is None
    assert check_quota_fits([_full(scopes=["Terminating"])], shared, None) is not None
    dedicated = parse_spec({**SHARED, "isolation": {"namespace": "Dedicated"}, "episodes": 10, "parallelism": 10})
    assert check_quota_outside([_full(**scope)], dedicated, None) is None
    assert not quotas_bound([_full(**scope)], dedicated, None)   # no sandbox ResourceQuota for it
    assert check_quota_outside([_full(scopes=["Terminating"])], dedicated, None) is not None
    assert quotas_bound([_full(scopes=["Terminating"])], dedicated, None)


def test_a_pools_warm_pods_are_not_terminating_and_a_pooled_batchs_pods_are():
    """A warm pod has no deadline until it is claimed: a pool is held to a NotTerminating quota, not
    a Terminating one. A pooled batch's pods carry its deadline (a cold pod from the Job's
    template, a claimed one from its claim): the other way round."""
    pool = _pool(REQUESTED)
    assert check_quota_fits([_full(scopes=["NotTerminating"])], pool, None, pool.size) is not None
    assert check_quota_fits([_full(scopes=["Terminating"])], pool, None, pool.size) is None
    batch = parse_spec({"episodes": 3, "poolRef": {"name": "warm"}})
    assert check_quota_outside([_full(scopes=["Terminating"])], batch, None, pool) is not None
    assert check_quota_outside([_full(scopes=["NotTerminating"])], batch, None, pool) is None


@pytest.mark.parametrize("operator, values, charges_classless, charges_gold", [
    ("Exists", None, False, True), ("DoesNotExist", None, True, False),
    ("In", ["gold"], False, True), ("In", [""], False, False),
    ("NotIn", ["gold"], True, False), ("NotIn", [""], True, True)])
def test_a_priority_class_scope_matches_as_a_label_selector_on_the_class(operator, values, charges_classless,
                                                                         charges_gold):
    """podMatchesSelector: the class is a label PriorityClass=<name>, absent when the pod names none."""
    expression = {"scopeName": "PriorityClass", "operator": operator, **({"values": values} if values else {})}
    quota = _full(selector=[expression])
    classless = parse_spec(SHARED)
    gold = parse_spec({**SHARED, "podTemplate": {"priorityClassName": "gold"}})
    assert (check_quota_fits([quota], classless, None) is not None) == charges_classless
    assert (check_quota_fits([quota], gold, None) is not None) == charges_gold


@pytest.mark.parametrize("affinity, crosses", [
    (None, False),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}]}}, False),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "namespaceSelector": {}}]}}, True),
    ({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "zone", "namespaces": ["other"]}}]}}, True)])
def test_a_cross_namespace_pod_affinity_scope_charges_only_pods_whose_affinity_reaches_other_namespaces(affinity,
                                                                                                       crosses):
    """The admin's way to forbid cross-namespace affinity is a quota of 0 pods scoped to it: it holds
    the pods with such a term (usesCrossNamespacePodAffinity), no other."""
    spec = parse_spec({**SHARED, **({"podTemplate": {"affinity": affinity}} if affinity else {})})
    quota = _scoped({"pods": "0"}, scopes=["CrossNamespacePodAffinity"])
    assert (check_quota_fits([quota], spec, None) is not None) == crosses


from rolloutbatch.core.k8s_rules import guaranteed  # noqa: E402


@pytest.mark.parametrize("resources, expected", [
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1024Mi"}}, True),  # spelt apart
    ({"limits": {"cpu": "500m", "memory": "256Mi"}}, True),                           # requests from limits
    ({"requests": {"cpu": "1"}, "limits": {"cpu": "1", "memory": "1Gi"}}, True),      # memory request from its limit
    ({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, False),
    ({"limits": {"cpu": "1"}}, False),                                                # no memory limit
    ({}, False),
])
def test_a_container_is_guaranteed_as_getpodqos_reads_its_amounts(resources, expected):
    """Quantities compared as amounts (1 and 1000m are one CPU), a missing request its limit."""
    assert guaranteed({"resources": resources}) is expected
