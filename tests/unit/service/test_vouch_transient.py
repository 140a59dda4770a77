"""A pending-digest patch that fails transiently (a 503) is retried with its write (the policy's
rule for transient errors), not skipped: for the late rewrite of a Succeeded batch's results, an
operator that died after an unvouched write and before its status would leave results no reader
trusts again."""
import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.errors import Unavailable
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster, until
from tests.unit.service.test_reconciler_crash_points import EPISODES, SPEC, Crash, resumed


def test_a_transient_failure_of_the_pending_patch_then_a_crash_keeps_the_results_trusted(monkeypatch):
    async def main():
        async with MemoryCluster() as cluster:
            def late_final_write(op, args):
                return (op == "put_configmap" and cluster.status().get("phase") == v.SUCCEEDED
                        and '"final":true' in "".join(args[0].get("data", {}).values()))
            crash = Crash(monkeypatch, late_final_write, after=True)
            cluster.submit(SPEC)
            crash.start(cluster.reconciler())
            await until(lambda: cluster.job() is not None)
            cluster.start_pods(range(EPISODES))
            for i in range(EPISODES):
                cluster.end_pod(i)
            await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
            # the API server answers the next status patch (the late write's pending digest) 503
            cluster.api.fail("PATCH", "RolloutBatch", Unavailable("etcdserver: leader changed", status=503),
                             when=lambda path: path.endswith("/status"))
            cluster.complete_job()
            await crash.ran()
            assert crash.fired, "the late results write never came"
            await resumed(cluster)
            assert cluster.status()["phase"] == v.SUCCEEDED
            from rolloutbatch import sdk
            try:
                document = sdk.Client(api=cluster.api, namespace=NAMESPACE).results_document(cluster.batch())
            except sdk.ResultsNotReady as exc:
                raise AssertionError(f"the SDK refuses the results of a Succeeded batch for good: {exc}") from None
            assert len(document["pods"]) == EPISODES
    asyncio.run(asyncio.wait_for(main(), 30))
