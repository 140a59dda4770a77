"""A trainer's session whose hand-over was sent and never confirmed (kube.errors.Unconfirmed: the
launcher's line can be lost): the operator leaves the pod to its deadline (it may run the episode)
and marks it `unconfirmed-at`, and the SDK's wait for that session says so rather than only "not
yet handed its episode"."""
from __future__ import annotations

from rolloutbatch.core import naming, sessions
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.kube.errors import Unconfirmed
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.sdk.sessions import session_state
from rolloutbatch.service import pool_claims
from tests.unit.service.conftest import api  # noqa: F401 (the fixture)
from tests.unit.service.memory_pool import BATCH, POOL_NS, batch_spec, delivery, delivery_round, filled, run

VERIFIER = {"files": {"verify.py": "print('grade')"}, "timeoutSeconds": 30}


def test_an_unconfirmed_session_hand_over_is_marked_and_said(api) -> None:
    filled(api, 1, verifier={})
    spec = batch_spec(episodes=1, parallelism=1, episodeTimeoutSeconds=600, command=sessions.hold_command(),
                      verifier=VERIFIER)
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                              lambda pods: None, CLUSTERWIDE))
    (pod,) = api.list_objects("Pod", POOL_NS)
    name = pod["metadata"]["name"]

    def silent(container, stdin):   # every byte went; the launcher's line did not come back
        raise Unconfirmed("the container did not confirm its input within 20s (all of it was sent)")
    api.set_attach(POOL_NS, name, silent)
    run(delivery_round(api, delivery(api, spec, [], []), 1))
    live = api.get_object("Pod", name, POOL_NS)
    annotations = live["metadata"]["annotations"]
    assert naming.ANNOTATION_DELIVERED_AT not in annotations and naming.ANNOTATION_UNCONFIRMED_AT in annotations
    assert live["status"]["phase"] == "Running"   # left to its deadline, not evicted: it may run the episode
    state, facts, seen = session_state(api.list_objects("Pod", POOL_NS), 0)
    assert (state, facts.name) == ("wait", name)
    assert "never confirmed" in seen and "left it to its deadline" in seen
