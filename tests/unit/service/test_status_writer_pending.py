"""StatusWriter's pending digests (core.results.PENDING_DIGESTS): recorded before a results write,
dropped by the next status write, also when the API applied the pending patch and its answer was
lost; the recorded digest of a document only a pending digest vouched for goes with the new one."""
import asyncio

import pytest

from rolloutbatch.core.cadence import Cadence
from rolloutbatch.core.results import DIGESTS, PENDING_DIGESTS
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.service.status_writer import StatusWriter
from tests.unit.core.factories import REF


class Storage:
    """Applies each patch, then (once, when told) loses its answer."""
    def __init__(self):
        self.patches: list[dict] = []
        self.lose_next = False

    async def patch_batch_status(self, namespace, name, patch):
        self.patches.append(patch)
        if self.lose_next:
            self.lose_next = False
            raise Unavailable("the answer timed out")
        return {}


def writer(recorded=None):
    storage = Storage()
    return storage, StatusWriter(storage, REF, recorded or {}, Cadence(0, 0, 1))


def test_a_pending_patch_whose_answer_was_lost_is_still_dropped_by_the_next_write():
    storage, w = writer({"phase": "Running", DIGESTS: {"b-results": "d0"}})
    storage.lose_next = True
    with pytest.raises(Unavailable):
        asyncio.run(w.vouch("b-results", "d1", "d0"))
    asyncio.run(w.write({"phase": "Running", DIGESTS: {"b-results": "d1"}}, None, 0.0))
    assert storage.patches[-1][PENDING_DIGESTS] is None and storage.patches[-1][DIGESTS] == {"b-results": "d1"}


def test_a_document_vouched_for_only_as_pending_is_recorded_with_the_next_pending_digest():
    storage, w = writer({"phase": "Running", DIGESTS: {"b-results": "d0"}, PENDING_DIGESTS: {"b-results": "d1"}})
    asyncio.run(w.vouch("b-results", "d2", "d1"))    # the ConfigMap holds d1, adopted by its pending digest
    assert storage.patches == [{PENDING_DIGESTS: {"b-results": "d2"}, DIGESTS: {"b-results": "d1"}}]
    asyncio.run(w.vouch("b-results", "d3", "d1"))    # recorded now: only the pending digest changes
    assert storage.patches[-1] == {PENDING_DIGESTS: {"b-results": "d3"}}
