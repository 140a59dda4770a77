"""The warm pools' services against races, refusals and transient errors, on the API in memory
(service.pools, service.pool_claims). Each test is a defect an attack review found (each
docstring says what it did before it was fixed)."""
from __future__ import annotations

import time

import pytest

from rolloutbatch import GROUP, VERSION
from rolloutbatch.core import naming, pool_children, pool_spec, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.kube.errors import Invalid, TooManyRequests, Unavailable
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import pool_claims
from rolloutbatch.service import pools as pool_service
from tests.unit.service.memory_pool import (BATCH, NS, POOL_NS, claimed_indexes, triple, batch_spec, filled, live, make_pool,
                                            daemon_until_its_status, hand_over, pod_names, reconciler, run, set_status)


POOL_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm"


def _claim_now(api, name: str, index: int = 0) -> None:
    """Another coroutine of the operator (a batch's provisioning) claims the pod now."""
    pod = api.get_object("Pod", name, POOL_NS)
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
                    pools.claim_patch(pod, BATCH, index, time.time(), 60), "claim")


# -- the pool deletes a pod a batch claimed since the pool listed it ------------------------------------
@pytest.mark.parametrize("how", ["scale to 0", "pool deleted"])
def test_the_pool_never_deletes_a_pod_claimed_since_its_list(api, how):
    """The round (stale, surplus) and the deletion list warm pods, then delete each with a uid
    precondition only. A claim landing in between (another coroutine; the list->delete window grows
    with the pod count) is deleted anyway: a plain DELETE sets no DisruptionTarget, sh as PID 1
    ignores SIGTERM, exit 137 is FailIndex and the verdict NonZeroExit: the agent's failure."""
    rec = filled(api, 1)
    (name,) = pod_names(api)
    if how == "scale to 0":
        api.merge_patch(POOL_PATH, {"spec": {"size": 0}}, "scale")
        rec.body = live(api)
    api.meanwhile("DELETE", "Pod", lambda: _claim_now(api, name))
    run(rec.round() if how == "scale to 0" else rec.delete())
    pod = api.get_object("Pod", name, POOL_NS)
    assert pod is not None and pool_children.claimed_by(pod) == BATCH.uid


# -- a pool's network tightened later ---------------------------------------------------------------------
def test_changing_the_network_to_deny_all_closes_egress(api):
    """spec.network is mutable ("Every field may change"), and _ensure_children re-runs on the change,
    but kube.pool_storage._ensure returns an existing NetworkPolicy unchanged: a pool moved from
    AllowEgress to DenyAll kept egress open for every pod, warm or claimed, with no sign of it
    (the pods were not even stale: the network was not in template_digest). Its warm pods are
    replaced now, and the namespace's base policy denies egress whatever the network."""
    make_pool(api, 1, network=v.NETWORK_ALLOW_EGRESS)
    rec = reconciler(api)
    run(rec.round())
    api.merge_patch(POOL_PATH, {"spec": {"network": v.NETWORK_DENY_ALL}}, "tighten")
    rec.body = live(api)
    run(rec.round())
    policy = api.get_object("NetworkPolicy", naming.DEDICATED_POLICY, POOL_NS)
    assert "Egress" in policy["spec"]["policyTypes"]


def _selects(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels, matchExpressions) against a pod's labels."""
    expressions = {"Exists": lambda e: e["key"] in labels, "DoesNotExist": lambda e: e["key"] not in labels,
                   "In": lambda e: labels.get(e["key"]) in e["values"],
                   "NotIn": lambda e: labels.get(e["key"]) not in e["values"]}
    return (all(labels.get(k) == val for k, val in (selector.get("matchLabels") or {}).items())
            and all(expressions[e["operator"]](e) for e in selector.get("matchExpressions") or []))


