"""The model-in-the-loop example, as a user runs it from examples/.

The scripted policy server (examples/policy-server.yaml, the stand-in for vLLM/SGLang) runs as
a Deployment + Service in `models`; the batch (examples/shipping-fix-model.yaml) asks it for its
fix by Service name, so DNS and the declared egress are both on the path. The server logs each
session id and the edit it handed out: every episode must have asked under its own EPISODE_ID,
and the verifier's reward must be exactly what that edit earns (the agent applied the answer).
"""
from __future__ import annotations

import json

import pytest

from tests.support.batches import apply, results, wait_finished
from tests.support.operator import ROOT, kubectl

pytestmark = [pytest.mark.cluster]

EXAMPLES = ROOT / "examples"


def server_log(namespace: str) -> list[dict]:
    out = kubectl("logs", "deployment/policy-server", "-n", namespace).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_agent_applies_what_the_model_answers(operator_process, namespace, policy_server):
    import yaml
    batch = yaml.safe_load((EXAMPLES / "shipping-fix-model.yaml").read_text())
    apply(batch, namespace)
    body = wait_finished(batch["metadata"]["name"], namespace, timeout=240, operator=operator_process)
    rows = results(batch["metadata"]["name"], namespace)["pods"]
    edits = {r["session"]: r["edit"] for r in server_log(policy_server)}
    assert len(rows) == batch["spec"]["episodes"]
    for row in rows:
        assert row["pod"] in edits, f"{row['pod']} never asked the model under its EPISODE_ID"
        # the whole row on failure: the verifier's tail says why it graded as it did
        assert row["reward"] == (1 if edits[row["pod"]] == "right" else 0), json.dumps(row)[:4000]
    assert body["status"]["rewardSum"] == sum(e == "right" for p, e in edits.items() if p in {r["pod"] for r in rows})


def test_an_unreachable_model_is_graded_like_any_attempt(operator_process, namespace, models_lock):
    """No policy server: the agents get no answer and leave the module unfixed. Nothing in the
    workspace can ask the verifier not to grade (an agent would leave that after every bad
    attempt), so each is graded 0, valid; the outage shows in what the agent printed, and the
    endpoint (or a capture proxy) is where a trainer learns which sessions it never answered."""
    import yaml
    batch = yaml.safe_load((EXAMPLES / "shipping-fix-model.yaml").read_text())
    batch["metadata"]["name"] = "no-model"
    batch["spec"].update(episodes=2, parallelism=2, minSuccessfulEpisodes=0)
    apply(batch, namespace)
    body = wait_finished("no-model", namespace, timeout=240, operator=operator_process)
    rows = results("no-model", namespace)["pods"]
    assert [(r["outcome"], r["reason"], r["valid"], r["reward"]) for r in rows] == \
        [("succeeded", None, True, 0.0)] * 2, rows
    assert all(r["agent"]["exit_code"] != 0 and "no answer from the model" in (r["agent"].get("output_tail") or "")
               for r in rows), [r.get("agent") for r in rows]
    assert body["status"]["phase"] == "Succeeded" and body["status"].get("rewardSum", 0) == 0
