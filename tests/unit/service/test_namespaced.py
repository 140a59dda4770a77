"""The namespaced install (core.scope), against an API server in memory that answers 403 to every
request outside the watched namespace, as the ServiceAccount of `manifests/namespaced` gets.

A Dedicated batch is refused before anything is created and deleted without a refused request; a
Shared one runs to its end and is cleaned up; an unreadable RuntimeClass is not a refusal, an
unreadable PriorityClass is (its value guards the cluster's critical range).
"""
import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.scope import CLUSTERWIDE, Scope, parse_namespaces
from rolloutbatch.kube.errors import Forbidden
from tests.unit.service.memory_cluster import NAMESPACE, run, until
from tests.unit.service.test_reconciler_lifecycle import SPEC, every_episode_ends, namespaces, start

SHARED = {**SPEC, "isolation": {"namespace": "Shared"}, "cleanup": {"sandbox": "Always"}}


def outside(path: str) -> bool:
    return f"/namespaces/{NAMESPACE}/" not in path


def confine(cluster) -> list[str]:
    """Every request outside the watched namespace refused, as RBAC would; the refused paths."""
    refused: list[str] = []

    def when(path: str) -> bool:
        if outside(path):
            refused.append(path)
            return True
        return False
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        cluster.api.fail(method, None, Forbidden("forbidden: outside the watched namespaces", status=403),
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
