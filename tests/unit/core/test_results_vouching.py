"""Which results ConfigMaps a batch's status vouches for (core.results): the digest recorded
after a write, the one recorded as pending before it, nothing malformed; and the stall a final
document names, for an operator that died before the Failed status."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import (DIGESTS, PENDING_DIGESTS, STALL_MESSAGE, STALL_REASON, configmap_digest,
                                       recorded_by_operator, stall_of, vouched_digests)


def cm(name: str, text: str) -> dict:
    return {"metadata": {"name": name}, "data": {"results.json": text}}


OLD, NEW, FORGED = cm("b-results", '{"final":false}'), cm("b-results", '{"final":true}'), cm("b-results", '{"x":1}')


def test_the_recorded_and_the_pending_digest_are_both_vouched_for():
    status = {DIGESTS: {"b-results": configmap_digest(OLD)}, PENDING_DIGESTS: {"b-results": configmap_digest(NEW)}}
    vouched = vouched_digests(status)
    assert recorded_by_operator(OLD, vouched) and recorded_by_operator(NEW, vouched)
    assert not recorded_by_operator(FORGED, vouched)
    # a digest vouches only under its own name
    assert not recorded_by_operator(cm("other", '{"final":true}'), vouched)


def test_without_pending_only_the_recorded_digest_counts():
    vouched = vouched_digests({DIGESTS: {"b-results": configmap_digest(OLD)}})
    assert recorded_by_operator(OLD, vouched) and not recorded_by_operator(NEW, vouched)


@given(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.text()),
                 st.dictionaries(st.sampled_from([DIGESTS, PENDING_DIGESTS, "other"]),
                                 st.one_of(st.none(), st.text(), st.lists(st.text()),
                                           st.dictionaries(st.one_of(st.text(), st.integers()),
                                                           st.one_of(st.text(), st.integers(), st.none()))))))
def test_a_malformed_status_vouches_for_its_well_formed_entries_alone(status):
    vouched = vouched_digests(status)
    fields = [status.get(k) for k in (DIGESTS, PENDING_DIGESTS)] if isinstance(status, dict) else []
    entries = {(n, d) for f in fields if isinstance(f, dict) for n, d in f.items()
               if isinstance(n, str) and isinstance(d, str)}
    assert {(n, d) for n, ds in vouched.items() for d in ds} == entries
    assert "other" not in vouched or any(isinstance(f, dict) and "other" in f for f in fields)


def test_a_final_document_names_its_stall():
    doc = {"final": True, STALL_REASON: v.STALL_PODS_NOT_CREATED, STALL_MESSAGE: "no pod " * 400}
    reason, message = stall_of(doc)
    assert reason == v.STALL_PODS_NOT_CREATED and len(message) == 1000


@given(st.dictionaries(st.sampled_from(["final", STALL_REASON, STALL_MESSAGE]),
                       st.one_of(st.booleans(), st.text(), st.integers(), st.none(), st.sampled_from(v.STALL_REASONS))))
def test_only_a_final_document_with_a_known_reason_names_a_stall(doc):
    found = stall_of(doc)
    known = doc.get(STALL_REASON) in v.STALL_REASONS and isinstance(doc.get(STALL_MESSAGE), str)
    assert (found is not None) == (doc.get("final") is True and known)


def test_a_checkpoint_names_no_stall():
    assert stall_of({"final": False, STALL_REASON: v.STALL_IMAGE, STALL_MESSAGE: "x"}) is None
    assert stall_of(None) is None
