"""Shared builders for the core unit tests (a batch ref, a raw spec, episode results)."""
from rolloutbatch.core.model import BatchRef, EpisodeResult

REF = BatchRef("rl-team", "shipping-fix", "7d9f22ce-635d-43fa-a74a-411b5a0b7096", 1)
RAW = {"episodes": 10, "parallelism": 4, "runtimeClassName": "cube",
       "task": {"files": {"episode.py": "print('hi')"}}, "inputs": [{"i": i} for i in range(10)],
       "env": [{"name": "MODEL", "value": "m1"}], "podTemplate": {"nodeSelector": {"pool": "rl"}}}
MINIMAL = {"episodes": 3, "task": {"files": {"episode.py": "x"}}}


def result(i, outcome="succeeded", reward=1.0, ready=1.0, done=2.0, node="n1", **changes):
    """An episode result of a pod created at t=100 that was ready at 100+ready, rewarded at 100+done."""
    base = EpisodeResult(index=i, pod=f"p{i}", node=node, image_id="img", outcome=outcome,
                         reason=None if outcome == "succeeded" else "NonZeroExit", message="", reward=reward,
                         pod_created=100.0, ready_at=100.0 + ready, reward_at=100.0 + done,
                         pod_to_ready_seconds=ready)
    return base.replace(**changes) if changes else base


def inputs_configmap(data: dict, labels: dict | None = None, name: str = "inputs") -> dict:
    """A ConfigMap as spec.inputsFrom reads it: opted in by its label unless ``labels`` says otherwise."""
    from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS
    meta = {"name": name, "labels": {LABEL_INPUTS: INPUTS_OPT_IN} if labels is None else labels}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}
