"""Render the RolloutBatch examples from the task programs in tasks/.

The YAML files embed each task's source in `spec.task.files`; this script is their single
source, and tests/unit/test_examples.py fails when a committed example drifts from it.
Run: python examples/render.py
"""
from __future__ import annotations

import json
import pathlib

import yaml

HERE = pathlib.Path(__file__).resolve().parent


class _Literal(str):
    """A string dumped as a YAML block scalar, so the embedded program stays readable."""


yaml.SafeDumper.add_representer(_Literal, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|"))


def batch(name: str, task: str, episodes: int, parallelism: int, **extra) -> dict:
    spec = {
        "episodes": episodes,
        "parallelism": parallelism,
        "runtimeClassName": "cube",
        "image": "python:3.12-alpine",
        "command": ["python", "-B", "/task/episode.py"],
        "task": {"mountPath": "/task", "files": {"episode.py": _Literal((HERE / "tasks" / task).read_text())}},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
        "episodeTimeoutSeconds": 240,
        "activeDeadlineSeconds": 600,
        **extra,
    }
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
            "metadata": {"name": name}, "spec": spec}


def verified_batch(name: str, episodes: int, parallelism: int) -> dict:
    """The shipping-fix task split in two: the agent's program and a verifier it never sees."""
    obj = batch(name, "shipping_fix_agent.py", episodes, parallelism, episodeTimeoutSeconds=120,
                verifier={"files": {"verify.py": _Literal((HERE / "tasks" / "shipping_fix_verifier.py").read_text())},
                          "mountPath": "/verifier", "timeoutSeconds": 120})
    obj["spec"]["command"] = ["python", "-B", "/task/agent.py"]
    obj["spec"]["task"]["files"] = {"agent.py": obj["spec"]["task"]["files"]["episode.py"]}
    return obj


# The model-in-the-loop example: a scripted policy server in namespace `models`, and a batch
# whose agent calls it; the batch's egress opens that endpoint (and DNS) and nothing else.
MODEL_NAMESPACE = "models"
MODEL_LABELS = {"app.kubernetes.io/name": "policy-server"}
MODEL_PORT = 8000


def policy_server() -> list[dict]:
    meta = {"name": "policy-server", "namespace": MODEL_NAMESPACE, "labels": MODEL_LABELS}
    program = _Literal((HERE / "tasks" / "policy_server.py").read_text())
    pod = {
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
        "containers": [{
            "name": "server", "image": "python:3.12-alpine",
            "command": ["python", "-B", "/app/policy_server.py"],
            "ports": [{"name": "http", "containerPort": MODEL_PORT}],
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "app", "mountPath": "/app", "readOnly": True}]}],
        "volumes": [{"name": "app", "configMap": {"name": "policy-server"}}],
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MODEL_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"policy_server.py": program}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": MODEL_LABELS},
                  "template": {"metadata": {"labels": MODEL_LABELS}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": MODEL_LABELS, "ports": [{"name": "http", "port": MODEL_PORT, "targetPort": "http"}]}},
    ]


def model_batch(name: str, episodes: int, parallelism: int) -> dict:
    obj = verified_batch(name, episodes, parallelism)
    obj["spec"]["task"]["files"] = {"agent.py": _Literal((HERE / "tasks" / "model_agent.py").read_text())}
    obj["spec"]["env"] = [{"name": "MODEL_URL",
                           "value": f"http://policy-server.{MODEL_NAMESPACE}.svc.cluster.local:{MODEL_PORT}"}]
    obj["spec"]["isolation"] = {"egress": [{
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MODEL_NAMESPACE}},
                "podSelector": {"matchLabels": MODEL_LABELS}}],
        "ports": [{"protocol": "TCP", "port": MODEL_PORT}]}]}
    return obj


