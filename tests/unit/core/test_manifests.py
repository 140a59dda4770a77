"""Manifest builders, checked against golden files (UPDATE_GOLDEN=1 rewrites them; review the diff)."""
import json
import os
import pathlib

import pytest

from rolloutbatch.core import manifests, naming
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL, RAW, REF

GOLDEN = pathlib.Path(__file__).parent / "golden"
OWNER = manifests.owner_reference("rl.agentruntime.io/v1alpha1", "RolloutBatch", REF.name, REF.uid)
JOB_OWNER = manifests.owner_reference("batch/v1", "Job", naming.job_name(REF), "job-uid")


def objects(isolation):
    spec = parse_spec({**RAW, "isolation": {"namespace": isolation}})
    # As the reconciler creates them: Dedicated children are removed with their namespace,
    # Shared children are owned by the RolloutBatch.
    owner = OWNER if isolation == "Shared" else None
    objs = [manifests.task_configmap(REF, spec, owner), manifests.inputs_configmap(REF, spec, owner),
            manifests.job(REF, spec, owner)]
    if isolation == "Shared":
        objs.insert(0, manifests.network_policy(REF, spec, owner))
    if isolation == "Dedicated":
        objs[:0] = [manifests.namespace(REF, spec), manifests.network_policy(REF, spec),
                    manifests.resource_quota(REF, spec, {"cpu": "250m", "memory": "120Mi"})]
    return objs


@pytest.mark.parametrize("isolation", ["Dedicated", "Shared"])
def test_golden(isolation):
    path = GOLDEN / f"{isolation.lower()}.json"
    text = json.dumps(objects(isolation), indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, "manifests drifted: rerun with UPDATE_GOLDEN=1 and review the diff"


def test_every_object_carries_the_owner_labels():
    for isolation in ("Dedicated", "Shared"):
        for obj in objects(isolation):
            assert naming.owner_labels(REF).items() <= obj["metadata"]["labels"].items(), obj["kind"]


def test_namespace_enforces_restricted_psa():
    labels = manifests.namespace(REF, parse_spec(RAW))["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "latest"
    assert labels[naming.LABEL_BATCH_UID] == REF.uid


def test_security_defaults_of_the_episode_pod():
    job = manifests.job(REF, parse_spec(RAW), None)
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["name"] == naming.CONTAINER_NAME and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]}
    assert mounts == {"/task": True, "/rollout/inputs": True, "/workspace": False}
    assert {v["name"]: v for v in pod["volumes"]}["workspace"]["emptyDir"] == {"sizeLimit": "1Gi"}
    assert pod["activeDeadlineSeconds"] == 600 and pod["terminationGracePeriodSeconds"] == 5
    assert pod["runtimeClassName"] == "cube" and pod["nodeSelector"] == {"pool": "rl"}


