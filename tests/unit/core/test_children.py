"""What a batch creates and how its deletion finds everything without the spec (issue 10 item 2)."""
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
    shared = dict(raw, isolation={"namespace": "Shared", "resourceQuota": True})
    assert "ResourceQuota" not in [o["kind"] for o in provisioning_plan(REF, parse_spec(shared), OWNER, None)]
    sa = provisioning_plan(REF, spec("Dedicated"), OWNER, None)[1]
    assert sa["metadata"]["name"] == "default" and sa["automountServiceAccountToken"] is False
