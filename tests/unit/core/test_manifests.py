"""Manifest builders, checked against golden files (UPDATE_GOLDEN=1 rewrites them)."""
import json
import os
import pathlib

import pytest

from rolloutbatch.core import manifests, naming
from rolloutbatch.core.admission import check_quota_fits, pod_footprint
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.results import decode_results, encode_results, results_document, results_from_document
from rolloutbatch.core.spec import format_quantity, parse_quantity, parse_spec
from rolloutbatch.core.stats import summarize

GOLDEN = pathlib.Path(__file__).parent / "golden"
REF = BatchRef("rl-team", "shipping-fix", "7d9f22ce-635d-43fa-a74a-411b5a0b7096", 1)
RAW = {"episodes": 10, "parallelism": 4, "runtimeClassName": "cube",
       "task": {"files": {"episode.py": "print('hi')"}}, "inputs": [{"i": i} for i in range(10)],
       "env": [{"name": "MODEL", "value": "m1"}], "podTemplate": {"nodeSelector": {"pool": "rl"}}}
OWNER = manifests.owner_reference("rl.agentruntime.io/v1alpha1", "RolloutBatch", REF.name, REF.uid)


def objects(isolation):
    spec = parse_spec({**RAW, "isolation": {"namespace": isolation}})
    owner = OWNER if isolation == "Shared" else None
    objs = [manifests.network_policy(REF, spec), manifests.resource_quota(REF, spec, {"cpu": "250m", "memory": "120Mi"}),
            manifests.task_configmap(REF, spec, owner), manifests.inputs_configmap(REF, spec, owner),
            manifests.job(REF, spec, owner)]
    if isolation == "Dedicated":
        objs.insert(0, manifests.namespace(REF, spec))
    return objs


@pytest.mark.parametrize("isolation", ["Dedicated", "Shared"])
def test_golden(isolation):
    path = GOLDEN / f"{isolation.lower()}.json"
    text = json.dumps(objects(isolation), indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, "manifests drifted: rerun with UPDATE_GOLDEN=1 and review the diff"


def test_security_defaults_of_the_episode_pod():
    job = manifests.job(REF, parse_spec(RAW), None)
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsUser"] == 1000
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]}["/task"] is True
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert job["spec"]["backoffLimitPerIndex"] == 2 and job["spec"]["completionMode"] == "Indexed"
    names = [e["name"] for e in c["env"]]
    assert names.index("EPISODE_INDEX") < names.index("EPISODE_INPUT")


def test_quota_includes_the_runtime_overhead():
    spec = parse_spec(RAW)
    hard = manifests.resource_quota(REF, spec, {"cpu": "250m", "memory": "120Mi"})["spec"]["hard"]
    assert hard["pods"] == "6" and hard["limits.cpu"] == "4500m" and hard["limits.memory"] == "1488Mi"


def test_quota_that_cannot_hold_one_pod_is_reported():
    spec = parse_spec(RAW)
    quota = {"metadata": {"name": "tight"}, "status": {"hard": {"limits.memory": "100Mi"}, "used": {}}}
    assert "tight" in check_quota_fits([quota], spec, None)
    roomy = {"metadata": {"name": "ok"}, "status": {"hard": {"limits.memory": "10Gi"}, "used": {"limits.memory": "1Gi"}}}
    assert check_quota_fits([roomy], spec, None) is None
    assert pod_footprint(spec, {"cpu": "250m"})["requests.cpu"] == pytest.approx(0.35)


@pytest.mark.parametrize("text,value", [("500m", 0.5), ("128Mi", 134217728), ("1.5", 1.5), ("2k", 2000), ("1Gi", 2**30)])
def test_quantities(text, value):
    assert float(parse_quantity(text)) == pytest.approx(value)
    assert parse_quantity(format_quantity(parse_quantity(text))) == parse_quantity(text)


@pytest.mark.parametrize("raw,field", [
    ({"episodes": 2, "parallelism": 3, "task": {"files": {"a": "x"}}}, "spec.parallelism"),
    ({"episodes": 2, "task": {"files": {"../a": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "inputs": [{}], "task": {"files": {"a": "x"}}}, "spec.inputs"),
    ({"episodes": 2, "task": {"files": {"a": "x" * 1000000}}}, "spec.task"),
    ({"episodes": 2, "env": [{"name": "EPISODE_ID"}], "task": {"files": {"a": "x"}}}, "spec.env"),
    ({"task": {"files": {"a": "x"}}}, "spec.episodes"),
])
def test_spec_errors_name_the_field(raw, field):
    with pytest.raises(SpecError) as err:
        parse_spec(raw)
    assert err.value.field == field


def test_spec_defaults():
    spec = parse_spec({"episodes": 3, "task": {"files": {"episode.py": "x"}}})
    assert (spec.parallelism, spec.min_successful_episodes, spec.isolation_namespace, spec.cleanup_sandbox) == \
        (3, 3, "Dedicated", "DeleteOnSuccess")
    assert spec.command == ("python", "-B", "/task/episode.py")


def test_names_are_deterministic_and_short():
    assert naming.sandbox_namespace(REF) == "rb-7d9f22ce63" == naming.job_name(REF)
    assert naming.results_configmap_name(BatchRef("n", "x" * 300, "u")).endswith("-results")
    assert len(naming.label_value("a" * 100 + "-")) <= 63


def test_results_round_trip_and_gzip_when_large():
    from tests.unit.core.test_stats_status import result
    rows = [result(i).replace(log_tail="x" * 3000) for i in range(400)]
    doc = results_document(ref=REF, spec=parse_spec(RAW), summary=summarize(rows, episodes=400, origin=100.0),
                           results=rows, origin=100.0, extra={"client_job_complete_seconds": 5.0})
    data, binary = encode_results(doc)
    assert not data and "results.json.gz" in binary
    back = decode_results({"binaryData": binary})
    assert back["successful_episodes"] == 400 and back["client_job_complete_seconds"] == 5.0
    restored = results_from_document(back)
    assert restored[7] == rows[7]
    small, _ = encode_results({"pods": []})
    assert "results.json" in small
    assert decode_results({"data": {"results.json": "{broken"}}) is None
