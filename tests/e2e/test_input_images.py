"""spec.inputImages on the devcluster: one batch, an image per input, the same rows and groups."""
from __future__ import annotations

import json
import time

import pytest

from rolloutbatch.core.naming import IMAGE_GATE
from tests.support import kube
from tests.support.batches import apply, episode_batch, get, results, unique, wait_finished, wait_status
from tests.support.operator import kubectl
from tests.support.tenant import Tenant

pytestmark = [pytest.mark.cluster]

PROGRAM = r'''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); time.sleep(float(os.environ.get("HOLD", "0"))); emit("reward", reward=int(os.environ["EPISODE_GROUP"]))
'''
VERIFY = r'''
import json, os, time
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": os.environ["EPISODE_ID"], "reward": 1.0}))
'''
IMAGES = ["python:3.12-alpine", "python:3.11", "python:3.12-slim"]


def _pods(namespace: str, job: str) -> dict[int, dict]:
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return {int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]): p
            for p in pods if p["metadata"]["name"].startswith(f"{job}-")}


@pytest.mark.parametrize("verifier", [False, True])
def test_each_input_runs_in_its_own_image_in_one_batch(operator_process, namespace, verifier):
    k = 2
    spec = dict(episodes=k * len(IMAGES), samplesPerInput=k, inputImages=IMAGES,
                inputs=[{"g": g} for g in range(len(IMAGES))], cleanup={"sandbox": "Never"})
    if verifier:
        spec["verifier"] = {"files": {"verify.py": VERIFY}, "timeoutSeconds": 60}
    name = unique("images")
    apply(episode_batch(name, PROGRAM, **spec), namespace)
    obj = wait_finished(name, namespace, timeout=180, operator=operator_process)
    st = obj["status"]
    assert st["phase"] == "Succeeded", st
    doc = results(name, namespace)
    assert sorted(r["index"] for r in doc["pods"]) == list(range(k * len(IMAGES)))
    assert [e["group"] for e in doc["groups"]] == list(range(len(IMAGES)))
    pods = _pods(st["sandboxNamespace"], st["jobName"])
    assert sorted(pods) == list(range(k * len(IMAGES)))
    for index, pod in pods.items():
        want = IMAGES[index // k]
        containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        assert {c["image"] for c in containers} == {want}, (index, containers)
        assert not pod["spec"].get("schedulingGates"), pod["spec"]
        statuses = pod["status"].get("containerStatuses", []) + pod["status"].get("initContainerStatuses", [])
        assert statuses and all(s["image"].endswith(want) for s in statuses), statuses


def test_a_neighbours_gated_pod_in_a_shared_namespace_is_never_given_an_image(operator_process, kube_api):
    """A pod the batch's Job did not make keeps its gate: the operator patches only its own pods."""
    shared = kube.create_namespace(kube_api, "shared")
    try:
        tenant = Tenant(shared)
        name = unique("images")
        created = apply(episode_batch(name, PROGRAM, episodes=2, inputImages=["python:3.11", "python:3.12-slim"],
                                      env=[{"name": "HOLD", "value": "6"}], isolation={"namespace": "Shared"}),
                        shared)
        uid = created["metadata"]["uid"]
        wait_status(name, shared, lambda st: st.get("phase") == "Running", operator=operator_process)
        job = get(name, shared)["status"]["jobName"]
        forged = kube.simple_pod(f"{job}-1-forge", "print('x')")
        forged["metadata"].update(labels={"rl.agentruntime.io/batch-uid": uid},
                                  annotations={"batch.kubernetes.io/job-completion-index": "1"})
        forged["spec"]["containers"][0]["name"] = "episode"   # the template's shape: only ownership protects it
        forged["spec"]["schedulingGates"] = [{"name": IMAGE_GATE}]
        tenant.create(forged)
        st = wait_finished(name, shared, timeout=180, operator=operator_process)["status"]
        assert st["phase"] == "Succeeded" and st["succeededEpisodes"] == 2, st
        time.sleep(1)
        live = json.loads(kubectl("get", "pod", forged["metadata"]["name"], "-n", shared, "-o", "json").stdout)
        assert live["spec"]["schedulingGates"] == [{"name": IMAGE_GATE}]
        assert live["spec"]["containers"][0]["image"] == forged["spec"]["containers"][0]["image"]
    finally:
        kube.delete_namespace(kube_api, shared)


def test_input_images_that_do_not_add_up_are_refused_by_the_api(namespace):
    body = episode_batch(unique("images"), PROGRAM, episodes=4, samplesPerInput=2, inputImages=["a", "b", "c"])
    body["metadata"]["namespace"] = namespace
    out = kubectl("create", "-f", "-", input=json.dumps(body), check=False)
    assert out.returncode != 0 and "spec.inputImages must be empty or have exactly" in out.stderr, out.stderr
