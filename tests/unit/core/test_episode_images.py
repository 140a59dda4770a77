"""spec.inputImages: parsing, the image of each episode, the gated Job and the patch of a gated pod."""
import dataclasses

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import manifests, naming
from rolloutbatch.core.episode_images import container_images, episode_image, image_patch, needs_image
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import MAX_INPUT_IMAGES_BYTES, parse_spec
from rolloutbatch.core.pod_reading import pod_facts
from tests.unit.core.factories import MINIMAL, REF

FOUR = {**MINIMAL, "episodes": 8, "samplesPerInput": 2, "inputs": [{"i": i} for i in range(4)],
        "inputImages": ["repo-a:1", "", "repo-c:1", "registry.example/repo-d@sha256:" + "a" * 64]}
VERIFIER = {"files": {"verify.py": "x"}}


def test_one_image_per_input_with_empty_entries_keeping_spec_image():
    spec = parse_spec(FOUR)
    assert spec.input_images == ("repo-a:1", "python:3.12-alpine", "repo-c:1", FOUR["inputImages"][3])
    assert [episode_image(spec, i) for i in range(8)] == [img for img in spec.input_images for _ in range(2)]


@pytest.mark.parametrize("images", [None, [], ["", "", "", ""], ["python:3.12-alpine"] * 4])
def test_a_batch_of_one_image_is_not_gated(images):
    raw = {k: v for k, v in FOUR.items() if k != "inputImages"}
    if images is not None:
        raw["inputImages"] = images
    spec = parse_spec(raw)
    assert spec.input_images == ()
    assert "schedulingGates" not in manifests.job(REF, spec, None)["spec"]["template"]["spec"]


@pytest.mark.parametrize("images, words", [
    (["a", "b", "c"], "one per input (group) is 4"),
    ("a", "must be a list"),
    (["a", "b", "c", 3], "spec.inputImages[3]"),
    (["a", "b", "c", "has space"], "spec.inputImages[3]"),
    (["a", "b", "c", "x" * 513], "spec.inputImages[3]"),
])
def test_bad_input_images_are_refused_naming_the_entry(images, words):
    with pytest.raises(SpecError) as err:
        parse_spec({**FOUR, "inputImages": images})
    assert words in str(err.value)


def test_input_images_are_one_per_group_also_without_inputs():
    spec = parse_spec({**MINIMAL, "episodes": 4, "samplesPerInput": 2, "inputImages": ["a", "b"]})
    assert [episode_image(spec, i) for i in range(4)] == ["a", "a", "b", "b"]


def test_input_images_are_bounded_in_size():
    groups = 2000
    raw = {**MINIMAL, "episodes": groups, "inputImages": ["r/" + "x" * 300 + f":{g}" for g in range(groups)]}
    with pytest.raises(SpecError) as err:
        parse_spec(raw)
    assert str(MAX_INPUT_IMAGES_BYTES) in str(err.value)


def test_the_verifier_follows_the_input_image_unless_it_names_its_own():
    spec = parse_spec({**FOUR, "verifier": VERIFIER})
    # the inputs init container runs the agent's image (no second pull), before the agent
    assert container_images(spec, 2) == (("initContainers", "inputs", 0, "python:3.12-alpine"),
                                         ("initContainers", "agent", 1, "python:3.12-alpine"),
                                         ("containers", "verifier", 0, "python:3.12-alpine"))
    assert container_images(spec, 0)[2][3] == "repo-a:1"
    own = parse_spec({**FOUR, "verifier": {**VERIFIER, "image": "grader:1"}})
    assert [c[3] for c in container_images(own, 0)] == ["repo-a:1", "repo-a:1", "grader:1"]
    bare = parse_spec({k: v for k, v in FOUR.items() if k != "inputs"} | {"verifier": VERIFIER})
    assert [c[:3] for c in container_images(bare, 0)] == [("initContainers", "agent", 0),
                                                         ("containers", "verifier", 0)]
    plain = parse_spec({k: v for k, v in FOUR.items() if k != "inputImages"} | {"verifier": VERIFIER})
    assert not plain.verifier.follows_episode_image


def _pod(spec, index, gates=None, uid="u-1"):
    """A pod as the Job controller makes it from the batch's template."""
    template = manifests.job(REF, spec, None)["spec"]["template"]
    pod_spec = dict(template["spec"])
    if gates is not None:
        pod_spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": {"name": f"{naming.job_name(REF)}-{index}-abcde", "namespace": "sb", "uid": uid,
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": pod_spec, "status": {"phase": "Pending"}}


