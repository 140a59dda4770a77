"""The namespaced install (core.scope), against an API server in memory that answers 403 to every
request outside the watched namespace, and to every one inside it that the Role of
`manifests/namespaced` does not grant, as that install's ServiceAccount gets.

A Dedicated batch is refused before anything is created and deleted without a refused request; a
Shared one runs to its end and is cleaned up; a pooled one is refused, whether it would wait for
its pool or not; an unreadable RuntimeClass is not a refusal, an unreadable PriorityClass is (its
value guards the cluster's critical range).
"""
import asyncio
import re
from pathlib import Path

import yaml

from rolloutbatch import GROUP, POOL_KIND, VERSION
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.scope import CLUSTERWIDE, POOLS_REFUSED_MESSAGE, Scope, parse_namespaces
from rolloutbatch.kube.errors import Forbidden
from tests.unit.service.memory_cluster import NAMESPACE, run, until
from tests.unit.service.test_reconciler_lifecycle import SPEC, every_episode_ends, namespaces, start

ROOT = Path(__file__).resolve().parents[3]
SHARED = {**SPEC, "isolation": {"namespace": "Shared"}, "cleanup": {"sandbox": "Always"}}


def outside(path: str) -> bool:
    return f"/namespaces/{NAMESPACE}/" not in path


# The namespaced install's Role (what its RoleBinding grants in each watched namespace).
ROLE_RULES = [rule for doc in yaml.safe_load_all((ROOT / "manifests/namespaced/role.yaml").read_text())
              if doc and doc.get("kind") == "Role" for rule in doc["rules"]]
_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_PATH = re.compile(r"^/apis?/(?:(?P<group>[\w.-]+)/)?v\w+/namespaces/[^/]+/(?P<resource>[a-z]+)"
                   r"(?:/(?P<name>[^/?]+))?(?:/(?P<sub>[a-z]+))?")


# What the test does as the batch's user (submit it) and as the controllers (the Job controller
# makes pods, the kubelet and the Job controller write their status): never the operator's calls.
_NOT_THE_OPERATOR = re.compile(r"^POST .*/(rolloutbatches|pods)$|^PATCH .*/(pods|jobs)/[^/]+/status$")


def allowed(method: str, path: str) -> bool:
    """Whether the Role grants this request in the watched namespace (RBAC's verbs: get with a
    name, list without one, watches are not made through this API)."""
    match = _PATH.match(path)
    if not match:
        return False
    group = "" if path.startswith("/api/") else match["group"]
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    verb = _VERB.get(method) or ("get" if match["name"] else "list")
    return any(group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
               for rule in ROLE_RULES)


def confine(cluster) -> list[str]:
    """Every request the namespaced Role does not grant refused, as RBAC would (outside the
    watched namespace, or a verb it lacks inside); the refused paths."""
    refused: list[str] = []
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        def when(path: str, method: str = method) -> bool:
            if _NOT_THE_OPERATOR.search(f"{method} {path}"):
                return False   # the test playing its user and the controllers, under their own rights
            if outside(path) or not allowed(method, path):
                refused.append(path)
                return True
            return False
        cluster.api.fail(method, None, Forbidden("forbidden: not granted by the namespaced Role", status=403),
                         times=10**6, when=when)
    return refused


def test_a_dedicated_batch_is_refused_before_anything_is_created_and_deleted_without_a_refusal():
    async def scenario(cluster):
        refused = confine(cluster)
        before = namespaces(cluster)
        task = await start(cluster)
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_CLUSTER_RIGHTS)
        assert "Dedicated" in status["message"] and "Shared" in status["message"] and NAMESPACE in status["message"]
        assert cluster.job() is None and namespaces(cluster) == before
        assert refused == []   # refused by the check, not by the API
        assert await cluster.reconciler().delete_sandbox(5) is True
        assert refused == []
    run(scenario, watch_namespaces=(NAMESPACE,))


def test_a_shared_batch_runs_to_its_end_and_is_cleaned_up_inside_its_namespace():
    async def scenario(cluster):
        refused = confine(cluster)
        # A RuntimeClass it may not read is not checked: the Job controller would say it is missing.
        task = await start(cluster, {**SHARED, "runtimeClassName": "cube"})
        await until(lambda: cluster.status().get("phase") == v.RUNNING)
        every_episode_ends(cluster)
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert status["phase"] == v.SUCCEEDED and status["succeededEpisodes"] == 3, status
        await until(lambda: cluster.job() is None)   # Always: the Job went after the end
        assert refused == ["/apis/node.k8s.io/v1/runtimeclasses/cube"]
        assert await cluster.reconciler().delete_sandbox(5) is True
        assert refused == ["/apis/node.k8s.io/v1/runtimeclasses/cube"]
    run(scenario, watch_namespaces=(NAMESPACE,))


