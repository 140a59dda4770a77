"""Secret keys in an episode's environment (spec.env[].valueFrom.secretKeyRef), on the devcluster.

A Secret of the batch's namespace, opted in by its label, holds the agent's API key and a key
nobody referenced. The agent must see the key, the verifier must not (it gets a key of its own
only by naming it in spec.verifier.env); the operator's copy holds only the referenced key and
goes with the sandbox, in a Dedicated sandbox (its namespace) and in a Shared namespace (the
deletion plan, cleanup.sandbox Always); the value shows up in no status, Event, results
document or operator log line. An unlabelled Secret stalls its batch before anything exists.
Episodes prove what they saw with a hash, so the results never carry the key either.
"""
from __future__ import annotations

import base64
import hashlib
import json
import secrets

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.model import BatchRef
from tests.support.batches import apply, condition, episode_batch, get, results, unique, wait_finished, wait_gone
from tests.support.kube import wait_for
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

AGENT = r'''
import hashlib, json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
seen = hashlib.sha256(os.environ.get("OPENAI_API_KEY", "").encode()).hexdigest()
json.dump({"seen": seen, "grader": "GRADER_TOKEN" in os.environ}, open("/workspace/seen", "w"))
time.sleep(float(os.environ.get("LINGER", "0")))
if "EXPECTED" in os.environ:     # no verifier: the agent grades itself
    emit("reward", reward=1 if seen == os.environ["EXPECTED"] else 0)
'''

VERIFY = r'''
import hashlib, json, os, time
agent = json.load(open("/workspace/seen"))
clean = "OPENAI_API_KEY" not in os.environ
grader = hashlib.sha256(os.environ.get("GRADER_TOKEN", "").encode()).hexdigest() == os.environ["GRADER_EXPECTED"]
saw = agent["seen"] == os.environ["EXPECTED"]
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": os.environ["EPISODE_ID"],
                  "reward": 1 if saw and clean and grader and not agent["grader"] else 0, "agent_saw_key": saw,
                  "verifier_env_clean": clean, "verifier_got_its_own": grader,
                  "agent_saw_the_verifiers": agent["grader"]}), flush=True)
'''


def _secret(name: str, namespace: str, data: dict[str, str], labelled: bool = True) -> None:
    labels = {naming.LABEL_EPISODE_ENV: naming.EPISODE_ENV_OPT_IN} if labelled else {}
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    kubectl("create", "-f", "-", input=json.dumps(body))


def _copy(body: dict) -> tuple[str, str]:
    """(namespace, name) of a batch's copy of its Secret keys."""
    meta = body["metadata"]
    return body["status"]["sandboxNamespace"], naming.env_secret_name(BatchRef(meta["namespace"], meta["name"], meta["uid"]))


def test_a_secret_key_reaches_the_agent_only_and_goes_with_the_sandbox(operator_process, namespace):
    key, admin, grader = (secrets.token_urlsafe(24) for _ in range(3))
    _secret("llm", namespace, {"api-key": key, "admin-key": admin})
    _secret("grader", namespace, {"token": grader})
    _secret("unlabelled", namespace, {"api-key": admin}, labelled=False)
    expected = hashlib.sha256(key.encode()).hexdigest()
    from_llm = {"secretKeyRef": {"name": "llm", "key": "api-key"}}
    # long enough for both batches to be seen Running one after the other on a loaded node
    env = [{"name": "OPENAI_API_KEY", "valueFrom": from_llm}, {"name": "LINGER", "value": "20"}]
    names = {"dedicated": unique("sec-ded"), "shared": unique("sec-shared"), "refused": unique("sec-refused")}
    apply(episode_batch(names["dedicated"], AGENT, episodes=2, env=env, verifier={
        "files": {"verify.py": VERIFY}, "timeoutSeconds": 30,
        "env": [{"name": "EXPECTED", "value": expected},
                {"name": "GRADER_EXPECTED", "value": hashlib.sha256(grader.encode()).hexdigest()},
                {"name": "GRADER_TOKEN", "valueFrom": {"secretKeyRef": {"name": "grader", "key": "token"}}}]}),
          namespace)
    apply(episode_batch(names["shared"], AGENT, episodes=2, env=[*env, {"name": "EXPECTED", "value": expected}],
                        isolation={"namespace": "Shared"}, cleanup={"sandbox": "Always"}), namespace)
    apply(episode_batch(names["refused"], AGENT, episodes=1,
                        env=[{"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "unlabelled",
                                                                                       "key": "api-key"}}}]),
          namespace)

    # While they run: each copy holds the referenced keys only, immutable, beside the Job.
    copies = {}
    for which in ("dedicated", "shared"):
        body = wait_for(lambda: (b := get(names[which], namespace)) and (b.get("status") or {}).get("phase") == "Running"
                        and b, timeout=120, what=f"the {which} batch running")
        where, copy_name = _copy(body)
        live = get(copy_name, where, kind="secret")
        assert live is not None and live["immutable"] is True and live["type"] == "Opaque", live
        want = {"ref-0"} if which == "shared" else {"ref-0", "ref-1"}
        assert set(live["data"]) == want
        values = {base64.b64decode(v).decode() for v in live["data"].values()}
        assert key in values and admin not in values
        copies[which] = (where, copy_name)

    refused = wait_finished(names["refused"], namespace, timeout=60, operator=operator_process)
    stalled = condition(refused, "Stalled")
    assert stalled["reason"] == "SecretNotFound" and "unlabelled" in stalled["message"], refused["status"]
    assert naming.LABEL_EPISODE_ENV in stalled["message"]
    assert "jobUID" not in refused["status"]    # refused in the create step, as inputsFrom: nothing made
    sandbox = naming.sandbox_namespace(BatchRef(namespace, names["refused"], refused["metadata"]["uid"]))
    assert get(sandbox, "", kind="namespace") is None

    for which in ("dedicated", "shared"):
        body = wait_finished(names[which], namespace, timeout=180, operator=operator_process)
        assert body["status"]["phase"] == "Succeeded" and body["status"]["succeededEpisodes"] == 2, body["status"]
        rows = results(names[which], namespace)["pods"]
        assert [r["reward"] for r in rows] == [1.0, 1.0]
        if which == "dedicated":
            assert all(r["extra"] == {"agent_saw_key": True, "verifier_env_clean": True, "verifier_got_its_own": True,
                                      "agent_saw_the_verifiers": False} for r in rows), rows
    # Gone with the sandbox: the Dedicated namespace (DeleteOnSuccess), the Shared deletion plan (Always).
    wait_gone("namespace", copies["dedicated"][0], timeout=120)
    wait_gone("secret", copies["shared"][1], copies["shared"][0], timeout=60)
    assert get(names["shared"], namespace) is not None     # the batch itself stays
    assert get("llm", namespace, kind="secret") is not None   # the original is the user's

    # The value is nowhere the operator writes or logs.
    written = [json.dumps(get(n, namespace)) for n in names.values()]
    written.append(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)
    written += [json.dumps(results(names[w], namespace)) for w in ("dedicated", "shared")]
    written.append(operator_process.log_path.read_text(errors="replace"))
    for text in written:
        for secret in (key, admin, grader):
            assert secret not in text and base64.b64encode(secret.encode()).decode() not in text
