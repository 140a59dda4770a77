"""The results document rewritten after the batch ended (its Job's late
completion), the operator dying before the status vouches for it."""
import asyncio

import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import recorded_by_operator, vouched_digests
from rolloutbatch.kube.errors import Unavailable
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster, until
from tests.unit.service.test_reconciler_crash_points import EPISODES, SPEC, Crash, resumed


def late_final_write(cluster):
    def site(op, args):
        return (op == "put_configmap" and cluster.status().get("phase") == v.SUCCEEDED
                and '"final":true' in "".join(args[0].get("data", {}).values()))
    return site


def late_pending_digest(cluster):
    def site(op, args):
        return op == "patch_batch_status" and "pendingResultsDigests" in args[2] \
            and cluster.status().get("phase") == v.SUCCEEDED
    return site


@pytest.mark.parametrize("site, transient", [(late_final_write, False), (late_pending_digest, False),
                                             (late_final_write, True)])
def test_a_crash_after_the_late_results_write_leaves_results_the_status_vouches_for(monkeypatch, site, transient):
    """Every episode ended, the batch is Succeeded (results and status agree); its Job is marked
    Complete a moment later, and _await_job_end writes the results document again (it now holds
    client_job_complete_seconds) before patching the status with its digest. An operator that dies
    between the two leaves a terminal batch whose status records the old digest and the new one as
    pending (recorded before the write): readers trust it, and the next operator (resuming at
    Entry.FINISHED: no tracker, no restore) records it. Dying after the pending digest and before
    the write leaves the document as it was, still recorded; the pending digest is dropped. A
    pending patch that fails transiently first (a 503) is retried with its write, not skipped."""
    async def main():
        async with MemoryCluster() as cluster:
            crash = Crash(monkeypatch, site(cluster), after=True)
            cluster.submit(SPEC)
            crash.start(cluster.reconciler())
            await until(lambda: cluster.job() is not None)
            cluster.start_pods(range(EPISODES))
            for i in range(EPISODES):
                cluster.end_pod(i)
            await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
            if transient:   # the API server answers the next status patch (the late write's pending digest) 503
                cluster.api.fail("PATCH", "RolloutBatch", Unavailable("etcdserver: leader changed", status=503),
                                 when=lambda path: path.endswith("/status"))
            cluster.complete_job()
            await crash.ran()
            assert crash.fired, "the late results write never came"
            await resumed(cluster)
            status = cluster.status()
            name = "batch-results"
            cm = cluster.api.get_object("ConfigMap", name, NAMESPACE)
            assert status["phase"] == v.SUCCEEDED
            from rolloutbatch import sdk
            try:   # what a user's reader says (raises ResultsNotReady "... do not trust it")
                document = sdk.Client(api=cluster.api, namespace=NAMESPACE).results_document(cluster.batch())
            except sdk.ResultsNotReady as exc:
                raise AssertionError(f"the SDK refuses the results of a Succeeded batch: {exc}") from None
            assert len(document["pods"]) == EPISODES
            # recorded by the resumed operator, no longer only pending
            assert recorded_by_operator(cm, vouched_digests({"resultsDigests": status.get("resultsDigests")}))
            assert "pendingResultsDigests" not in status
    asyncio.run(asyncio.wait_for(main(), 30))
