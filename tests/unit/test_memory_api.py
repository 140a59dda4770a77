"""tests.support.memory_api: the in-memory API server the service tests share keeps the rules of
the real one they rely on: preconditions (resourceVersion, uid), finalizers, namespace deletion,
owner garbage collection (background and foreground), selectors, pages, discovery, faults."""
import pytest

from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Conflict, Forbidden, Invalid, NotFound, Unavailable
from tests.support.memory_api import MemoryApi

NS = "team"
CMS = resources.collection_path("ConfigMap", NS)


def cm_path(name: str) -> str:
    return resources.object_path("ConfigMap", name, NS)


def configmap(name: str, labels: dict | None = None, **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}, **meta}, "data": {"k": name}}


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api


def test_create_assigns_identity_and_a_taken_name_is_409(api):
    live = api.create(CMS, configmap("a", uid="mine"), "create")
    assert live["metadata"]["uid"] != "mine" and live["metadata"]["resourceVersion"]
    with pytest.raises(Conflict):
        api.create(CMS, configmap("a"), "create")
    assert api.put(configmap("b", uid="fixed"))["metadata"]["uid"] == "fixed"   # arranged by the test


def test_create_needs_a_live_namespace_and_a_dry_run_stores_nothing(api):
    with pytest.raises(NotFound):
        api.create(resources.collection_path("ConfigMap", "nowhere"), configmap("a"), "create")
    api.create(CMS, configmap("a"), "create", dry_run=True)
    assert api.get_object("ConfigMap", "a", NS) is None
    api.put(configmap("keep", finalizers=["x/hold"]))
    api.delete(resources.object_path("Namespace", NS), "delete")
    with pytest.raises(Forbidden):
        api.create(CMS, configmap("late"), "create")


def test_a_replace_with_a_stale_resource_version_is_409(api):
    first = api.put(configmap("a"))
    second = api.replace(cm_path("a"), {**first, "data": {"k": "second"}}, "replace")
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    with pytest.raises(Conflict):
        api.replace(cm_path("a"), {**first, "data": {"k": "lost"}}, "replace")
    assert api.get_object("ConfigMap", "a", NS)["data"] == {"k": "second"}
    # without a resourceVersion a replace is unconditional
    api.replace(cm_path("a"), {**configmap("a"), "data": {"k": "forced"}}, "replace")
    assert api.get_object("ConfigMap", "a", NS)["data"] == {"k": "forced"}


def test_uid_and_resource_version_in_a_merge_patch_are_preconditions(api):
    live = api.put(configmap("a"))
    with pytest.raises(Conflict):
        api.merge_patch(cm_path("a"), {"metadata": {"uid": "another"}, "data": {"k": "x"}}, "patch")
    with pytest.raises(Conflict):
        api.merge_patch(cm_path("a"), {"metadata": {"resourceVersion": "0"}, "data": {"k": "x"}}, "patch")
    api.merge_patch(cm_path("a"), {"metadata": {"uid": live["metadata"]["uid"]}, "data": {"k": None, "n": "1"}},
                    "patch")
    assert api.get_object("ConfigMap", "a", NS)["data"] == {"n": "1"}


def test_a_failed_json_patch_test_is_422_and_changes_nothing(api):
    api.put(configmap("a"))
    with pytest.raises(Invalid):
        api.json_patch(cm_path("a"), [{"op": "test", "path": "/data/k", "value": "other"},
                                      {"op": "replace", "path": "/data/k", "value": "x"}], "patch")
    assert api.get_object("ConfigMap", "a", NS)["data"] == {"k": "a"}


def test_a_delete_with_another_uid_is_409_and_deletes_nothing(api):
    live = api.put(configmap("a"))
    with pytest.raises(Conflict):
        api.delete(cm_path("a"), "delete", {"preconditions": {"uid": "a-namesake"}})
    api.delete(cm_path("a"), "delete", {"preconditions": {"uid": live["metadata"]["uid"]}})
    assert api.get_object("ConfigMap", "a", NS) is None


def test_finalizers_delay_deletion_until_removed(api):
    api.put(configmap("a", finalizers=["x/hold"]))
    api.delete(cm_path("a"), "delete")
    going = api.get_object("ConfigMap", "a", NS)
    assert going["metadata"]["deletionTimestamp"]
    api.merge_patch(cm_path("a"), {"metadata": {"finalizers": None}}, "patch")
    assert api.get_object("ConfigMap", "a", NS) is None


