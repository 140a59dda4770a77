"""service.sandbox: the deletion plan carried out; at the timeout nothing is left undeleted."""
import asyncio
import logging

import pytest

from rolloutbatch.core import naming
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Forbidden
from rolloutbatch.service import sandbox
from tests.unit.core.factories import REF


class Cluster:
    """Stands in for the storage layer: objects by (kind, name, namespace); a Job never goes."""

    def __init__(self, stuck_job: bool, shared: bool = False) -> None:
        ns = naming.sandbox_namespace(REF)
        self.objects = ({("Job", naming.job_name(REF), REF.namespace),
                         ("NetworkPolicy", naming.shared_network_policy_name(REF), REF.namespace)} if shared
                        else {("Job", naming.job_name(REF), ns), ("Namespace", ns, None)})
        self.stuck_job = stuck_job
        self.deleted: list[tuple] = []

    async def call(self, fn, kind, name, namespace, *rest, **kwargs):
        key = (kind, name, namespace)
        if fn is resources.delete_owned:
            if key not in self.objects:
                return False
            self.deleted.append(key)
            if not (self.stuck_job and kind == "Job"):
                self.objects.discard(key)
            return True
        assert fn is resources.get_or_none
        return {"kind": kind} if key in self.objects else None


def test_the_namespace_waits_for_the_job_and_then_goes():
    cluster = Cluster(stuck_job=False)
    assert asyncio.run(sandbox.remove(cluster.call, REF, logging.getLogger("t"), timeout=5, interval=0))
    assert [k for k, *_ in cluster.deleted] == ["Job", "Namespace"] and not cluster.objects


def test_a_job_still_deleting_at_the_timeout_does_not_leave_the_namespace_behind(caplog):
    cluster = Cluster(stuck_job=True)
    gone = asyncio.run(sandbox.remove(cluster.call, REF, logging.getLogger("t"), timeout=0.05, interval=0.01))
    assert not gone
    assert ("Namespace", naming.sandbox_namespace(REF), None) in cluster.deleted   # issued at the end
    assert cluster.deleted.index(("Namespace", naming.sandbox_namespace(REF), None)) == len(cluster.deleted) - 1
    assert "without waiting" in caplog.text


def test_a_shared_batchs_network_policy_stays_while_its_job_still_has_pods(caplog):
    caplog.set_level(logging.INFO)
    cluster = Cluster(stuck_job=True, shared=True)
    policy = ("NetworkPolicy", naming.shared_network_policy_name(REF), REF.namespace)
    assert not asyncio.run(sandbox.remove(cluster.call, REF, logging.getLogger("t"), timeout=0.05, interval=0.01))
    assert policy not in cluster.deleted and policy in cluster.objects    # the garbage collector's, with the batch
    assert "Leaving NetworkPolicy" in caplog.text


def test_a_shared_batchs_network_policy_goes_once_its_job_is_gone():
    cluster = Cluster(stuck_job=False, shared=True)
    assert asyncio.run(sandbox.remove(cluster.call, REF, logging.getLogger("t"), timeout=5, interval=0))
    assert [k for k, *_ in cluster.deleted] == ["Job", "NetworkPolicy"] and not cluster.objects


def test_a_secret_the_operator_may_not_touch_is_left_to_the_garbage_collector(caplog):
    # Without manifests/rbac/secrets_role.yaml the operator has no rights on Secrets: removing a
    # sandbox (which then never had a copy) must not fail on that step.
    caplog.set_level(logging.INFO)
    cluster = Cluster(stuck_job=False, shared=True)
    plain = cluster.call

    async def call(fn, kind, *rest, **kwargs):
        if kind == "Secret":
            raise Forbidden('secrets "rb-x-env" is forbidden', status=403)
        return await plain(fn, kind, *rest, **kwargs)
    assert asyncio.run(sandbox.remove(call, REF, logging.getLogger("t"), timeout=5, interval=0))
    assert "garbage collector removes it" in caplog.text

    async def refuses_jobs(fn, kind, *rest, **kwargs):
        if kind == "Job":
            raise Forbidden('jobs is forbidden', status=403)
        return await plain(fn, kind, *rest, **kwargs)
    with pytest.raises(Forbidden):   # only the optional step is skipped
        asyncio.run(sandbox.remove(refuses_jobs, REF, logging.getLogger("t"), timeout=5, interval=0))