def _egress_open(api, pod) -> bool:
    """NetworkPolicy semantics for the pool's policies: a pod's (or a Job template's) egress is
    open when no policy selecting it isolates egress, or one that does allows some."""
    labels = pod["metadata"].get("labels") or {}
    isolating = [p["spec"] for p in api.list_objects("NetworkPolicy", POOL_NS)
                 if "Egress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], labels)]
    return not isolating or any(spec.get("egress") for spec in isolating)


@pytest.mark.parametrize("before, after, batch_network", [
    (v.NETWORK_DENY_ALL, v.NETWORK_ALLOW_EGRESS, {"network": "DenyAll"}),   # a DenyAll written: never opened
    (v.NETWORK_ALLOW_EGRESS, v.NETWORK_DENY_ALL, {}),                         # the pool's, unset: not cut off
])
def test_a_network_change_leaves_the_pods_batches_hold_under_theirs(api, before, after, batch_network):
    """README: "a DenyAll written is never run on an AllowEgress pool"; the check is made at the claim
    (core.pool_spec.sandbox_conflict). The pool's one policy (podSelector {}) was replaced as soon as
    spec.network changed, claimed pods included: a running DenyAll batch's episodes got open egress
    mid-episode, with no Event or status. A pod keeps the network it was made and claimed under; the
    pods made since get the new one, and the status says which pods keep the old."""
    rec = filled(api, 2, network=before)
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH,
                              batch_spec(episodes=1, parallelism=1, isolation=batch_network),
                              lambda *e: None, None, lambda pods: None, CLUSTERWIDE))
    (claimed,) = claimed_indexes(api)
    api.merge_patch(POOL_PATH, {"spec": {"network": after}}, "switch")
    rec.body = live(api)
    run(rec.round())
    pod = api.get_object("Pod", claimed, POOL_NS)
    assert pool_children.claimed_by(pod) == BATCH.uid or pod["metadata"]["labels"].get(naming.LABEL_BATCH_UID) == BATCH.uid
    assert _egress_open(api, pod) is (before == v.NETWORK_ALLOW_EGRESS)
    # the batch's cold pods run under the network it was checked against too
    (job,) = [j for j in api.list_objects("Job", POOL_NS)]
    assert _egress_open(api, job["spec"]["template"]) is (before == v.NETWORK_ALLOW_EGRESS)
    # the pool's other pods are of the old network: stale, replaced; those made now get the new one
    others = [p for p in api.list_objects("Pod", POOL_NS) if p["metadata"]["name"] != claimed
              and not p["metadata"].get("deletionTimestamp")]
    assert all(_egress_open(api, p) is (after == v.NETWORK_ALLOW_EGRESS) for p in others)
    fresh = pool_children.warm_pod(rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))
    assert _egress_open(api, fresh) is (after == v.NETWORK_ALLOW_EGRESS)
    message = live(api)["status"]["message"]
    assert f"1 pod(s) that batches hold keep the network {before}" in message, message


# -- the upgrade from an operator before the network label -------------------------------------------------
def _ran_under_the_previous_operator(api, in_force: str, spec_now: str | None = None) -> str:
    """A claimed, running episode and its batch's Job, as the operator before naming.LABEL_NETWORK
    left them (:func:`_as_the_previous_operator_left_it`). ``spec_now``: the pool's spec.network
    changed while no operator ran. Returns the claimed pod's name."""
    filled(api, 2, network=in_force)
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(episodes=1, parallelism=1),
                              lambda *e: None, None, lambda pods: None, CLUSTERWIDE))
    (claimed,) = claimed_indexes(api)
    _as_the_previous_operator_left_it(api, in_force)
    if spec_now is not None:
        api.merge_patch(POOL_PATH, {"spec": {"network": spec_now}}, "changed meanwhile")
    return claimed


def _as_the_previous_operator_left_it(api, in_force: str) -> None:
    """No network label on the pods nor in a Job's template, and one policy over every pod whose
    policyTypes said the network (no Egress: AllowEgress)."""
    for name in pod_names(api):
        api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", {"metadata": {"labels": {naming.LABEL_NETWORK: None}}},
                        "old pod")
    for (plural, ns, _name), obj in api.objects.items():   # a Job's template, as stored (no PATCH changes it)
        if plural == "jobs" and ns == POOL_NS:
            obj["spec"]["template"]["metadata"]["labels"].pop(naming.LABEL_NETWORK)
    api.delete(f"/apis/networking.k8s.io/v1/namespaces/{POOL_NS}/networkpolicies/{naming.POOL_EGRESS_POLICY}", "old")
    old = api.objects[("networkpolicies", POOL_NS, naming.DEDICATED_POLICY)]
    old["spec"] = {"podSelector": {}, "policyTypes": ["Ingress"] if in_force == v.NETWORK_ALLOW_EGRESS
                   else ["Ingress", "Egress"]}