def test_an_unreadable_priority_class_refuses_the_batch_namespaced_only():
    spec = {**SHARED, "podTemplate": {"priorityClassName": "batch-low"}}

    async def namespaced(cluster):
        confine(cluster)
        await asyncio.wait_for(await start(cluster, spec), 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_CLUSTER_RIGHTS)
        assert "batch-low" in status["message"] and cluster.job() is None
    run(namespaced, watch_namespaces=(NAMESPACE,))

    async def clusterwide(cluster):   # the same refusal is the API's there: a broken install, said as such
        confine(cluster)
        await asyncio.wait_for(await start(cluster, spec), 10)
        assert cluster.status()["reason"] == v.STALL_API_REFUSED
    run(clusterwide)


def _pooled_in_a_namespaced_install(**spec) -> tuple:
    """(phase, reason, message) of a batch on a pool of its namespace, run by a namespaced install."""
    seen = []

    async def scenario(cluster):
        cluster.api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND,
                         "metadata": {"name": "warm", "namespace": NAMESPACE},
                         "spec": {"size": 3, "task": {"files": {"episode.py": "x"}}}})
        confine(cluster)
        cluster.submit({"episodes": 3, "parallelism": 3, "episodeTimeoutSeconds": 60, **spec})
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        seen.append((status.get("phase"), status.get("reason"), status.get("message")))

    run(scenario, watch_namespaces=(NAMESPACE,))
    return seen[0]


def test_a_pooled_batch_that_waits_for_its_pool_in_a_namespaced_install_is_refused_as_a_cold_one_is():
    """A namespaced install cannot run pools (a pool's pods live in a namespace of their own): a
    pooled batch is refused ClusterRightsRequired, with what to do, before anything is done. One
    with whenEmpty Wait too: its wait would list the pool's namespace, which the Role does not
    reach, and fail on the API's 403 instead."""
    cold = _pooled_in_a_namespaced_install(poolRef={"name": "warm"})
    assert cold == (v.FAILED, v.STALL_CLUSTER_RIGHTS, POOLS_REFUSED_MESSAGE), cold
    assert _pooled_in_a_namespaced_install(poolRef={"name": "warm", "whenEmpty": "Wait"}) == cold


def test_a_batch_this_install_cannot_run_submitted_stopped_is_refused_not_failed_on_a_403():
    """A pooled batch submitted with spec.stop: its stop path read a Job in the pool's namespace,
    which the Role does not reach, and the batch failed on the API's 403 (ApiRequestRefused)."""
    seen = _pooled_in_a_namespaced_install(poolRef={"name": "warm"}, stop=True)
    assert seen == (v.FAILED, v.STALL_CLUSTER_RIGHTS, POOLS_REFUSED_MESSAGE), seen


def test_the_cluster_wide_install_still_makes_dedicated_sandboxes():
    async def scenario(cluster):
        task = await start(cluster)
        await until(lambda: cluster.status().get("phase") == v.RUNNING)
        assert cluster.status()["sandboxNamespace"] in namespaces(cluster)
        task.cancel()
    run(scenario)


def test_scope_watch_paths_and_reach():
    assert CLUSTERWIDE.watch_paths("/api/v1", "pods") == ("/api/v1/pods",)
    scope = Scope(("a", "b"))
    assert scope.watch_paths("/apis/batch/v1", "jobs") == ("/apis/batch/v1/namespaces/a/jobs",
                                                           "/apis/batch/v1/namespaces/b/jobs")
    assert scope.reaches("a") and not scope.reaches("c") and not scope.reaches(None)
    assert CLUSTERWIDE.reaches(None) and CLUSTERWIDE.clusterwide and not scope.clusterwide


def test_watch_namespace_values_are_namespace_names():
    assert parse_namespaces(["team-a", "team-b", "team-a"]) == ("team-a", "team-b")
    for bad in ["Team", "a.b", "-a", "a" * 64, ""]:
        try:
            parse_namespaces([bad])
        except ValueError as exc:
            assert repr(bad) in str(exc)
        else:
            raise AssertionError(bad)


def test_kopf_scans_nothing_cluster_wide_when_namespaced():
    # kopf's namespace listing and CRD watch are cluster-wide reads: its restricted mode is declared.
    import types

    import kopf

    from rolloutbatch.handlers.lifecycle import configure
    from rolloutbatch.service.context import Settings

    for namespaces, disabled in (((NAMESPACE,), True), ((), False)):
        settings = kopf.OperatorSettings()
        memo = types.SimpleNamespace(ctx=types.SimpleNamespace(settings=Settings(watch_namespaces=namespaces)))
        configure(settings=settings, memo=memo)
        assert settings.scanning.disabled is disabled
