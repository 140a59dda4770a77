"""Attack 4: a batch admitted and running under the previous operator, whose spec a new refusal
of today's core.spec refuses, after an operator upgrade (a restart running the new code)."""
import asyncio

import pytest

from rolloutbatch.core import spec as core_spec
from rolloutbatch.core import vocabulary as v
from tests.unit.service.memory_cluster import run, until

# samplesPerInput 2 with an env name the CRD takes ('-' is allowed by its pattern) and bash as
# the image's /bin/sh passes on: the operator of d3d0e6f took it and ran it.
SPEC = {"episodes": 2, "parallelism": 2, "samplesPerInput": 2, "inputs": [{"task": 0}],
        "env": [{"name": "MY-VAR", "value": "1"}],
        "task": {"files": {"episode.py": "print('hi')"}}}


def test_a_running_batch_keeps_its_finished_episode_after_an_upgrade_refuses_its_spec(monkeypatch):
    async def scenario(cluster):
        if True:
            m = monkeypatch   # the previous operator: no env-name rule
            m.setattr(core_spec, "_shell_names", lambda *a, **k: None)
            cluster.submit(SPEC)
            task = asyncio.create_task(cluster.reconciler().run())
            await until(lambda: cluster.status().get("phase") == v.RUNNING)
            cluster.start_pods(range(2))
            cluster.end_pod(0, reward=1.0)
            await until(lambda: cluster.status().get("progress") == "1/2")
            task.cancel()   # the operator is upgraded
            with pytest.raises(asyncio.CancelledError):
                await task
        before = cluster.status()
        cluster.restart_operator()
        task = asyncio.create_task(cluster.reconciler().run())
        await asyncio.sleep(0.2)
        cluster.end_pod(1, reward=1.0)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        print("AFTER", {k: status.get(k) for k in ("phase", "reason", "progress", "succeededEpisodes",
                                                    "lostEpisodes", "episodes")})
        print("ROWS", [(r["index"], r["outcome"], r.get("reason")) for r in cluster.rows()])
        # Every index is accounted for: episode 1 ended rewarded after the upgrade. What the new
        # operator does: Failed/InvalidSpec with 1 row of 2 (index 1 neither judged nor given
        # up: progress 1/2, lostEpisodes 0), its Job left running (spec None: nothing stopped).
        rows = {r["index"]: r["outcome"] for r in cluster.rows()}
        assert rows == {0: v.OUTCOME_SUCCEEDED, 1: v.OUTCOME_SUCCEEDED}, (status.get("reason"), rows)
    run(scenario)


def test_a_finished_batchs_ttl_still_deletes_it_after_an_upgrade_refuses_its_spec(monkeypatch):
    """The batch Succeeded under the previous operator, which was upgraded while it waited out
    ttlSecondsAfterFinished. The new operator's _after_finish parses the spec again, gets the
    SpecError of today's env-name rule, and returns: the TTL never runs (nor the cleanup)."""
    spec = {**SPEC, "cleanup": {"ttlSecondsAfterFinished": 1}}

    async def scenario(cluster):
        if True:
            m = monkeypatch   # the previous operator: no env-name rule
            m.setattr(core_spec, "_shell_names", lambda *a, **k: None)
            cluster.submit(spec)
            task = asyncio.create_task(cluster.reconciler().run())
            await until(lambda: cluster.status().get("phase") == v.RUNNING)
            cluster.start_pods(range(2))
            cluster.end_pod(0, reward=1.0)
            cluster.end_pod(1, reward=1.0)
            cluster.complete_job()
            await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
            task.cancel()   # upgraded during the TTL's wait
            with pytest.raises(asyncio.CancelledError):
                await task
        assert cluster.batch() is not None
        cluster.restart_operator()
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        await until(lambda: cluster.batch() is None, timeout=4)
    run(scenario)
