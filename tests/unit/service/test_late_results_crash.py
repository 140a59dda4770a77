"""The results document rewritten after the batch ended (its Job's late
completion), the operator dying before the status vouches for it."""
import asyncio

import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import recorded_by_operator
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster, until
from tests.unit.service.test_reconciler_crash_points import EPISODES, SPEC, Crash, resumed


@pytest.mark.xfail(strict=True, reason="known: the results rewritten after a terminal status (the Job's late "
                   "completion) are vouched for only by the status patch that follows; a crash between the two "
                   "leaves results every reader refuses")
def test_a_crash_after_the_late_results_write_leaves_results_the_status_vouches_for(monkeypatch):
    """Every episode ended, the batch is Succeeded (results and status agree); its Job is marked
    Complete a moment later, and _await_job_end writes the results document again (it now holds
    client_job_complete_seconds) before patching the status with its digest. An operator that dies
    between the two leaves a terminal batch whose status records the old digest; the next operator
    resumes at Entry.FINISHED, where no tracker and no restore exist, so _after_finish sees no
    digest to record and never repairs it. Every reader (sdk.ops.results_document, the CLI) then
    refuses the results for good: "changed since the operator wrote it ... do not trust it"."""
    async def main():
        async with MemoryCluster() as cluster:
            def late_final(op, args):
                return (op == "put_configmap" and cluster.status().get("phase") == v.SUCCEEDED
                        and '"final":true' in "".join(args[0].get("data", {}).values()))
            crash = Crash(monkeypatch, late_final, after=True)
            cluster.submit(SPEC)
            crash.start(cluster.reconciler())
            await until(lambda: cluster.job() is not None)
            cluster.start_pods(range(EPISODES))
            for i in range(EPISODES):
                cluster.end_pod(i)
            await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
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
            assert recorded_by_operator(cm, status.get("resultsDigests"))
    asyncio.run(asyncio.wait_for(main(), 30))