def _cold_pod(api, name: str = "b-cold") -> dict:
    """A cold pod the batch's Job makes from its template."""
    (job,) = api.list_objects("Job", POOL_NS)
    template = job["spec"]["template"]
    return api.create(f"/api/v1/namespaces/{POOL_NS}/pods",
                      {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": name},
                       "spec": template["spec"]}, "cold pod")


@pytest.mark.parametrize("in_force, spec_now", [
    (v.NETWORK_ALLOW_EGRESS, None), (v.NETWORK_DENY_ALL, None),
    (v.NETWORK_ALLOW_EGRESS, v.NETWORK_DENY_ALL),   # changed while no operator ran: the policy in force counts
    (v.NETWORK_DENY_ALL, v.NETWORK_ALLOW_EGRESS),
])
def test_an_episode_claimed_before_the_upgrade_keeps_its_network(api, in_force, spec_now):
    """The pods (and a pooled Job's template) an operator before naming.LABEL_NETWORK made carry no
    such label; the upgraded operator's first round rewrote the pool's policies to deny egress to
    every pod without it: an AllowEgress pool's running episode lost its egress mid-episode, and so
    did its batch's later cold pods. They are labelled first with the network they ran under, and
    the Job's later cold pods (its template cannot change) keep it by a policy of their own."""
    claimed = _ran_under_the_previous_operator(api, in_force, spec_now)
    opened = in_force == v.NETWORK_ALLOW_EGRESS
    assert _egress_open(api, api.get_object("Pod", claimed, POOL_NS)) is opened   # as the old policy says
    rec = reconciler(api)
    run(rec.round())                                                 # the upgraded operator's first round
    pod = api.get_object("Pod", claimed, POOL_NS)
    assert pod["metadata"]["labels"][naming.LABEL_NETWORK] == in_force
    assert _egress_open(api, pod) is opened
    (job,) = api.list_objects("Job", POOL_NS)
    assert _egress_open(api, job["spec"]["template"]) is opened
    cold = _cold_pod(api)                                            # open (or not) from its first instant
    assert _egress_open(api, cold) is opened
    run(rec.round())
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["metadata"]["labels"][naming.LABEL_NETWORK] == in_force
    # the previous version's podSelector {} policy is replaced: nothing opens a DenyAll pod
    policies = {p["metadata"]["name"]: p["spec"] for p in api.list_objects("NetworkPolicy", POOL_NS)}
    assert policies[naming.DEDICATED_POLICY] == pool_children.network_policies(rec.ref)[0]["spec"]
    denied = pool_children.warm_pod(rec.ref, pool_spec.parse_pool_spec({**live(api)["spec"], "network": v.NETWORK_DENY_ALL}))
    assert not _egress_open(api, denied)
    allowed = pool_children.warm_pod(rec.ref, pool_spec.parse_pool_spec({**live(api)["spec"], "network": v.NETWORK_ALLOW_EGRESS}))
    assert _egress_open(api, allowed)
    assert (naming.POOL_UNLABELLED_EGRESS_POLICY in policies) is opened


