"""Can a cluster's quotas hold one episode pod (with the RuntimeClass overhead)?"""
import pytest

from rolloutbatch.core.admission import check_quota_fits, pod_footprint, runtime_overhead
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


# -- what a submitter cannot get through the operator (docs/design.md §8.1) ----------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

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
    from decimal import Decimal

    from rolloutbatch.core.admission import fits_an_empty_node, scheduling_requests
    nodes = [{"cpu": "2", "memory": "64Gi", "pods": "110"}, {"cpu": "4", "memory": "8Gi"}]
    huge = parse_spec({**MINIMAL, "resources": {"requests": {"memory": "1Ei"}, "limits": {"memory": "1Ei"}}})
    assert not fits_an_empty_node(scheduling_requests(huge, None), nodes)
    busy = parse_spec({**MINIMAL, "resources": {"requests": {"memory": "8Gi", "cpu": "1"}}})
    assert fits_an_empty_node(scheduling_requests(busy, None), nodes)          # fits, when there is room
    limits_only = parse_spec({**MINIMAL, "resources": {"limits": {"cpu": "3", "memory": "16Gi"}}})
    assert scheduling_requests(limits_only, None)["cpu"] == Decimal(3)       # the limit stands in
    assert not fits_an_empty_node(scheduling_requests(limits_only, None), nodes)  # no node has 3 cpu and 16Gi
    gpu = parse_spec({**MINIMAL, "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    assert not fits_an_empty_node(scheduling_requests(gpu, None), nodes)
    assert fits_an_empty_node(scheduling_requests(busy, {"memory": "1Gi"}), nodes)
    assert not fits_an_empty_node(scheduling_requests(busy, None), [])       # no node at all
    assert fits_an_empty_node(scheduling_requests(busy, None), [{"cpu": "??", "memory": "64Gi"}])   # unreadable


@pytest.mark.parametrize("text", ['{"x": 1e999}', '{"x": -1e400}', '{"x": [1, {"y": 2e308}]}'])
def test_an_input_with_a_number_past_a_doubles_range_is_refused(text):
    """Python reads 1e999 as infinity (the API server's decoder refuses it): no episode is handed
    a number that is not finite."""
    with pytest.raises(Stalled) as refused:
        input_shards([inputs_configmap({"input-0.json": text})], ["inputs"], 1)
    assert refused.value.reason == STALL_INPUTS_INVALID and "range" in str(refused.value)
    assert input_shards([inputs_configmap({"input-0.json": '{"x": 1.5e300}'})], ["inputs"], 1)
