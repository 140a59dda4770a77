"""What a batch creates and how its deletion finds everything without the spec."""
import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.children import deletion_plan, provisioning_plan
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec

REF = BatchRef("team", "b", "0123456789abcdef", 1)
OWNER = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "name": "b", "uid": REF.uid}


def spec(mode, inputs=False):
    raw = {"episodes": 2, "task": {"files": {"episode.py": "x"}}, "isolation": {"namespace": mode}}
    if inputs:
        raw["inputs"] = [{"a": 1}, {"a": 2}]
    return parse_spec(raw)


def test_dedicated_creates_the_namespace_first_and_the_job_last_without_owners():
    objs = provisioning_plan(REF, spec("Dedicated", inputs=True), OWNER, None)
    assert [o["kind"] for o in objs] == ["Namespace", "ServiceAccount", "NetworkPolicy", "ConfigMap", "ConfigMap", "Job"]
    assert all("ownerReferences" not in o["metadata"] for o in objs)
    assert {o["metadata"].get("namespace") for o in objs[1:]} == {naming.sandbox_namespace(REF)}


def test_shared_children_are_owned_by_the_batch_in_its_namespace():
    objs = provisioning_plan(REF, spec("Shared"), OWNER, None)
    assert [o["kind"] for o in objs] == ["NetworkPolicy", "ConfigMap", "Job"]
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == REF.uid for o in objs)
    assert all(o["metadata"]["namespace"] == "team" for o in objs)


def test_deletion_plan_covers_every_child_of_either_mode_job_first():
    plan = deletion_plan(REF)
    created = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
               for mode in ("Dedicated", "Shared")
               for o in provisioning_plan(REF, spec(mode, inputs=True), OWNER, None)}
    planned = {(r.kind, r.name, r.namespace) for r in plan}
    # What is inside the Dedicated namespace goes with it; everything else is named in the plan.
    sandbox = naming.sandbox_namespace(REF)
    outside = {c for c in created if c[2] != sandbox}
    assert outside <= planned, outside - planned
    assert ("Job", naming.job_name(REF), sandbox) in planned
    kinds = [r.kind for r in plan]
    assert kinds.index("Job") < kinds.index("Namespace") < kinds.index("NetworkPolicy")
    assert all(r.wait and r.propagation == "Foreground" for r in plan if r.kind == "Job")


def test_the_sandbox_quota_is_opt_in():
    raw = {"episodes": 2, "task": {"files": {"episode.py": "x"}}, "isolation": {"resourceQuota": True}}
    kinds = [o["kind"] for o in provisioning_plan(REF, parse_spec(raw), OWNER, None)]
    assert kinds.count("ResourceQuota") == 1
    # refused for a new batch (core.spec); one provisioned before that rule still gets no quota
    shared = dict(raw, isolation={"namespace": "Shared", "resourceQuota": True})
    assert "ResourceQuota" not in [o["kind"] for o in provisioning_plan(REF, parse_spec(shared, provisioned=True),
                                                                         OWNER, None)]
    sa = provisioning_plan(REF, spec("Dedicated"), OWNER, None)[1]
    assert sa["metadata"]["name"] == "default" and sa["automountServiceAccountToken"] is False