def test_the_unlabelled_pods_policy_goes_once_the_jobs_before_the_upgrade_end(api):
    """The policy that keeps an old Job's cold pods open is the upgrade's only: once no Job of that
    time runs (their pods labelled), it is deleted, and the pool's pods keep their egress by their label."""
    claimed = _ran_under_the_previous_operator(api, v.NETWORK_ALLOW_EGRESS)
    rec = reconciler(api)
    run(rec.round())
    run(rec.round())
    api.get_object("NetworkPolicy", naming.POOL_UNLABELLED_EGRESS_POLICY, POOL_NS)   # the Job runs: kept
    (job,) = api.list_objects("Job", POOL_NS)
    api.merge_patch(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs/{job['metadata']['name']}/status",
                    {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, "done")
    run(rec.round())
    names = [p["metadata"]["name"] for p in api.list_objects("NetworkPolicy", POOL_NS)]
    assert naming.POOL_UNLABELLED_EGRESS_POLICY not in names
    assert _egress_open(api, api.get_object("Pod", claimed, POOL_NS))
    calls = len(api.calls)
    run(rec.round())   # nothing of that time is read again
    assert not [c for c in api.calls[calls:] if "networkpolicies" in c[1] or "jobs" in c[1]]


def test_the_rounds_while_a_job_before_the_upgrade_runs_read_only_its_jobs(api):
    """A Job of the earlier operator may run for hours (Kueue holding it suspended): each round of
    that time read the namespace and both policies again, to learn what the first round had."""
    _ran_under_the_previous_operator(api, v.NETWORK_ALLOW_EGRESS)
    rec = reconciler(api)
    run(rec.round())
    calls = len(api.calls)
    run(rec.round())
    run(rec.round())
    later = [c[1] for c in api.calls[calls:]]
    assert not [p for p in later if "networkpolicies" in p or p.rstrip("/").endswith(f"namespaces/{POOL_NS}")], later
    api.get_object("NetworkPolicy", naming.POOL_UNLABELLED_EGRESS_POLICY, POOL_NS)   # the Job runs: kept


def test_an_upgraded_pool_without_batches_makes_no_policy_for_old_pods(api):
    """No Job of the earlier operator runs: its warm pods are labelled (and replaced: stale), and
    no policy for pods without the label is made."""
    filled(api, 2, network=v.NETWORK_ALLOW_EGRESS)
    _as_the_previous_operator_left_it(api, v.NETWORK_ALLOW_EGRESS)
    rec = reconciler(api)
    run(rec.round())
    assert rec._labels_carried
    names = [p["metadata"]["name"] for p in api.list_objects("NetworkPolicy", POOL_NS)]
    assert naming.POOL_UNLABELLED_EGRESS_POLICY not in names
    assert all(_egress_open(api, p) for p in api.list_objects("Pod", POOL_NS))


@pytest.mark.parametrize("stops", ["PATCH", "PUT"])
def test_a_restart_during_the_upgrade_ends_the_same(api, stops):
    """The operator stopped amid the labels (PATCH) or between them and the policies' write (PUT),
    and the pool's spec.network changed meanwhile: the next operator reads the network from the live
    policies again (the previous version's, or the one it made for the old Job's pods), and the
    episode and its batch's cold pods keep their egress."""
    claimed = _ran_under_the_previous_operator(api, v.NETWORK_ALLOW_EGRESS)
    api.fail(stops, "Pod" if stops == "PATCH" else "NetworkPolicy", Unavailable("the operator stopped here"))
    with pytest.raises(Unavailable):
        run(reconciler(api).round())
    assert _egress_open(api, api.get_object("Pod", claimed, POOL_NS))
    api.merge_patch(POOL_PATH, {"spec": {"network": v.NETWORK_DENY_ALL}}, "changed meanwhile")
    run(reconciler(api).round())                                     # the restarted operator
    pod = api.get_object("Pod", claimed, POOL_NS)
    assert pod["metadata"]["labels"][naming.LABEL_NETWORK] == v.NETWORK_ALLOW_EGRESS
    assert _egress_open(api, pod)
    assert _egress_open(api, _cold_pod(api))


# -- the task files under a running episode -----------------------------------------------------------------
def test_a_task_change_does_not_rewrite_the_files_of_claimed_pods(api):
    """task_configmap says "pods mount the files as they were at start", but the one ConfigMap is
    replaced in place, and the kubelet syncs configMap volumes into running pods: an episode
    (and a running batch's later cold pods) see the new task mid-batch, unrecorded."""
    rec = filled(api, 1)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(episodes=1, parallelism=1), rec.ref, 60)))
    (pod,) = fresh
    volume = next(vol for vol in pod["spec"]["volumes"] if vol["name"] == "task")
    api.merge_patch(POOL_PATH, {"spec": {"task": {"files": {"e.py": "y"}}}}, "new task")
    rec.body = live(api)
    run(rec.round())
    assert api.get_object("ConfigMap", volume["configMap"]["name"], POOL_NS)["data"] == {"episode.py": "x"}


