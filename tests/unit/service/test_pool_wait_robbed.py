"""``spec.poolRef.whenEmpty: Wait`` when another batch claims between the wait and the claims.

The reconciler waits until the pool holds the batch's first wave (pool_claims.readiness), then
claims: another batch on the same pool may take warm pods in between. A claim cannot be given
back (it set its pod's deadline and handed it its episode: keeping the claims while waiting again
ran them untracked, without their verifier phase, their results lost to a stall), so the batch
starts the rest cold, and says why in a Warning Event, not the usual Normal one.
"""
from __future__ import annotations

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import pool_claims
from tests.unit.service.memory_pool import BATCH, POOL_NS, claimed_indexes, filled, run

OTHER = BatchRef(namespace=BATCH.namespace, name="other", uid="c0000000-0000-0000-0000-0000000000ff", generation=1)


def _spec(when_empty: str):
    return parse_spec({"episodes": 2, "parallelism": 2, "episodeTimeoutSeconds": 60,
                       "poolRef": {"name": "warm", "whenEmpty": when_empty}})


def test_a_wait_batch_robbed_of_its_warm_pods_starts_the_rest_cold_and_says_why(api):
    filled(api, 2)
    storage, pool_storage = Storage(api), PoolStorage(api)
    ready, message, _ = run(pool_claims.readiness(pool_storage, BATCH, _spec(v.POOL_WAIT)))
    assert ready, message
    run(pool_claims.provision(storage, pool_storage, OTHER, _spec(v.POOL_COLD), lambda *e: None, None,
                              lambda pods: None, CLUSTERWIDE))   # another batch claims meanwhile
    events: list = []
    job = run(pool_claims.provision(storage, pool_storage, BATCH, _spec(v.POOL_WAIT), lambda *e: events.append(e),
                                    None, lambda pods: None, CLUSTERWIDE))
    assert job["metadata"]["name"] == naming.job_name(BATCH) and api.get_object("Job", job["metadata"]["name"], POOL_NS)
    [(kind, reason, message)] = events
    assert (kind, reason) == ("Warning", v.EVENT_CLAIMED) and "another batch claimed" in message, message
    assert "0 of the first 2" in message


def test_a_wait_batch_that_got_its_wave_says_so_normally(api):
    filled(api, 2)
    events: list = []
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, _spec(v.POOL_WAIT), lambda *e: events.append(e),
                              None, lambda pods: None, CLUSTERWIDE))
    assert [(kind, reason) for kind, reason, _ in events] == [("Normal", v.EVENT_CLAIMED)]
    assert sorted(claimed_indexes(api).values()) == ["0", "1"]