def test_a_namespace_deleted_takes_its_objects_and_goes_once_empty(api):
    api.put(configmap("a"))
    api.put(configmap("held", finalizers=["x/hold"]))
    api.delete(resources.object_path("Namespace", NS), "delete")
    assert api.get_object("ConfigMap", "a", NS) is None
    assert api.get_object("Namespace", NS)["status"]["phase"] == "Terminating"   # held by what is left
    api.merge_patch(cm_path("held"), {"metadata": {"finalizers": None}}, "patch")
    assert api.get_object("Namespace", NS) is None


def test_dependents_whose_owners_are_gone_are_collected(api):
    owner = api.put(configmap("owner"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    other = api.put(configmap("other"))
    api.put(configmap("child", ownerReferences=[ref]))
    api.put(configmap("two-owners", ownerReferences=[ref, {**ref, "name": "other", "uid": other["metadata"]["uid"]}]))
    api.delete(cm_path("owner"), "delete")
    assert [cm["metadata"]["name"] for cm in api.list_objects("ConfigMap", NS)] == ["other", "two-owners"]


def test_collection_waits_for_collect_garbage_when_delayed():
    api = MemoryApi(gc_delay=True)
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    owner = api.put(configmap("owner"))
    api.put(configmap("child", ownerReferences=[{"kind": "ConfigMap", "name": "owner",
                                                  "uid": owner["metadata"]["uid"]}]))
    api.delete(cm_path("owner"), "delete")
    assert api.get_object("ConfigMap", "child", NS) is not None
    api.collect_garbage()
    assert api.get_object("ConfigMap", "child", NS) is None


def test_a_foreground_delete_waits_for_its_blocking_dependents(api):
    job = api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS}, "spec": {}})
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"],
           "controller": True, "blockOwnerDeletion": True}
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS, "ownerReferences": [ref],
                                                            "finalizers": ["batch.kubernetes.io/job-tracking"]}})
    job_path = resources.object_path("Job", "j", NS)
    api.delete(job_path, "delete", {"propagationPolicy": "Foreground"})
    live = api.get_object("Job", "j", NS)
    assert live["metadata"]["deletionTimestamp"] and live["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert api.get_object("Pod", "p", NS)["metadata"]["deletionTimestamp"]   # its dependents go first
    pod_path = resources.object_path("Pod", "p", NS)
    api.merge_patch(pod_path, {"metadata": {"finalizers": None}}, "the job controller")
    assert api.get_object("Pod", "p", NS) is None and api.get_object("Job", "j", NS) is None


def test_a_namespace_deleted_in_the_foreground_still_waits_for_its_content(api):
    api.put(configmap("held", finalizers=["x/hold"]))
    api.delete(resources.object_path("Namespace", NS), "delete", {"propagationPolicy": "Foreground"})
    assert api.get_object("Namespace", NS)["status"]["phase"] == "Terminating"
    api.merge_patch(cm_path("held"), {"metadata": {"finalizers": None}}, "patch")
    assert api.get_object("Namespace", NS) is None


def test_a_foreground_delete_without_dependents_is_immediate(api):
    api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS}, "spec": {}})
    api.delete(resources.object_path("Job", "j", NS), "delete", {"propagationPolicy": "Foreground"})
    assert api.get_object("Job", "j", NS) is None


def test_label_and_field_selectors(api):
    api.put(configmap("a", {"app": "x", "tier": "1"}))
    api.put(configmap("b", {"app": "y"}))
    api.put(configmap("c"))

    def names(**params):
        return [i["metadata"]["name"] for i in api.get(CMS, "list", **params)["items"]]
    assert names(labelSelector="app=x") == ["a"]
    assert names(labelSelector="app!=x") == ["b", "c"]
    assert names(labelSelector="app") == ["a", "b"]
    assert names(labelSelector="!app") == ["c"]
    assert names(labelSelector="app,tier=1") == ["a"]
    assert names(fieldSelector="metadata.name=b") == ["b"]


def test_lists_come_in_pages_and_metadata_only_on_request(api):
    for i in range(5):
        api.put(configmap(f"cm-{i}", {"set": "s"}))
    page = api.get(CMS, "list", labelSelector="set=s", limit=2)
    assert len(page["items"]) == 2 and page["metadata"]["continue"]
    seen = [i["metadata"]["name"] for i in page["items"]]
    while page["metadata"].get("continue"):
        page = api.get(CMS, "list", labelSelector="set=s", limit=2, **{"continue": page["metadata"]["continue"]})
        seen += [i["metadata"]["name"] for i in page["items"]]
    assert seen == [f"cm-{i}" for i in range(5)]
    versions = resources.configmap_versions(api, NS, "set=s")
    assert versions == {cm["metadata"]["name"]: cm["metadata"]["resourceVersion"]
                        for cm in api.list_objects("ConfigMap", NS)}
    meta_only = api.request("GET", CMS, "list", params={"limit": 1},
                            headers={"Accept": resources.METADATA_ONLY}).json()
    assert set(meta_only["items"][0]) == {"metadata"}