def inputs_by_reference(name: str, inputs: list[dict]) -> list[dict]:
    """The per-episode-inputs batch with its inputs in a ConfigMap of its namespace: the label
    opts that ConfigMap in, and the operator reads no ConfigMap without it."""
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"{name}-0", "labels": {"rl.agentruntime.io/inputs": "true"}},
                 "data": {f"input-{g}.json": json.dumps(value) for g, value in enumerate(inputs)}}
    obj = batch(name, "score_input.py", len(inputs), len(inputs),
                inputsFrom={"configMaps": [f"{name}-0"], "count": len(inputs)})
    return [configmap, obj]


def pooled(name: str, episodes: int, parallelism: int, size: int) -> list[dict]:
    """The verified shipping-fix task from a warm pool: the pool keeps ``size`` pods with the
    agent's program and a waiting verifier container; the batch names it and brings the verifier's
    files, which reach a pod only after its agent has ended."""
    cold = verified_batch(name, episodes, parallelism)["spec"]
    pool = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": name},
            "spec": {"size": size, "maxSize": 4 * size,
                     **{key: cold[key] for key in ("runtimeClassName", "image", "task", "resources")},
                     "prepare": {"command": ["python", "-c", "import json, pathlib"], "timeoutSeconds": 60},
                     "network": "DenyAll", "verifier": {"mountPath": "/verifier"}}}
    # whenEmpty Wait: applied in one go, the batch waits for the pool's first pods (Cold, the
    # default, ran them all cold beside the pool's own starting pods)
    spec = {"poolRef": {"name": name, "whenEmpty": "Wait"}, "episodes": episodes, "parallelism": parallelism,
            **{key: cold[key] for key in ("command", "episodeTimeoutSeconds", "activeDeadlineSeconds")},
            "verifier": {key: cold["verifier"][key] for key in ("files", "timeoutSeconds")}}
    batch_ = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": name},
              "spec": spec}
    return [pool, batch_]


NOTES = {"inputs-by-reference.yaml": (
    "# spec.inputsFrom reads only ConfigMaps labelled rl.agentruntime.io/inputs=true: whoever may write\n"
    "# the ConfigMap opts it in (the SDK labels the ones it creates). Without the label the batch\n"
    "# stalls with InputsNotFound before anything is created.\n"),
    "shipping-fix-pool.yaml": (
    "# A warm pool and a batch that claims from it (README.md, \"Warm pools\"): `kubectl apply -f`\n"
    "# this file; the batch waits for the pool's pods to be warm (poolRef.whenEmpty: Wait), then\n"
    "# claims them. Pools need the cluster-wide install.\n")}


def examples() -> dict[str, dict | list[dict]]:
    inputs = [{"a": i, "b": 2 * i, "expected": 3 * i} for i in range(5)]
    return {
        "shipping-fix-parallel.yaml": batch("shipping-fix-parallel", "shipping_fix.py", 10, 10),
        "shipping-fix-serial.yaml": batch("shipping-fix-serial", "shipping_fix.py", 10, 1),
        "per-episode-inputs.yaml": batch("per-episode-inputs", "score_input.py", 5, 5, inputs=inputs),
        "inputs-by-reference.yaml": inputs_by_reference("inputs-by-reference", inputs),
        "shipping-fix-verified.yaml": verified_batch("shipping-fix-verified", 10, 10),
        "policy-server.yaml": policy_server(),
        "shipping-fix-model.yaml": model_batch("shipping-fix-model", 8, 8),
        "shipping-fix-pool.yaml": pooled("shipping-fix-pool", 4, 4, 4),
    }


def render(name: str, obj: dict | list[dict]) -> str:
    header = "# Generated by examples/render.py from examples/tasks/; edit those, then rerun it.\n"
    header += NOTES.get(name, "")
    docs = obj if isinstance(obj, list) else [obj]
    return header + yaml.safe_dump_all(docs, sort_keys=False, width=120)


def main() -> None:
    for name, obj in examples().items():
        (HERE / name).write_text(render(name, obj))
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
