"""Every episode's row keeps the end of its log, within its outcome's budget; past a ConfigMap's
budget succeeded rows' tails are shed first."""
from __future__ import annotations

import json
import random

from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import log_tails
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import GZIP_ABOVE, SUCCEEDED_TAILS, decode_results, encode_results
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.core.verdict_verified import judge_verified
from tests.unit.core.factories import result
from tests.unit.core.test_results import document
from tests.unit.core.test_verifier_core import T0, agent, ev, facts, log


def test_the_budgets():
    assert log_tails.budget(v.OUTCOME_SUCCEEDED) == v.SUCCESS_LOG_TAIL_BYTES == 1024
    assert log_tails.budget(v.OUTCOME_FAILED) == log_tails.budget(v.OUTCOME_LOST) == v.LOG_TAIL_BYTES == 4096


def test_a_success_keeps_the_end_of_its_log():
    output = "x" * 3000 + "\n" + ev("ready", T0 + 1) + "\n" + ev("reward", T0 + 2, reward=1) + "\n"
    r = judge_episode(facts(), log(ev("ready", T0 + 1), ev("reward", T0 + 2, reward=1)), log_tail=output[-4096:])
    assert r.outcome == v.OUTCOME_SUCCEEDED
    assert output.endswith(r.log_tail) and r.log_tail.endswith('"reward": 1}\n')
    assert 1024 - 2 <= written(r.log_tail) <= 1024   # counted as written: quotes and newlines are two
    assert r.to_row(T0)["log_tail"] == r.log_tail
    failed = judge_episode(facts(exit_code=1, phase="Failed"), None, log_tail=output[-4096:])
    assert failed.outcome == v.OUTCOME_FAILED and failed.log_tail == log_tails.kept(output[-4096:], v.OUTCOME_FAILED)


def test_a_verified_success_keeps_the_verifiers_output():
    a = log(ev("ready", T0 + 1))
    w = log(ev("reward", T0 + 8, reward=1))
    r = judge_verified(facts(agent=agent()), a, w, agent_tail="agent said", verifier_tail="5 passed\n")
    assert r.outcome == v.OUTCOME_SUCCEEDED and r.log_tail == "5 passed\n"


@given(st.text(max_size=3000), st.integers(min_value=1, max_value=5000))
def test_a_tail_is_the_end_within_its_limit(text, limit):
    data = text.encode()
    tail = log_tails.tail_of(data, limit)
    if tail is None:   # nothing, or the last character alone is over the limit as written
        assert not data or written(text[-1]) > limit or len(text[-1].encode()) > limit
        return
    assert written(tail) <= limit and data.endswith(tail.encode())   # no replacement mark at the cut
    assert written(tail) >= min(written(text), limit) - 12


@given(st.text(alphabet=st.one_of(st.characters(min_codepoint=0x20, max_codepoint=0x7e), st.characters()),
               max_size=300), st.integers(min_value=0, max_value=400))
def test_a_kept_tail_is_the_longest_end_within_its_budget(text, limit):
    """kept's fast path (printable ASCII, a byte each) and its character-by-character count agree:
    the longest end whose written size fits."""
    got = log_tails._end_within(text, limit)
    assert text.endswith(got) and written(got) <= limit
    longer = text[len(text) - len(got) - 1:] if len(got) < len(text) else None
    assert longer is None or written(longer) > limit


def test_a_tail_cut_inside_a_character_drops_it():
    assert log_tails.tail_of("éxxxxxx".encode(), 7) == "xxxxxx"
    assert log_tails.tail_of(b"\xff\xfeok", 14) == "\ufffd\ufffdok"          # the episode's own bad bytes stay marked
    assert log_tails.kept("é" * 1000, v.OUTCOME_SUCCEEDED) == "é" * (1024 // 6)   # \u00e9: six bytes written


def written(text: str) -> int:
    """Bytes ``text`` takes in the results document (strict JSON, ASCII only)."""
    return len(json.dumps(text)) - 2


def _noise(rng, n):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def test_succeeded_tails_are_shed_before_failed_ones():
    rng = random.Random(3)
    # incompressible tails: even gzipped the document passes the budget while successes keep theirs
    rows = [result(i, log_tail=_noise(rng, 3000)) for i in range(500)]
    rows += [result(i, "failed", None, log_tail=_noise(rng, 600)) for i in range(500, 600)]
    data, binary = encode_results(document(rows))
    assert data == {} and len(binary["results.json.gz"]) * 3 / 4 <= GZIP_ABOVE
    back = decode_results({"binaryData": binary})
    assert back["dropped_row_fields"] == [SUCCEEDED_TAILS]
    assert all("log_tail" not in r for r in back["pods"] if r["outcome"] == "succeeded")
    assert all(len(r["log_tail"]) == 600 for r in back["pods"] if r["outcome"] == "failed")


def test_a_document_that_fits_keeps_every_tail():
    rows = [result(i, log_tail=f"episode {i} passed\n" * 50) for i in range(1000)]
    data, binary = encode_results(document(rows))
    back = decode_results({"data": data, "binaryData": binary})
    assert "dropped_row_fields" not in back and all(r["log_tail"] for r in back["pods"])
    assert len(json.dumps(back)) > GZIP_ABOVE            # gzipped, not shed


@given(st.binary(max_size=6000), st.sampled_from([1, 7, 1024, 4096]))
def test_a_tail_fits_its_budget_as_written_whatever_the_bytes(data, limit):
    """Control bytes are six bytes each in the results document: the budget counts those."""
    tail = log_tails.tail_of(data, limit)
    if tail is not None:
        assert len(json.dumps(tail)) - 2 <= limit
        assert data.decode("utf-8", "replace").endswith(tail) or "\ufffd" in tail


def test_a_log_of_control_bytes_keeps_a_sixth_of_its_share():
    tail = log_tails.kept(bytes(range(1, 32)).decode() * 500, "failed")
    assert len(json.dumps(tail)) - 2 <= 4096 and len(tail) >= 4096 // 6 - 1