# -- status -------------------------------------------------------------------------------------------------
def test_claimed_pods_are_counted(api):
    """status.claimedPods ("Pods handed to batches since the pool was created, a counter that only
    grows", the CLAIMED column) is only ever copied from the previous status: always 0."""
    rec = filled(api, 2)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(episodes=2, parallelism=2), rec.ref, 60))
    rec.body = live(api)
    run(rec.round())
    assert live(api)["status"]["claimedPods"] == 2


def test_a_task_the_api_refuses_is_said_in_the_status(api):
    """parse_pool_spec does not check task file names or their total size (the CRD leaves key syntax to
    the operator); the API refuses the ConfigMap (422) and run() only logs and retries every 2 s,
    forever: the pool has no status at all, no Stalled, no Event."""
    make_pool(api, 1, task={"files": {"a/b": "x"}})
    api.fail("POST", "ConfigMap", Invalid('ConfigMap "rp-x-task" is invalid: data[a/b]: a valid config key '
                                          "must consist of alphanumeric characters, '-', '_' or '.'", status=422),
             times=1000)
    daemon_until_its_status(reconciler(api))   # its first round
    status = live(api).get("status") or {}
    assert status.get("message") or any(c.get("status") == "True" for c in status.get("conditions") or []
                                        if c.get("type") == "Stalled")


def test_a_pool_whose_namespace_was_deleted_recovers(api, monkeypatch):
    """The children are ensured only when (generation, task digest) changes: once the pool's namespace
    is deleted (by hand, or a cleanup), every later round's creates fail (PodsNotCreated, retried each
    STUCK_BACKOFF) and the namespace, its default-deny NetworkPolicy and task ConfigMap are never made
    again until someone edits the pool's spec."""
    monkeypatch.setattr(pool_service, "STUCK_BACKOFF", 0.0)
    rec = filled(api, 2)
    run(rec.round())
    api.delete(f"/api/v1/namespaces/{POOL_NS}", "delete namespace")
    for _ in range(3):
        run(rec.round())
    assert api.get_object("Namespace", POOL_NS) is not None
    assert api.get_object("NetworkPolicy", naming.DEDICATED_POLICY, POOL_NS) is not None
    assert len(pod_names(api)) == 2


# -- a pooled batch's side --------------------------------------------------------------------------------
def test_a_failed_annotation_does_not_evict_a_pod_running_its_episode(api):
    """_deliver evicts on any exception, including the delivered-at PATCH after a successful hand-over: a
    transient 503 there throws away an episode that is already running (an infrastructure retry of
    the index: the first attempt's outcome is discarded, a re-sample the agent did not earn or lose)."""
    filled(api, 1)
    spec = batch_spec(episodes=1, parallelism=1)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    name = fresh[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    api.fail("PATCH", "Pod", Unavailable("the server is currently unable to handle the request", status=503))
    events = hand_over(api, spec, fresh)
    assert api.get_object("Pod", name, POOL_NS) is not None, "the running episode was evicted"
    assert [e[1] for e in events if e[1] == v.EVENT_DELIVERY_FAILED] == []


def test_a_transient_error_creating_the_job_does_not_stall_the_batch(api):
    """provision() turns every KubeError of the Job's creation into Stalled(ProvisioningRefused), a
    terminal Failed batch, where service.provisioning re-raises transient ones (the one error
    policy, design §5.10). Its warm pods are claimed (and handed their episodes) already: they run
    on as orphans until their deadline."""
    filled(api, 2)
    api.fail("POST", "Job", Unavailable("etcdserver: request timed out", status=503))
    try:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    except Stalled as exc:
        pytest.fail(f"a transient 503 stalled the batch: {exc}")
    except Unavailable:
        pass   # retried by the reconciler: fine


@pytest.mark.parametrize("edited", ["\u00b2", "\u0663", " 1", "1\n"])   # "²" and "٣" pass str.isdigit()
def test_a_claims_index_edited_by_hand_is_left_out_not_a_crash(api, edited):
    """As enrol says: a claim whose index annotation was edited to anything but decimal digits
    is left out, by the enrolment and by a claim run again (a restart mid-provisioning); int("²")
    raised, and the provisioning stalled as a bug ("٣" was read as index 3)."""
    rec = filled(api, 2)
    spec = batch_spec(episodes=1, parallelism=1)
    claims = run(pool_claims.claim(PoolStorage(api), BATCH, spec, rec.ref, 60))
    (name,) = claimed_indexes(api)
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
                    {"metadata": {"annotations": {v.COMPLETION_INDEX_KEY: edited}}}, "edited by hand")
    pods = [api.get_object("Pod", p["metadata"]["name"], POOL_NS) for p in claims.unenrolled]
    assert run(pool_claims.enrol(PoolStorage(api), POOL_NS, BATCH, pods)) == []
    run(pool_claims.claim(PoolStorage(api), BATCH, spec, rec.ref, 60))


