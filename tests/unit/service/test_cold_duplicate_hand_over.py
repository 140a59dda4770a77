"""The Job controller made a cold pod for an index a claimed pod holds (its informer had
not seen the claim: docs/design.md §5.17 says this happens and that "until then the operator hands
the cold one nothing (core.pools.shadowed_by_claim): an index never runs two episodes").

The tracker rules such a cold pod a duplicate (core.tracker._duplicate) against every pod of the
batch it knows: live, ended and waiting for its log read, log read in flight, claimed orphans.
The delivery round (service.episode_delivery.EpisodeDelivery.round) must ask the same question
(core.tracker.BatchTracker.index_holders): once the claimed pod has *ended* (its log not read yet,
its verdict not in tracker.results), the cold pod of its index must not be handed the episode a
second time (it would then hold the index too, and count as a second attempt).
"""

from __future__ import annotations

import asyncio
import logging

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.service.episode_delivery import EpisodeDelivery

BATCH = BatchRef(namespace="team", name="b", uid="b0000000-0000-0000-0000-000000000001", generation=1)
POOL_NS = naming.pool_namespace("team", "warm")
JOB_UID = "job-uid-1"


def _pod(name: str, *, claimed: bool, phase: str, exit_code: int | None = None) -> dict:
    annotations = {v.COMPLETION_INDEX_KEY: "0", naming.POOLED_ANNOTATION: "true"}
    if claimed:
        annotations |= {naming.ANNOTATION_CLAIMED_BY: BATCH.uid, naming.ANNOTATION_CLAIMED_AT: "1764720000.000",
                        naming.ANNOTATION_DELIVERED_AT: "1764720001.000"}
    state = {"terminated": {"exitCode": exit_code, "finishedAt": "2025-12-03T00:00:30Z"}} if exit_code is not None \
        else {"running": {"startedAt": "2025-12-03T00:00:20Z"}}
    return {"metadata": {"name": name, "namespace": POOL_NS, "uid": f"uid-{name}",
                         "creationTimestamp": "2025-12-03T00:00:10Z", "annotations": annotations,
                         "labels": {naming.LABEL_BATCH_UID: BATCH.uid},
                         "ownerReferences": [{"controller": True, "uid": JOB_UID, "kind": "Job", "name": "rb-x"}]},
            "spec": {"nodeName": "n1"},
            "status": {"phase": phase, "startTime": "2025-12-03T00:00:10Z",
                       "containerStatuses": [{"name": naming.CONTAINER_NAME, "started": exit_code is None,
                                              "state": state}]}}


class _Recording(EpisodeDelivery):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.launched: list[str] = []

    def _launch(self, facts, phase) -> None:   # what would be handed over, no I/O
        self.launched.append(facts.name)


def test_a_cold_duplicate_is_not_handed_the_episode_once_its_claimed_pod_ended_unjudged() -> None:
    spec = parse_spec({"episodes": 2, "parallelism": 2, "poolRef": {"name": "warm"}, "episodeTimeoutSeconds": 60})
    tracker = BatchTracker(2, 1, namespace=POOL_NS, job_name="rb-x", pooled=True)
    tracker.expect_job(JOB_UID)
    claimed = _pod("warm-aaaaa", claimed=True, phase=v.PodPhase.SUCCEEDED, exit_code=0)
    cold = _pod("rb-x-0-bbbbb", claimed=False, phase=v.PodPhase.RUNNING)
    tracker.observe_pod(pod_facts(claimed))   # ended: its log is to be read, no verdict yet
    tracker.observe_pod(pod_facts(cold))      # the Job controller's cold pod of the same index
    assert 0 not in tracker.results
    assert "uid-rb-x-0-bbbbb" in tracker._duplicates, "the tracker itself rules the cold pod a duplicate"

    delivery = _Recording(None, None, BATCH, spec, lambda *e: None, logging.getLogger("t"), since=0.0)

    async def go() -> None:
        delivery.round(tracker)
    asyncio.run(go())
    assert delivery.launched == [], (
        "the delivery hands a second episode of index 0 to the cold duplicate the tracker ruled out: "
        f"{delivery.launched}")

