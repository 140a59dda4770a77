"""Secret keys in an episode's environment (core.secret_env): read only from opted-in Secrets of
the batch's namespace, copied key by key, reaching only the container whose env names them.
Golden file: golden/secret_env.json (UPDATE_GOLDEN=1 rewrites it; review the diff)."""
import base64
import json
import os
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import manifests, naming, secret_env
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.children import adoptable, deletion_plan, provisioning_plan
from rolloutbatch.core.naming import EPISODE_ENV_OPT_IN, LABEL_EPISODE_ENV
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL, REF

GOLDEN = pathlib.Path(__file__).parent / "golden"
OWNER = manifests.owner_reference("rl.agentruntime.io/v1alpha1", "RolloutBatch", REF.name, REF.uid)


def ref(secret, key):
    return {"secretKeyRef": {"name": secret, "key": key}}


RAW = {**MINIMAL,
       "env": [{"name": "MODEL", "value": "m1"}, {"name": "OPENAI_API_KEY", "valueFrom": ref("llm", "api-key")},
               {"name": "ORG", "valueFrom": ref("org", "api-key")}],
       "verifier": {"env": [{"name": "GRADER_TOKEN", "valueFrom": ref("grader", "token")},
                            {"name": "MODE", "value": "strict"}]}}


def secret(name, data, labels=None):
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {LABEL_EPISODE_ENV: EPISODE_ENV_OPT_IN} if labels is None else labels},
            "data": dict(data)}


SECRETS = {"llm": secret("llm", {"api-key": "c2stbGxt", "other": "bm90LW1l"}),
           "org": secret("org", {"api-key": "b3JnLWtleQ=="}),
           "grader": secret("grader", {"token": "Z3JhZGVy", "admin": "cm9vdA=="})}


def containers(spec, data=None):
    job = manifests.job(REF, spec, None)["spec"]["template"]["spec"]
    return {c["name"]: c for c in job.get("initContainers", []) + job["containers"]}, job


def test_parse_spec_reads_secret_keys_beside_plain_values():
    spec = parse_spec(RAW)
    assert spec.env[1] == {"name": "OPENAI_API_KEY", "valueFrom": ref("llm", "api-key")}
    assert spec.verifier.env[0] == {"name": "GRADER_TOKEN", "valueFrom": ref("grader", "token")}
    assert secret_env.secret_keys(spec) == (("llm", "api-key"), ("org", "api-key"), ("grader", "token"))
    assert secret_env.secret_names(spec) == ("llm", "org", "grader")


def test_two_secrets_keys_of_one_name_get_their_own_copy_keys():
    keys = secret_env.key_names(parse_spec(RAW))
    assert keys == {("llm", "api-key"): "ref-0", ("org", "api-key"): "ref-1", ("grader", "token"): "ref-2"}
    twice = parse_spec({**MINIMAL, "env": [{"name": "A", "valueFrom": ref("llm", "k")},
                                           {"name": "B", "valueFrom": ref("llm", "k")}]})
    assert secret_env.key_names(twice) == {("llm", "k"): "ref-0"}


def test_only_the_referenced_keys_are_copied():
    data = secret_env.copied_data(SECRETS, parse_spec(RAW))
    assert data == {"ref-0": "c2stbGxt", "ref-1": "b3JnLWtleQ==", "ref-2": "Z3JhZGVy"}
    assert "bm90LW1l" not in data.values() and "cm9vdA==" not in data.values()


@pytest.mark.parametrize("found", [None, secret("llm", {"api-key": "c2stbGxt"}, labels={}),
                                   secret("llm", {"api-key": "c2stbGxt"}, labels={LABEL_EPISODE_ENV: "yes"})])
def test_a_missing_and_an_unlabelled_secret_get_one_answer_showing_nothing(found):
    with pytest.raises(Stalled) as err:
        secret_env.copied_data({**SECRETS, "llm": found}, parse_spec(RAW))
    assert err.value.reason == "SecretNotFound"
    assert err.value.message == secret_env.not_opted_in_message("llm")
    assert f"{LABEL_EPISODE_ENV}={EPISODE_ENV_OPT_IN}" in err.value.message
    assert "api-key" not in err.value.message and "c2stbGxt" not in err.value.message


def test_every_secret_is_checked_for_the_label_before_any_key():
    # The first Secret lacks the key, the second is not opted in: the label answer comes first.
    with pytest.raises(Stalled) as err:
        secret_env.copied_data({**SECRETS, "llm": secret("llm", {}), "grader": None}, parse_spec(RAW))
    assert err.value.message == secret_env.not_opted_in_message("grader")


def test_an_opted_in_secret_without_the_key_names_the_key():
    with pytest.raises(Stalled) as err:
        secret_env.copied_data({**SECRETS, "org": secret("org", {"other": "eA=="})}, parse_spec(RAW))
    assert err.value.reason == "SecretNotFound" and "org" in err.value.message and "'api-key'" in err.value.message
    assert "other" not in err.value.message


