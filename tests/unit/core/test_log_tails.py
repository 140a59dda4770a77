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
from rolloutbatch.core.verdict import judge_episode, judge_verified
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
    assert r.log_tail == output[-1024:] and r.log_tail.endswith('"reward": 1}\n')
    assert r.to_row(T0)["log_tail"] == r.log_tail
    failed = judge_episode(facts(exit_code=1, phase="Failed"), None, log_tail=output[-4096:])
    assert failed.outcome == v.OUTCOME_FAILED and failed.log_tail == output[-4096:]


def test_a_verified_success_keeps_the_verifiers_output():
    a = log(ev("ready", T0 + 1))
    w = log(ev("reward", T0 + 8, reward=1))
    r = judge_verified(facts(agent=agent()), a, w, agent_tail="agent said", verifier_tail="5 passed\n")
    assert r.outcome == v.OUTCOME_SUCCEEDED and r.log_tail == "5 passed\n"


@given(st.text(max_size=3000), st.integers(min_value=1, max_value=5000))
def test_a_tail_is_the_end_within_its_limit(text, limit):
    data = text.encode()
    tail = log_tails.tail_of(data, limit)
    if not data:
        assert tail is None
        return
    assert len(tail.encode()) <= limit and data.endswith(tail.encode())   # no replacement mark at the cut
    assert len(tail.encode()) >= min(len(data), limit) - 3


def test_a_tail_cut_inside_a_character_drops_it():
    assert log_tails.tail_of("ééé".encode(), 3) == "é"
    assert log_tails.tail_of(b"\xff\xfeok", 4) == "\ufffd\ufffdok"          # the episode's own bad bytes stay marked
    assert log_tails.kept("é" * 1000, v.OUTCOME_SUCCEEDED) == "é" * 512


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
