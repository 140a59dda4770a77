"""The results document (the guide's results.json layout), its ConfigMap encoding and decoding."""
import base64
import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import strictjson
from rolloutbatch.core.results import (GZIP_ABOVE, decode_results, encode_results, results_document,
                                       results_from_document)
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.stats import summarize
from tests.unit.core.factories import RAW, REF, result


def document(rows, **extra):
    return results_document(ref=REF, spec=parse_spec(RAW), summary=summarize(rows, episodes=len(rows), origin=100.0),
                            results=rows, origin=100.0, extra={"client_job_complete_seconds": 5.0, **extra})


def test_layout_follows_the_guide():
    doc = document([result(1), result(0, "failed", None)])
    for key in ("episodes", "successful_episodes", "reward_sum", "batch_to_all_ready_seconds",
                "batch_to_all_rewards_seconds", "pod_to_ready_p50_seconds", "pod_to_ready_p95_seconds",
                "pod_to_ready_max_seconds", "client_job_complete_seconds", "namespace", "image", "runtime",
                "parallelism", "failed_episodes", "lost_episodes", "retried_episodes", "pods"):
        assert key in doc, key
    assert [row["index"] for row in doc["pods"]] == [0, 1]
    assert (doc["image"], doc["runtime"], doc["parallelism"]) == ("python:3.12-alpine", "cube", 4)


def test_small_documents_stay_plain_json():
    data, binary = encode_results(document([result(0)]))
    assert binary == {} and json.loads(data["results.json"])["successful_episodes"] == 1
    assert decode_results({"data": data}) == json.loads(data["results.json"])


def test_gzip_round_trip_past_900_kib():
    rows = [result(i, extra={"note": "x" * 2000}) for i in range(600)]
    doc = document(rows)
    assert len(json.dumps(doc)) > GZIP_ABOVE
    data, binary = encode_results(doc)
    assert data == {} and "results.json.gz" in binary
    back = decode_results({"binaryData": binary})
    assert back["successful_episodes"] == 600 and back["client_job_complete_seconds"] == 5.0
    assert "dropped_row_fields" not in back
    assert results_from_document(back) == {r.index: r for r in rows}


def test_incompressible_documents_shed_optional_row_fields():
    import random
    rng = random.Random(7)
    rows = [result(i, "failed", None, log_tail="".join(rng.choice("abcdefghij0123456789") for _ in range(2000)))
            for i in range(800)]
    data, binary = encode_results(document(rows))
    back = decode_results({"binaryData": binary})
    assert "log_tail" in back["dropped_row_fields"]
    restored = results_from_document(back)
    assert restored[5].outcome == "failed" and restored[5].reason == "NonZeroExit" and restored[5].log_tail is None


def gz(payload: bytes) -> str:
    return base64.b64encode(gzip.compress(payload)).decode()


@pytest.mark.parametrize("configmap", [
    {}, {"data": {}}, {"data": {"results.json": "{broken"}}, {"data": {"results.json": "[1, 2]"}},
    {"data": {"results.json": 7}}, {"data": {"results.json": "[" * 100000 + "]" * 100000}},
    {"binaryData": {"results.json.gz": "!!!not base64"}}, {"binaryData": {"results.json.gz": gz(b"not json")}},
    {"binaryData": {"results.json.gz": base64.b64encode(b"not gzip").decode()}},
    {"binaryData": {"results.json.gz": gz(b" " * (300 * 1024 * 1024))}},      # inflates past the cap
    {"data": None, "binaryData": None},
    # numbers JSON has not (Python's json.loads reads them): a NaN reward is no reward
    {"data": {"results.json": '{"pods": [{"index": 0, "reward": NaN}]}'}},
    {"data": {"results.json": '{"reward_mean": -Infinity}'}}, {"data": {"results.json": '{"reward_mean": 1e999}'}},
    {"data": {"results.json": '{"reward_mean": 1' + "0" * 400 + "}"}},   # a whole number past a double too
    {"binaryData": {"results.json.gz": gz(b'{"reward_mean": Infinity}')}},
])
def test_garbage_decodes_to_none(configmap):
    assert decode_results(configmap) is None