def test_each_container_gets_only_its_own_secret_keys():
    spec = parse_spec(RAW)
    by_name, pod = containers(spec)
    agent = {e["name"]: e for e in by_name[naming.AGENT_CONTAINER]["env"]}
    verifier = {e["name"]: e for e in by_name[naming.VERIFIER_CONTAINER]["env"]}
    copy = naming.env_secret_name(REF)
    assert agent["OPENAI_API_KEY"] == {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": copy, "key": "ref-0"}}}
    assert agent["ORG"]["valueFrom"]["secretKeyRef"] == {"name": copy, "key": "ref-1"}
    assert agent["MODEL"] == {"name": "MODEL", "value": "m1"} and "GRADER_TOKEN" not in agent
    assert verifier["GRADER_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": copy, "key": "ref-2"}
    assert "OPENAI_API_KEY" not in verifier and "ORG" not in verifier
    # Never a volume: no container can read a key through the filesystem.
    assert not [v for v in pod["volumes"] if "secret" in v or "projected" in v]
    assert all("envFrom" not in c for c in by_name.values())


def test_without_a_verifier_the_one_container_reads_the_key():
    spec = parse_spec({**MINIMAL, "env": [{"name": "K", "valueFrom": ref("llm", "api-key")}]})
    (container,) = containers(spec)[0].values()
    assert {"name": "K", "valueFrom": {"secretKeyRef": {"name": naming.env_secret_name(REF), "key": "ref-0"}}} \
        in container["env"]


@pytest.mark.parametrize("isolation", ["Dedicated", "Shared"])
def test_the_copy_is_made_before_the_configmaps_and_the_job(isolation):
    spec = parse_spec({**RAW, "isolation": {"namespace": isolation}})
    data = secret_env.copied_data(SECRETS, spec)
    plan = provisioning_plan(REF, spec, OWNER, None, env_secret=data)
    kinds = [o["kind"] for o in plan]
    assert kinds.index("Secret") < kinds.index("ConfigMap") < kinds.index("Job")
    (copy,) = [o for o in plan if o["kind"] == "Secret"]
    assert copy["immutable"] is True and copy["type"] == "Opaque" and copy["data"] == data
    assert copy["metadata"]["name"] == naming.env_secret_name(REF)
    assert copy["metadata"]["namespace"] == naming.child_namespace(REF, spec)
    # Dedicated: removed with its namespace; Shared: owned by the batch (and the deletion plan).
    assert ("ownerReferences" in copy["metadata"]) == (isolation == "Shared")
    assert "Secret" not in [o["kind"] for o in provisioning_plan(REF, parse_spec(MINIMAL), OWNER, None)]


def test_the_deletion_plan_removes_a_shared_copy_after_the_job_and_may_lack_the_rights():
    plan = deletion_plan(REF)
    (step,) = [s for s in plan if s.kind == "Secret"]
    assert (step.name, step.namespace, step.rights_optional) == (naming.env_secret_name(REF), REF.namespace, True)
    assert max(i for i, s in enumerate(plan) if s.kind == "Job") < plan.index(step)
    assert not [s for s in plan if s.rights_optional and s.kind != "Secret"]


def test_a_copy_is_adopted_only_with_exactly_our_data():
    spec = parse_spec({**RAW, "isolation": {"namespace": "Shared"}})
    desired = manifests.env_secret(REF, spec, secret_env.copied_data(SECRETS, spec), OWNER)
    assert adoptable(dict(desired), desired, shared=True, job_uid=None)
    forged = dict(desired, data={**desired["data"], "ref-0": "YXR0YWNrZXI="})
    assert not adoptable(forged, desired, shared=True, job_uid=None)
    assert not adoptable(dict(desired, type="kubernetes.io/basic-auth"), desired, shared=True, job_uid=None)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["k", "l", "k.x"]),
                          st.booleans()), min_size=1, max_size=12))
def test_every_reference_reads_the_key_it_named(refs):
    # Whatever the references, each variable reads, through the copy, exactly the value it named.
    env = [{"name": f"V{i}", "valueFrom": ref(s, k)} for i, (s, k, _) in enumerate(refs) if not _]
    venv = [{"name": f"W{i}", "valueFrom": ref(s, k)} for i, (s, k, _) in enumerate(refs) if _]
    spec = parse_spec({**MINIMAL, "env": env, **({"verifier": {"env": venv}} if venv else {})})
    secrets = {s: secret(s, {k: f"{s}/{k}" for k in ("k", "l", "k.x")}) for s in "abc"}
    data = secret_env.copied_data(secrets, spec)
    assert len(data) == len({(s, k) for s, k, _ in refs})
    by_name, _ = containers(spec)
    for container in by_name.values():
        for e in container["env"]:
            if e["name"][0] in "VW":
                i = int(e["name"][1:])
                assert data[e["valueFrom"]["secretKeyRef"]["key"]] == f"{refs[i][0]}/{refs[i][1]}"
                assert (e["name"][0] == "W") == (container["name"] == naming.VERIFIER_CONTAINER)