@pytest.mark.parametrize("inputs", [True, False])
@pytest.mark.parametrize("verifier", [None, VERIFIER, {**VERIFIER, "image": "grader:1"}])
@given(index=st.integers(0, 7), other_gates=st.lists(st.sampled_from(["a.io/x", "b.io/y"]), unique=True))
def test_the_patch_gives_the_pod_its_images_and_lifts_only_the_batch_gate(inputs, verifier, index, other_gates):
    raw = FOUR if inputs else {k: v for k, v in FOUR.items() if k != "inputs"}
    raw = raw if verifier is None else {**raw, "verifier": verifier}
    spec = parse_spec(raw)
    pod = _pod(spec, index, gates=[naming.IMAGE_GATE, *other_gates])
    facts = pod_facts(pod)
    assert needs_image(spec, facts)
    patched = jsonpatch.apply_patch(pod, image_patch(spec, facts))
    for kind, name, position, image in container_images(spec, index):
        assert patched["spec"][kind][position] == {**pod["spec"][kind][position], "image": image}
    assert [g["name"] for g in patched["spec"].get("schedulingGates", [])] == other_gates
    assert not needs_image(spec, pod_facts(patched))   # handled once: the next snapshot is left alone
    untouched = {k: v for k, v in patched["spec"].items() if k not in ("containers", "initContainers",
                                                                        "schedulingGates")}
    assert untouched == {k: v for k, v in pod["spec"].items() if k not in ("containers", "initContainers",
                                                                           "schedulingGates")}


def test_the_template_is_gated_and_runs_spec_image_until_patched():
    spec = parse_spec(FOUR)
    template = manifests.job(REF, spec, None)["spec"]["template"]["spec"]
    assert template["schedulingGates"] == [{"name": naming.IMAGE_GATE}]
    assert template["containers"][0]["image"] == spec.image


@pytest.mark.parametrize("change", [
    lambda pod: pod["metadata"].update(uid="u-2"),                        # a namesake
    lambda pod: pod["spec"].update(schedulingGates=[]),                    # gate lifted meanwhile
    lambda pod: pod["spec"]["containers"][0].update(name="other"),         # not the template's shape
])
def test_the_patch_fails_on_a_pod_that_is_not_as_seen(change):
    spec = parse_spec(FOUR)
    pod = _pod(spec, 1, gates=[naming.IMAGE_GATE])
    ops = image_patch(spec, pod_facts(pod))
    change(pod)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(pod, ops)


def test_pods_not_waiting_for_an_image_are_left_alone():
    spec = parse_spec(FOUR)
    assert needs_image(spec, pod_facts(_pod(spec, 1)))                    # as the Job controller makes it
    assert not needs_image(spec, pod_facts(_pod(spec, 1, gates=[])))                        # no gate
    assert not needs_image(spec, pod_facts(_pod(spec, 1, gates=["a.io/x"])))                # not ours
    deleting = _pod(spec, 1, gates=[naming.IMAGE_GATE])
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not needs_image(spec, pod_facts(deleting))
    out_of_range = dataclasses.replace(pod_facts(_pod(spec, 1, gates=[naming.IMAGE_GATE])), index=8)
    assert not needs_image(spec, out_of_range)
    assert not needs_image(parse_spec(MINIMAL), pod_facts(_pod(parse_spec(MINIMAL), 1, gates=[naming.IMAGE_GATE])))


@pytest.mark.parametrize("verifier", [False, True])
def test_a_gated_pod_of_a_job_an_earlier_operator_made_gets_its_images(verifier):
    """A Job made before the inputs container came keeps making pods without it (retries,
    parallelism) until it ends: the patch finds each container where the pod has it, not where
    today's template would (its test failed, and the batch ended: README, upgrades keep running
    batches)."""
    raw = {**MINIMAL, "episodes": 8, "samplesPerInput": 2, "inputs": [{"i": i} for i in range(4)],
           "inputImages": ["repo-a:1", "", "repo-c:1", "repo-d:2"]}
    if verifier:
        raw["verifier"] = {"files": {"verify.py": "print(1)"}}
    spec = parse_spec(raw)
    pod_spec = manifests.job(REF, spec, None)["spec"]["template"]["spec"]
    pod_spec["initContainers"] = [c for c in pod_spec.get("initContainers", []) if c["name"] != naming.INPUTS_CONTAINER]
    if not pod_spec["initContainers"]:
        del pod_spec["initContainers"]
    pod = {"metadata": {"name": "rb-x-2-abcde", "namespace": "sb", "uid": "u-1",
                        "annotations": {"batch.kubernetes.io/job-completion-index": "4"}},
           "spec": pod_spec, "status": {"phase": "Pending"}}
    facts = pod_facts(pod)
    assert needs_image(spec, facts)
    patched = jsonpatch.apply_patch(pod, image_patch(spec, facts))
    images = [c["image"] for c in patched["spec"].get("initContainers", []) + patched["spec"]["containers"]]
    assert images == ["repo-c:1"] * len(images) and "schedulingGates" not in patched["spec"]