# -- adopting only what the operator would create -------------------------------------------
def _as_stored(obj):
    """What the API server hands back: defaults added, quantities canonical, status and uid set."""
    import copy
    live = copy.deepcopy(obj)
    live["metadata"]["uid"] = "live-uid"
    if live["kind"] == "Job":
        pod = live["spec"]["template"]["spec"]
        live["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "live-uid"}}
        live["spec"].setdefault("suspend", False)
        pod.setdefault("dnsPolicy", "ClusterFirst")
        for c in pod["containers"]:
            c.setdefault("imagePullPolicy", "IfNotPresent")
            c["terminationMessagePolicy"] = c.get("terminationMessagePolicy", "File")
            c["resources"] = {"limits": {"memory": "1Gi"}}      # "1024Mi" read back canonical
    return live


def test_what_the_operator_created_is_adopted_after_a_crash():
    from rolloutbatch.core.children import adoptable
    for mode in ("Dedicated", "Shared"):
        for obj in provisioning_plan(REF, spec(mode, inputs=True), OWNER, None):
            live = _as_stored(obj)
            recorded = "live-uid" if mode == "Shared" else None   # a Shared Job only once recorded
            assert adoptable(live, obj, shared=mode == "Shared", job_uid=recorded), (mode, obj["kind"])


def test_a_neighbours_job_or_task_under_our_names_is_not_adopted():
    from rolloutbatch.core.children import adoptable
    objs = provisioning_plan(REF, spec("Shared"), OWNER, None)
    job, task, policy = (next(o for o in objs if o["kind"] == k) for k in ("Job", "ConfigMap", "NetworkPolicy"))
    # a Job nobody recorded, in a Shared namespace: whatever it runs, not adopted
    assert not adoptable(_as_stored(job), job, shared=True, job_uid=None)
    assert not adoptable(_as_stored(job), job, shared=True, job_uid="the-recorded-one")
    assert adoptable(_as_stored(job), job, shared=False, job_uid=None)     # Dedicated: only we write there
    forged = _as_stored(task)
    forged["data"] = dict(forged["data"], **{"episode.py": "print('forged')"})
    assert not adoptable(forged, task, shared=True, job_uid=None)
    forged = _as_stored(task)
    forged["data"] = dict(forged["data"], extra="x")
    assert not adoptable(forged, task, shared=True, job_uid=None)
    for change in ({"egress": [{}]}, {"ingress": [{}]}, {"policyTypes": ["Ingress"]}, {"podSelector": {}}):
        opened = _as_stored(policy)
        opened["spec"].update(change)
        assert not adoptable(opened, policy, shared=True, job_uid=None), change


# -- a declared egress spelt with null or empty fields, found again after a crash -------------------------
def _policy_as_stored(value, key=None):
    """A NetworkPolicy spec as the API server stores it: null fields and empty lists and maps
    dropped (omitempty; a peer's selectors are pointers, kept when {}), ports' protocol TCP."""
    if isinstance(value, dict):
        kept = {k: _policy_as_stored(x, k) for k, x in value.items() if x is not None}
        kept = {k: x for k, x in kept.items() if x not in ([], {}) or k in ("podSelector", "namespaceSelector")}
        return {"protocol": "TCP", **kept} if key == "ports" else kept
    if isinstance(value, list):
        return [_policy_as_stored(x, key) for x in value]
    return value


MODEL_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
              "podSelector": {"matchLabels": {"app": "policy-server"}}}


@pytest.mark.parametrize("rule", [
    {"to": [MODEL_PEER], "ports": [{"port": 8000}]},                               # the README's example
    {"to": [MODEL_PEER], "ports": [{"protocol": None, "port": 8000}]},             # a null protocol
    {"to": [MODEL_PEER], "ports": [{"port": 8000, "endPort": None}]},
    {"to": [MODEL_PEER], "ports": []},                                             # no ports: every port
    {"to": [MODEL_PEER], "ports": None},
    {"to": [{**MODEL_PEER, "ipBlock": None}]},                                     # a null peer field
    {"to": [{"ipBlock": {"cidr": "203.0.113.10/32", "except": []}}]},              # empty lists
    {"to": [{"ipBlock": {"cidr": "203.0.113.10/32", "except": None}}]},
    {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"},
                                   "matchExpressions": []}}]},
    {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
             "podSelector": {"matchLabels": None, "matchExpressions": [
                 {"key": "app", "operator": "In", "values": ["policy-server"]}]}}]},
    {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}}, "podSelector": {}}]},
])
@pytest.mark.parametrize("mode", ["Dedicated", "Shared"])
def test_a_declared_egress_policy_is_adopted_as_the_api_server_stored_it(rule, mode):
    """On a 409 the policy found is adopted only as "exactly our selector and rules": one spelt with
    null or empty fields, stored without them, must still be ours, or the batch stalls NameConflict
    for good after a crash. The desired policy is already the stored form."""
    from rolloutbatch.core.children import adoptable
    batch = parse_spec({"episodes": 2, "task": {"files": {"episode.py": "x"}},
                        "isolation": {"namespace": mode, "egress": [rule]}})
    desired = next(o for o in provisioning_plan(REF, batch, OWNER, None) if o["kind"] == "NetworkPolicy")
    stored = {**desired, "spec": _policy_as_stored(desired["spec"])}
    assert stored["spec"] == desired["spec"]
    assert adoptable(stored, desired, shared=mode == "Shared", job_uid=None)
    opened = {**stored, "spec": {**stored["spec"], "egress": [*stored["spec"]["egress"], {}]}}
    assert not adoptable(opened, desired, shared=mode == "Shared", job_uid=None)


def test_a_live_policy_spelt_otherwise_is_compared_in_the_stored_form():
    """A policy made by an older operator from a spec with null fields: the desired one has none."""
    from rolloutbatch.core.children import adoptable
    batch = parse_spec({"episodes": 2, "task": {"files": {"episode.py": "x"}},
                        "isolation": {"egress": [{"to": [MODEL_PEER], "ports": [{"port": 8000}]}]}})
    desired = next(o for o in provisioning_plan(REF, batch, OWNER, None) if o["kind"] == "NetworkPolicy")
    spelt = {**desired, "spec": {**desired["spec"], "egress": [
        {"to": [{**MODEL_PEER, "ipBlock": None}], "ports": [{"protocol": None, "port": 8000, "endPort": None}]},
        *desired["spec"]["egress"][1:]]}}
    assert adoptable(spelt, desired, shared=False, job_uid=None)
