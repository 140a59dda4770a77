"""An image per input: which image each episode runs, and the patch that gives its pod that image.

An Indexed Job has one pod template, so one image. With ``spec.inputImages`` the template carries
a scheduling gate (KEP-3521: a gated pod is created but never scheduled): the operator sees each
new pod of its Job, sets the image of the pod's input on its containers (a pod's container images
are among the few pod fields the API allows to change) and removes the gate in the same patch, so
the pod is scheduled with its own image (in Dedicated isolation nobody else may lift the gate; in a
Shared namespace its pod writers can: docs/design.md §8.2). The rest of the batch is
unchanged: one Job, one row per episode, the same groups, streaming, verifier and cleanup.

The patch is a JSON patch whose ``test`` operations are its preconditions: the pod's uid (never a
namesake), the container names (the pod is the template's shape) and the gates as the operator
saw them (the API lets gates only be removed; a pod changed meanwhile fails the test and its next
watch event brings it back).
"""

from __future__ import annotations

from rolloutbatch.core import naming
from rolloutbatch.core.groups import group_and_sample
from rolloutbatch.core.model import BatchSpec, PodFacts


def episode_image(spec: BatchSpec, index: int) -> str:
    """The image episode ``index`` runs: its input's, or spec.image."""
    if not spec.input_images:
        return spec.image
    group, _ = group_and_sample(index, spec.samples_per_input)
    return spec.input_images[group]


def container_images(spec: BatchSpec, index: int) -> tuple[tuple[str, str, int, str], ...]:
    """``(list, name, position, image)`` of each container of episode ``index``'s pod, as
    ``core.manifests.job`` lays them out: the agent (an init container with a verifier) runs its
    input's image; so does the verifier unless it names its own; with inputs, so does the inputs
    init container before them (the agent's image: one pull)."""
    image = episode_image(spec, index)
    inputs = (("initContainers", naming.INPUTS_CONTAINER, 0, image),) if spec.inputs_count else ()
    if spec.verifier is None:
        return (*inputs, ("containers", naming.CONTAINER_NAME, 0, image))
    verifier = image if spec.verifier.follows_episode_image else spec.verifier.image
    return (*inputs, ("initContainers", naming.AGENT_CONTAINER, len(inputs), image),
            ("containers", naming.VERIFIER_CONTAINER, 0, verifier))


def needs_image(spec: BatchSpec, facts: PodFacts) -> bool:
    """A pod waiting for the operator to give it its input's image (it carries the gate)."""
    return bool(spec.input_images) and naming.IMAGE_GATE in facts.scheduling_gates and facts.index is not None \
        and 0 <= facts.index < spec.episodes and not facts.deleting


def image_patch(spec: BatchSpec, facts: PodFacts) -> list[dict]:
    """The JSON patch (RFC 6902) that sets the images of a gated episode pod and lifts the gate."""
    assert facts.index is not None
    ops: list[dict] = [{"op": "test", "path": "/metadata/uid", "value": facts.uid}]
    for kind, name, position, image in container_images(spec, facts.index):
        if kind == "initContainers":
            # where the pod has it: a Job an earlier operator made has no inputs container, and
            # keeps making pods without one until it ends (README: upgrades keep running batches)
            if name in facts.init_containers:
                position = facts.init_containers.index(name)
            elif name == naming.INPUTS_CONTAINER:
                continue
        ops.append({"op": "test", "path": f"/spec/{kind}/{position}/name", "value": name})
        ops.append({"op": "replace", "path": f"/spec/{kind}/{position}/image", "value": image})
    gates = [{"name": gate} for gate in facts.scheduling_gates]
    rest = [gate for gate in gates if gate["name"] != naming.IMAGE_GATE]
    ops.append({"op": "test", "path": "/spec/schedulingGates", "value": gates})
    ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": rest} if rest
               else {"op": "remove", "path": "/spec/schedulingGates"})
    return ops