def test_malformed_rows_are_skipped_on_restore():
    good = result(2).to_row(100.0)
    doc = {"pods": [good, {"pod": "no index"}, {"index": "x"}, "row", None]}
    assert list(results_from_document(doc)) == [2]
    assert results_from_document({"pods": "nope"}) == {} and results_from_document({}) == {}


def strict_loads(text):
    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def test_nan_in_extras_and_rows_still_writes_strict_json():
    # A NaN in reward extras once made results.json invalid JSON.
    rows = [result(0, extra={"score": float("nan"), "deep": [{"x": float("-inf")}]}),
            result(1, "failed", None, pod_created=float("inf"))]
    doc = document(rows, weird=float("nan"))
    doc["reward_sum"] = float("inf")        # what the operator wrote before the fix
    data, _ = encode_results(doc)
    back = strict_loads(data["results.json"])
    assert back["pods"][0]["extra"] == {"score": None, "deep": [{"x": None}]}
    assert back["reward_sum"] is None and back["weird"] is None and back["pods"][1]["pod_created"] is None


def test_gzipped_documents_are_strict_too():
    rows = [result(i, extra={"note": "x" * 2000, "nan": float("nan")}) for i in range(600)]
    _, binary = encode_results(document(rows))
    text = gzip.decompress(base64.b64decode(binary["results.json.gz"])).decode()
    assert strict_loads(text)["pods"][0]["extra"]["nan"] is None


@pytest.mark.parametrize("changes", [
    {"reward": "lots"}, {"reward": True}, {"reward": 1e308}, {"index": True}, {"index": -1}, {"index": 1.0},
    {"index": "2"}, {"outcome": "maybe"}, {"outcome": None}, {"outcome": "Succeeded"}, {"ready_at": "noon"},
    {"pod_created": True}, {"reward_at": [1]}, {"pod_to_ready_seconds": {}}, {"reason": 5}, {"message": ["m"]},
    {"pod": 3}, {"node": 1}, {"image_id": False}, {"log_tail": 1}, {"attempts": "3"}, {"attempts": -1},
    {"attempts": True}, {"attempts": 2.0}, {"extra": [1]}, {"extra": "x"}, {"flags": "ClockSkewWithinTolerance"},
    {"flags": [1]},
])
def test_wrong_types_are_skipped_on_restore(changes):
    # A hand-edited row must neither crash a restart nor be read as something else.
    good = result(1).to_row(100.0)
    doc = {"pods": [result(0).to_row(100.0), {**good, **changes}]}
    assert list(results_from_document(doc)) == [0]
    summarize(results_from_document(doc).values(), episodes=2, origin=100.0)     # and nothing downstream breaks


def test_a_missing_outcome_is_not_final():
    row = result(1).to_row(100.0)
    del row["outcome"]
    assert results_from_document({"pods": [row]}) == {}


def test_integers_are_read_as_floats_and_the_first_row_of_an_index_wins():
    row = {**result(1).to_row(100.0), "reward": 3, "ready_at": 101}
    restored = results_from_document({"pods": [row, {**row, "reward": 4}]})
    assert restored[1].reward == 3.0 and isinstance(restored[1].reward, float) and restored[1].ready_at == 101.0


@pytest.mark.parametrize("value,expected", [(3, 3), (0, 0), ("lots", 0), (float("inf"), 0), (-2, 0), (True, 0),
                                            (None, 0)])
def test_retried_from_document(value, expected):
    from rolloutbatch.core.results import retried_from_document
    assert retried_from_document({"retried_episodes": value}) == expected


# -- rows encoded once: the document spliced around their texts --



@settings(max_examples=60, deadline=None)
@given(st.lists(st.builds(lambda i, reward, tail: result(i, reward=reward, log_tail=tail),
                          st.integers(0, 10_000), st.one_of(st.none(), st.floats(-1e6, 1e6)),
                          st.text(max_size=40)), max_size=40),
       st.booleans())
def test_a_document_spliced_from_row_texts_decodes_as_the_whole_encoding(rows, gzipped):
    doc = strictjson.sanitize(document(rows))
    if gzipped:   # past 900 KiB: the gzip path still sees every row
        doc["padding"] = "x" * GZIP_ABOVE
    texts = [strictjson.dumps(row, separators=(",", ":")) for row in doc["pods"]]
    whole = decode_results(dict(zip(("data", "binaryData"), encode_results(doc, sanitized=True))))
    spliced = decode_results(dict(zip(("data", "binaryData"), encode_results(doc, sanitized=True, row_texts=texts))))
    assert spliced == whole == json.loads(json.dumps(doc))