def test_a_status_subresource_changes_the_status_only(api):
    api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS},
             "spec": {"suspend": False}})
    path = resources.object_path("Job", "j", NS)
    api.merge_patch(path + "/status", {"spec": {"suspend": True}, "status": {"active": 1}}, "status")
    api.merge_patch(path, {"status": {"active": 9}}, "object")
    live = api.get_object("Job", "j", NS)
    assert live["spec"] == {"suspend": False} and live["status"] == {"active": 1}


def test_discovery_lists_the_kinds_of_a_group_and_404s_another(api):
    found = api.get("/apis/rl.agentruntime.io/v1alpha1", "discover")
    assert [r["kind"] for r in found["resources"]] == ["RolloutBatch", "RolloutPool"]
    with pytest.raises(NotFound):
        api.get("/apis/not.installed.io/v1", "discover")


def test_faults_hit_the_matching_calls_the_given_number_of_times(api):
    api.put(configmap("a"))
    api.fail("GET", "ConfigMap", Unavailable("down", status=503), times=2, when=lambda path: path.endswith("/a"))
    api.get(CMS, "list")                       # not the path the fault is for
    for _ in range(2):
        with pytest.raises(Unavailable):
            api.get(cm_path("a"), "get")
    assert api.get(cm_path("a"), "get")["data"] == {"k": "a"}
    assert api.calls[-1] == ("GET", cm_path("a"))


def test_watchers_see_every_change(api):
    seen = []
    api.subscribe("ConfigMap", lambda event, obj: seen.append((event, obj["metadata"]["name"])))
    api.put(configmap("a"))
    api.merge_patch(cm_path("a"), {"data": {"k": "b"}}, "patch")
    api.delete(cm_path("a"), "delete")
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_pod_logs_are_cut_at_limit_bytes(api):
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}})
    api.set_log(NS, "p", "episode", b"0123456789")
    assert resources.read_log(api, NS, "p", "episode", 4) == (b"0123", True)
    assert resources.read_log(api, NS, "p", "episode", 100) == (b"0123456789", False)
    with pytest.raises(NotFound):
        resources.read_log(api, NS, "gone", "episode", 4)


def test_a_namespace_is_labelled_with_its_name_for_good(api):
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "models", "labels": {"team": "ml"}}})
    assert resources.namespace_names(api, "kubernetes.io/metadata.name=models", 5) == ["models"]
    path = resources.object_path("Namespace", "models")
    api.merge_patch(path, {"metadata": {"labels": {"kubernetes.io/metadata.name": None, "team": None}}}, "patch")
    assert api.get_object("Namespace", "models")["metadata"]["labels"] == {"kubernetes.io/metadata.name": "models"}


def test_a_racing_writer_lands_just_before_the_matching_call(api):
    first = api.put(configmap("a"))
    api.meanwhile("PUT", "ConfigMap", lambda: api.merge_patch(cm_path("a"), {"data": {"k": "theirs"}}, "them"))
    with pytest.raises(Conflict):
        api.replace(cm_path("a"), {**first, "data": {"k": "mine"}}, "replace")
    assert api.get_object("ConfigMap", "a", NS)["data"] == {"k": "theirs"}
    assert api.calls[-2:] == [("PATCH", cm_path("a")), ("PUT", cm_path("a"))]
    api.replace(cm_path("a"), {**api.get_object("ConfigMap", "a", NS), "data": {"k": "mine"}}, "replace")   # once


def test_leases_are_served_with_optimistic_concurrency():
    """Leader election's Lease (coordination.k8s.io/v1): created once, replaced only over the
    resourceVersion read."""
    from rolloutbatch.kube import leases

    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rolloutbatch-system"}})
    assert leases.get_lease(api, "rolloutbatch-system", "op") is None
    lease = leases.create_lease(api, "rolloutbatch-system", "op", {"holderIdentity": "a"})
    assert lease["kind"] == "Lease" and lease["metadata"]["resourceVersion"]
    with pytest.raises(Conflict):
        leases.create_lease(api, "rolloutbatch-system", "op", {"holderIdentity": "b"})
    renewed = leases.update_lease(api, lease, {"holderIdentity": "a", "renewTime": "t2"})
    assert renewed["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]
    with pytest.raises(Conflict):
        leases.update_lease(api, lease, {"holderIdentity": "b"})   # stale: a renewed since
    assert leases.get_lease(api, "rolloutbatch-system", "op")["spec"] == {"holderIdentity": "a", "renewTime": "t2"}
    with pytest.raises(NotFound):
        leases.create_lease(api, "elsewhere", "op", {})