def test_golden():
    spec = parse_spec(RAW)
    objects = [o for o in provisioning_plan(REF, spec, OWNER, None, env_secret=secret_env.copied_data(SECRETS, spec))
               if o["kind"] in ("Secret", "Job")]
    path = GOLDEN / "secret_env.json"
    text = json.dumps(objects, indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text, "manifests drifted: rerun with UPDATE_GOLDEN=1 and review the diff"


def _b64(size: int, byte: bytes = b"x") -> str:
    return base64.b64encode(byte * size).decode()


def test_a_copy_over_the_apis_secret_limit_stalls_before_anything_is_created():
    """Two opted-in Secrets each under 1 MiB, 600 KiB values referenced from spec.env: their copy
    holds 1.2 MiB, which the API server refuses for a Secret (MaxSecretSize), but copied_data took
    it, and the copy was refused only after the sandbox namespace existed. Stalled now, first."""
    big = {"llm": secret("llm", {"api-key": _b64(600 * 1024)}), "org": secret("org", {"api-key": _b64(600 * 1024)})}
    spec = parse_spec({**MINIMAL, "env": [{"name": "A", "valueFrom": ref("llm", "api-key")},
                                          {"name": "B", "valueFrom": ref("org", "api-key")}]})
    with pytest.raises(Stalled) as err:
        secret_env.copied_data(big, spec)
    assert err.value.reason == "ProvisioningRefused"
    assert str(2 * 600 * 1024) in err.value.message and "1048576" in err.value.message
    assert "eHh4" not in err.value.message   # no value is said
    # keys each short enough for a process: eight of 120 KiB fit, nine do not; a key referenced
    # twice is copied, and counted, once
    many = {"s": secret("s", {f"k{i}": _b64(120 * 1024) for i in range(9)})}
    env = [{"name": f"K{i}", "valueFrom": ref("s", f"k{i}")} for i in range(8)]
    again = {"name": "AGAIN", "valueFrom": ref("s", "k0")}
    assert len(secret_env.copied_data(many, parse_spec({**MINIMAL, "env": [*env, again]}))) == 8
    nine = parse_spec({**MINIMAL, "env": [*env, {"name": "K8", "valueFrom": ref("s", "k8")}]})
    with pytest.raises(Stalled) as err:
        secret_env.copied_data(many, nine)
    assert err.value.reason == "ProvisioningRefused" and str(9 * 120 * 1024) in err.value.message


def test_a_secret_value_longer_than_exec_takes_is_refused():
    """A process's environment string (NAME=value and its NUL) may be at most MAX_ARG_STRLEN
    (131072 bytes on Linux): a longer Secret value was copied and every pod then failed to start
    its container. Refused before anything is created, naming the variable, not the value."""
    spec = parse_spec({**MINIMAL, "verifier": {"env": [{"name": "TOKEN", "valueFrom": ref("llm", "api-key")}]}})
    fits = 131072 - len("TOKEN=") - 1
    assert secret_env.copied_data({"llm": secret("llm", {"api-key": _b64(fits)})}, spec) == {"ref-0": _b64(fits)}
    with pytest.raises(Stalled) as err:
        secret_env.copied_data({"llm": secret("llm", {"api-key": _b64(fits + 1)})}, spec)
    assert err.value.reason == "InvalidSpec" and "spec.verifier.env[TOKEN]" in err.value.message
    assert "131072" in err.value.message and "eHh4" not in err.value.message


def test_a_value_that_refers_to_a_secret_past_exec_once_expanded_is_refused():
    """$(TOKEN) in a later value is the Secret's value at exec: each fits, the value made of it
    twice does not (the kubelet expands it: valueFrom values themselves are never expanded)."""
    half = 70000
    spec = parse_spec({**MINIMAL, "env": [{"name": "TOKEN", "valueFrom": ref("llm", "api-key")},
                                          {"name": "TWICE", "value": "$(TOKEN)$(TOKEN)"}]})
    with pytest.raises(Stalled) as err:
        secret_env.copied_data({"llm": secret("llm", {"api-key": _b64(half)})}, spec)
    assert err.value.reason == "InvalidSpec" and "spec.env[TWICE]" in err.value.message
    once = parse_spec({**MINIMAL, "env": [{"name": "TOKEN", "valueFrom": ref("llm", "api-key")},
                                          {"name": "ONCE", "value": "$(TOKEN)"}]})
    assert secret_env.copied_data({"llm": secret("llm", {"api-key": _b64(half)})}, once) == {"ref-0": _b64(half)}