def test_row_texts_that_do_not_match_the_rows_are_not_used():
    doc = strictjson.sanitize(document([result(0), result(1)]))
    data, _ = encode_results(doc, sanitized=True, row_texts=['{"index":0}'])   # one text for two rows
    assert json.loads(data["results.json"])["pods"] == doc["pods"]


def test_an_empty_document_spliced_is_still_json():
    data, _ = encode_results({"pods": []}, sanitized=True, row_texts=[])
    assert json.loads(data["results.json"]) == {"pods": []}


def test_a_verified_rows_agent_output_is_shed_before_anything_else():
    import random
    rng = random.Random(11)
    noise = lambda: "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(4000))  # noqa: E731
    rows = [result(i, agent={"exit_code": 1, "timed_out": False, "output_tail": noise(), "channel": "log"})
            for i in range(1000)]
    data, binary = encode_results(document(rows))
    assert data == {} and len(binary["results.json.gz"]) * 3 / 4 <= GZIP_ABOVE   # fits: the API takes it
    back = decode_results({"binaryData": binary})
    assert "agent.output_tail" in back["dropped_row_fields"]
    restored = results_from_document(back)
    assert restored[7].agent == {"exit_code": 1, "timed_out": False, "channel": "log"} and restored[7].reward == 1.0


def test_lone_surrogates_never_reach_a_document():
    rows = [result(0, extra={"\ud800key": "a\udfffb\u0000"})]
    data, _ = encode_results(document(rows))
    data["results.json"].encode("utf-8")                      # valid UTF-8, so valid I-JSON
    assert decode_results({"data": data})["pods"][0]["extra"] == {"?key": "a?b\u0000"}


def _verdict_only_row(i, rnd):
    """A row as large as its verdict fields get: random 63-character pod and node names, a distinct
    image digest, three flags (its message, tails and extras are what shedding drops)."""
    import string

    from rolloutbatch.core.model import EpisodeResult

    def name(n):
        return "".join(rnd.choice(string.ascii_lowercase + string.digits) for _ in range(n))
    created = 1.7e9 + rnd.random() * 1e5
    return EpisodeResult(index=i, pod=name(63), node=name(63), outcome=rnd.choice(["failed", "succeeded"]),
                         image_id=f"docker.io/{name(40)}@sha256:" + "".join(rnd.choice("0123456789abcdef")
                                                                            for _ in range(64)),
                         reason="NonZeroExit", message=name(300), reward=rnd.random(), pod_created=created,
                         ready_at=created + rnd.random() * 5, reward_at=created + 5 + rnd.random() * 60,
                         pod_to_ready_seconds=rnd.random() * 5, attempts=3,
                         flags=("ClockSkewWithinTolerance", "RewardExtrasDropped", "DuplicateReady"))


def test_a_document_of_max_document_rows_fits_once_shed():
    """encode_results returned a document still too big after every shed stage "as is", and nothing
    bounded how many rows one document held (--results-shard-rows took any value): 20,000 plain rows
    made a 1.4 MB gzip the API refused. MAX_DOCUMENT_ROWS rows whose verdict fields are as large as
    they get must fit, so every document the operator writes (core.result_shards keeps to it) does."""
    import random

    from rolloutbatch.core.results import MAX_DOCUMENT_ROWS, SHED_ROW_GZIP_BYTES
    rnd = random.Random(1)
    rows = [_verdict_only_row(i, rnd) for i in range(MAX_DOCUMENT_ROWS)]
    data, binary = encode_results(document(rows))
    assert not data and len(base64.b64decode(binary["results.json.gz"])) <= GZIP_ABOVE
    assert decode_results({"binaryData": binary})["dropped_row_fields"][-1] == "message"
    # the constant the bound is derived from holds what such a row takes, shed
    from rolloutbatch.core.results import SHED_STAGES, _gzip, _shed
    assert len(_gzip(_shed(document(rows[:1000]), SHED_STAGES[-1]))) / 1000 <= SHED_ROW_GZIP_BYTES