def test_job_shape_and_failure_policy():
    spec = parse_spec(RAW)
    job = manifests.job(REF, spec, None)["spec"]
    assert (job["completions"], job["parallelism"], job["completionMode"], job["backoffLimitPerIndex"]) == \
        (10, 4, "Indexed", 2)
    assert job["activeDeadlineSeconds"] == 3600 and "ttlSecondsAfterFinished" not in job
    count, inputs, fail = job["podFailurePolicy"]["rules"]
    assert count == {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert inputs == {"action": "FailIndex", "onExitCodes": {"containerName": "inputs", "operator": "NotIn",
                                                             "values": [0]}}
    assert fail == {"action": "FailIndex", "onExitCodes": {"containerName": "episode", "operator": "NotIn",
                                                           "values": [0]}}
    assert job["template"]["metadata"]["labels"][naming.LABEL_EPISODE_ROLE] == "episode"


def test_env_contract_and_expansion_order():
    env = manifests.job(REF, parse_spec(RAW), None)["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names == ["EPISODE_ID", "EPISODE_INDEX", "BATCH_NAME", "EPISODE_GROUP", "EPISODE_SAMPLE", "EPISODE_INPUT",
                     "MODEL"]
    by = {e["name"]: e for e in env}
    assert by["EPISODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "job-completion-index" in by["EPISODE_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert by["EPISODE_INPUT"]["value"] == "/rollout/inputs/input-$(EPISODE_INDEX).json"
    no_inputs = manifests.job(REF, parse_spec(MINIMAL), None)["spec"]["template"]["spec"]
    assert "EPISODE_INPUT" not in [e["name"] for e in no_inputs["containers"][0]["env"]]
    assert "inputs" not in [v["name"] for v in no_inputs["volumes"]]


def test_node_loss_tolerations_are_added_to_the_users():
    user = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    spec = parse_spec({**MINIMAL, "podTemplate": {"tolerations": [user], "priorityClassName": "rl-low"}})
    pod = manifests.job(REF, spec, None)["spec"]["template"]["spec"]
    assert pod["tolerations"][0] == user and pod["priorityClassName"] == "rl-low"
    lost = {t["key"]: t["tolerationSeconds"] for t in pod["tolerations"][1:]}
    assert lost == {"node.kubernetes.io/not-ready": 30, "node.kubernetes.io/unreachable": 30}
    assert "runtimeClassName" not in pod


@pytest.mark.parametrize("isolation,network,selector,types", [
    ("Dedicated", "DenyAll", {}, ["Ingress", "Egress"]),
    ("Dedicated", "AllowEgress", {}, ["Ingress"]),
    ("Shared", "DenyAll", {"matchLabels": {naming.LABEL_BATCH_UID: REF.uid}}, ["Ingress", "Egress"]),
])
def test_network_policy(isolation, network, selector, types):
    spec = parse_spec({**MINIMAL, "isolation": {"namespace": isolation, "network": network}})
    body = manifests.network_policy(REF, spec)["spec"]
    assert body == {"podSelector": selector, "policyTypes": types}


def test_quota_includes_the_runtime_overhead():
    spec = parse_spec(RAW)   # parallelism 4 (+2 slack); limits 500m/128Mi + overhead 250m/120Mi
    hard = manifests.resource_quota(REF, spec, {"cpu": "250m", "memory": "120Mi"})["spec"]["hard"]
    assert hard == {"pods": "6", "limits.cpu": "4500m", "limits.memory": "1488Mi",
                    "requests.cpu": "2100m", "requests.memory": "1104Mi"}
    plain = manifests.resource_quota(REF, spec, None)["spec"]["hard"]
    assert plain["limits.cpu"] == "3" and plain["requests.memory"] == "384Mi"


def test_configmaps():
    spec = parse_spec(RAW)
    task = manifests.task_configmap(REF, spec, JOB_OWNER)
    assert task["data"] == {"episode.py": "print('hi')"} and task["immutable"] is True
    assert task["metadata"]["ownerReferences"] == [JOB_OWNER] and task["metadata"]["namespace"] == "rb-7d9f22ce63"
    inputs = manifests.inputs_configmap(REF, spec, JOB_OWNER)
    assert sorted(inputs["data"]) == sorted(f"input-{i}.json" for i in range(10))
    assert json.loads(inputs["data"]["input-3.json"]) == {"i": 3}
    assert manifests.inputs_configmap(REF, parse_spec(MINIMAL), None) is None


def test_owner_reference():
    assert OWNER == {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "name": REF.name,
                     "uid": REF.uid, "controller": True, "blockOwnerDeletion": True}
    assert manifests.owner_reference("v1", "X", "n", "u", controller=False)["controller"] is False


def test_results_configmap_lives_beside_the_batch():
    cm = manifests.results_configmap(REF, {"pods": []}, OWNER)
    assert cm["metadata"]["name"] == "shipping-fix-results" and cm["metadata"]["namespace"] == "rl-team"
    assert "results.json" in cm["data"] and "binaryData" not in cm


# -- groups and inputs by reference ------------------------------------------------
def test_groups_of_k_get_their_group_sample_and_input_from_a_launcher():
    spec = parse_spec({**MINIMAL, "episodes": 6, "samplesPerInput": 3, "inputs": [{"a": 1}, {"a": 2}]})
    container = manifests.job(REF, spec, None)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["args"] == list(spec.command)
    script = container["command"][2]
    assert "$$((EPISODE_INDEX / 3))" in script and "$$((EPISODE_INDEX % 3))" in script
    assert 'exec "$$@"' in script and "input-$${EPISODE_GROUP}.json" in script
    names = [e["name"] for e in container["env"]]
    assert "EPISODE_GROUP" not in names and "EPISODE_INPUT" not in names   # the launcher sets them


def test_the_launcher_script_computes_group_and_sample(tmp_path):
    """Run the launcher exactly as a kubelet would: $(VAR) expansion ($$ -> $), then /bin/sh."""
    import subprocess

    spec = parse_spec({**MINIMAL, "episodes": 8, "samplesPerInput": 4, "inputs": [{"a": 1}, {"a": 2}]})
    container = manifests.job(REF, spec, None)["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][2].replace("$$", "$")
    for index, want in ((0, "0 0"), (3, "0 3"), (4, "1 0"), (7, "1 3")):
        out = subprocess.run(["/bin/sh", "-c", script, "rolloutbatch-episode", "/bin/sh", "-c",
                              'echo "$EPISODE_GROUP $EPISODE_SAMPLE $EPISODE_INPUT"'],
                             env={"EPISODE_INDEX": str(index), "PATH": "/usr/bin:/bin"}, capture_output=True,
                             text=True, check=True).stdout.split()
        assert " ".join(out[:2]) == want and out[2] == f"/rollout/inputs/input-{want.split()[0]}.json"


def test_inputs_by_reference_mount_every_copied_shard_in_one_directory_of_the_inputs_container():
    spec = parse_spec({**MINIMAL, "episodes": 4, "inputsFrom": {"configMaps": ["a", "b"], "count": 4}})
    pod = manifests.job(REF, spec, None)["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "inputs-source")
    assert [s["configMap"]["name"] for s in volume["projected"]["sources"]] == \
        [naming.inputs_shard_name(REF, 0), naming.inputs_shard_name(REF, 1)]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["EPISODE_INPUT"] == "/rollout/inputs/input-$(EPISODE_INDEX).json"
    assert env["EPISODE_GROUP"] == "$(EPISODE_INDEX)" and env["EPISODE_SAMPLE"] == "0"