def _conditions(api):
    return {c["type"]: c["status"] for c in live(api)["status"]["conditions"]}


def test_a_scale_down_writes_the_pods_left_not_those_it_deleted(api):
    """`kubectl scale rp/warm --replicas=1` of a full pool of 3: the round deletes 2 warm pods, and
    its status said readyPods 3 ("3/1 warm", Ready) until the next round, 5 s later; readyPods is
    what /scale reads."""
    rec = filled(api, 3)
    run(rec.round())
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"size": 1}}, "scale")
    rec.body = live(api)
    run(rec.round())
    assert len(pod_names(api)) == 1 and live(api)["status"]["readyPods"] == 1, live(api)["status"]["message"]


def test_a_prepare_killed_for_its_memory_stalls_the_pool_not_churns_it(api):
    """OOMKilled (exit 137: the kernel's KILL, no launcher traps it) every time: the template cannot
    run, so the pool says Stalled with the reason and waits out the back-off, as for a prepare that
    fails; it made a new pod every round, Filling for ever."""
    make_pool(api, 1)
    rec = reconciler(api)
    run(rec.round())
    made = set(pod_names(api))
    for _ in range(4):
        for name in pod_names(api):
            set_status(api, name, {"phase": "Failed", "containerStatuses": [
                {"name": "episode", "started": False, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
        run(rec.round())
        made |= set(pod_names(api))
    assert len(made) <= 2 and _conditions(api)["Stalled"] == "True"
    assert "OOMKilled" in live(api)["status"]["message"]


def _killed_for_memory(started: str, ready_lost: str | None, finished: str) -> dict:
    """A pool pod's status once the kernel killed it for memory: its container's run, and, when
    given, when the kubelet last changed its Ready condition (to False)."""
    status: dict = {"phase": "Failed", "containerStatuses": [
        {"name": "episode", "started": False, "state": {"terminated": {
            "exitCode": 137, "reason": "OOMKilled", "startedAt": started, "finishedAt": finished}}}]}
    if ready_lost is not None:
        status["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodFailed",
                                 "lastTransitionTime": ready_lost}]
    return status


def test_a_warm_pod_killed_for_memory_while_it_waited_is_replaced_not_a_stalled_template(api):
    """A pod that finished its prepare and was Ready (its Ready condition turned False only at its
    end), then killed while it waited (node memory pressure, the kernel's OOM killer), is a warm pod
    that died: replaced at once, the pool not Stalled PrepareFailed for the back-off."""
    rec = filled(api, 2)
    victim = pod_names(api)[0]
    set_status(api, victim, _killed_for_memory("2026-12-03T00:00:01Z", "2026-12-03T01:00:00Z", "2026-12-03T01:00:00Z"))
    run(rec.round())
    assert victim not in pod_names(api) and len(pod_names(api)) == 2
    assert _conditions(api)["Stalled"] == "False", live(api)["status"]["message"]


def test_a_pod_killed_for_memory_before_it_was_ever_ready_is_a_failed_prepare(api):
    """Never Ready (its Ready condition False since it started): its prepare was killed."""
    make_pool(api, 1)
    rec = reconciler(api)
    run(rec.round())
    for name in pod_names(api):
        set_status(api, name, _killed_for_memory("2026-12-03T00:00:01Z", "2026-12-03T00:00:01Z", "2026-12-03T00:00:09Z"))
    run(rec.round())
    assert _conditions(api)["Stalled"] == "True" and "OOMKilled" in live(api)["status"]["message"]


def test_a_namespace_deleted_from_under_the_pool_is_made_again_and_refilled_at_once(api):
    """The creations meeting the missing namespace (404) stalled the pool PodsNotCreated for the
    60 s back-off, saying its template cannot run: the namespace came back, its pods a minute later."""
    rec = filled(api, 2)
    run(rec.round())
    api.delete(f"/api/v1/namespaces/{POOL_NS}", "kubectl delete ns")
    for _ in range(3):
        run(rec.round())
    assert api.get_object("Namespace", POOL_NS) is not None and len(pod_names(api)) == 2
    assert _conditions(api)["Stalled"] == "False", live(api)["status"]["message"]


# -- a transient refusal of a warm pod's creation --------------------------------------------------------
@pytest.mark.parametrize("refusal", [
    TooManyRequests("create pod: 429 Too Many Requests (the API's rate limits)", status=429),
    Unavailable("create pod: 503 Service Unavailable", status=503)])
def test_a_transient_refusal_of_a_warm_pods_creation_neither_stalls_the_pool_nor_holds_its_refill(api, refusal):
    """A 429 (API Priority and Fairness throttling a refill of 50 creations at once) or a 503 on
    one creation was taken as the template's fault: Stalled=True PodsNotCreated, a Warning Event,
    and no pod made for the 60 s STUCK_BACKOFF, where the pool's own loop retries such errors in
    2 s. Now it stalls nothing: the next round makes the missing pod."""
    make_pool(api, 3)
    events: list = []
    api.fail("POST", "Pod", refusal, times=1)
    rec = reconciler(api, events)
    run(rec.round())
    assert len(pod_names(api)) == 2
    assert _conditions(api)["Stalled"] == "False", live(api)["status"]
    assert events == [], events
    run(rec.round())       # the next round (well within STUCK_BACKOFF) makes the missing pod
    assert len(pod_names(api)) == 3
    assert _conditions(api)["Stalled"] == "False", live(api)["status"]


def test_warm_pods_refused_transiently_without_a_break_say_the_api_is_unavailable(api):
    """A transient refusal stalls nothing, but one that lasts (the API throttling every creation
    for minutes) must not leave the pool saying it fills with nothing made: past the give-up time
    (the batches' transient_give_up) it says Stalled=True ApiUnavailable, and the first round
    that goes through says it fills again."""
    make_pool(api, 2)
    rec = reconciler(api)
    rec.api_give_up = 0.0
    api.fail("POST", "Pod", TooManyRequests("create pod: 429 Too Many Requests", status=429), times=4)
    run(rec.round())
    assert _conditions(api)["Stalled"] == "False"     # once is no outage
    run(rec.round())
    status = live(api)["status"]
    assert _conditions(api)["Stalled"] == "True", status
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == v.PoolReason.API_UNAVAILABLE and "429" in stalled["message"], stalled
    run(rec.round())
    run(rec.round())
    run(rec.round())
    assert len(pod_names(api)) == 2
    assert _conditions(api)["Stalled"] == "False", live(api)["status"]


def test_a_pool_round_failing_transiently_without_a_break_says_the_api_is_unavailable(api):
    """The rounds themselves failing (every read a 503) were only logged, every 2 s, for ever:
    nothing on the pool said so. Past the give-up time it says Stalled=True ApiUnavailable."""
    make_pool(api, 1)
    rec = reconciler(api)
    rec.api_give_up = 0.0
    api.fail("POST", "Namespace", Unavailable("create namespace: 503 Service Unavailable", status=503), times=1000)
    api.fail("GET", "Namespace", Unavailable("get namespace: 503 Service Unavailable", status=503), times=1000)

    daemon_until_its_status(rec)   # the first round fails within the give-up, the next one past it
    stalled = next(c for c in live(api)["status"]["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == v.PoolReason.API_UNAVAILABLE, stalled
