"""Results past one ConfigMap: shard planning, append-only writes, reassembly."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.result_shards import (ShardBook, assemble, is_results_configmap_name, shard_configmap_name,
                                             shard_document)
from tests.unit.core.factories import result

REF = BatchRef("ns", "b", "uid-1", 1)


def test_a_full_shard_is_written_once_more_then_never():
    book = ShardBook(rows_per_shard=3)
    writes = []
    for index in range(7):
        book.add_row(index, 100)
        for shard in book.dirty():
            writes.append((shard.number, tuple(shard.indexes)))
            book.written(shard.number)
    assert [w for w in writes if w[0] == 0] == [(0, (0,)), (0, (0, 1)), (0, (0, 1, 2))]
    assert [len(s.indexes) for s in book.shards] == [3, 3, 1] and [s.full for s in book.shards] == [True, True, False]


def test_shards_fill_by_bytes_too():
    book = ShardBook(rows_per_shard=1000, shard_bytes=1000)
    for index in range(5):
        book.add_row(index, 400)
    assert [len(s.indexes) for s in book.shards] == [3, 2]


def _write(book, results, k=1):
    docs = {}
    for shard in book.dirty():
        rows = [results[i].to_row(None, k) for i in shard.indexes]
        docs[shard.number] = shard_document(REF, shard, rows, [])
        book.written(shard.number)
    return docs


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 7), st.integers(1, 60), st.randoms(use_true_random=False))
def test_every_row_once_across_shards_and_a_restore(per_shard, episodes, rnd: random.Random):
    order = list(range(episodes))
    rnd.shuffle(order)
    results = {i: result(i) for i in order}
    book = ShardBook(per_shard)
    docs: dict = {}
    cut = rnd.randint(0, episodes)
    for index in order[:cut]:
        book.add_row(index, 100)
        docs.update(_write(book, results))
    # a restart: a fresh book from what was written, then the rest
    again = ShardBook(per_shard)
    again.restore(list(docs.values()), set(order[:cut]))
    for index in order[cut:]:
        again.add_row(index, 100)
        docs.update(_write(again, results))
    head = {"uid": REF.uid, "episodes": episodes, "samples_per_input": 1, "shards": again.index("b-results")}
    whole = assemble(head, list(docs.values()))
    assert [r["index"] for r in whole["pods"]] == list(range(episodes))
    assert all(len(d["pods"]) <= per_shard for d in docs.values())
    assert len(whole["groups"]) == episodes


def test_assemble_ignores_other_batches_and_garbage():
    head = {"uid": "mine", "episodes": 2, "samples_per_input": 1, "shards": []}
    shards = [{"uid": "other", "shard": 0, "pods": [{"index": 0}]},
              {"uid": "mine", "shard": 1, "pods": ["x", {"index": "1"}, {"index": 1, "outcome": "succeeded"}]}]
    whole = assemble(head, shards)
    assert [r["index"] for r in whole["pods"]] == [1]
    assert assemble({"pods": [1]}, shards) == {"pods": [1]}   # an unsharded head is whole already


def test_a_row_that_restores_wins_over_a_broken_copy_and_missing_shards_are_named():
    good = result(0).to_row(None, 1)
    broken = dict(good, reward="lots")
    head = {"uid": REF.uid, "episodes": 1, "samples_per_input": 1,
            "shards": [{"name": "b-results-0"}, {"name": "b-results-1"}, {"name": "b-results-2"}]}
    whole = assemble(head, [{"uid": REF.uid, "shard": 0, "pods": [broken]},
                            {"uid": REF.uid, "shard": 1, "pods": [good]}])
    assert whole["pods"] == [good] and whole["missing_shards"] == ["b-results-2"]


@given(st.text(min_size=1, max_size=20), st.integers(0, 10**6))
def test_a_results_name_is_the_head_or_one_of_its_shards(head, number):
    assert is_results_configmap_name(head, head)
    assert is_results_configmap_name(head, shard_configmap_name(head, number))
    assert not is_results_configmap_name(head, f"{head}-backup")
    assert not is_results_configmap_name(head, f"{head}-0{number}")   # not a name the operator writes
    assert not is_results_configmap_name(head, f"my-{head}")


def test_a_name_given_up_before_the_restore_stays_skipped():
    """The store gives up taken names, then rebuilds the book: the gap the neighbour's name
    leaves among the shards found is rebuilt skipped, not as an empty shard nobody writes (the
    head would list it unread, and every reader's assemble() name it missing)."""
    book = ShardBook(rows_per_shard=1)
    book.add_row(0, 10)
    book.give_up_name(1)
    book.add_row(1, 10)
    assert [s.skipped for s in book.shards] == [False, True, False]
    docs = [shard_document(REF, book.shards[n], [result(i).to_row(None, 1)], []) for n, i in ((0, 0), (2, 1))]
    again = ShardBook(rows_per_shard=1)
    again.give_up_name(1)
    again.restore(docs, {0, 1}, 1)
    assert [s.skipped for s in again.shards] == [False, True, False]
    assert [s.indexes for s in again.shards] == [[0], [], [1]]
    head = {"uid": REF.uid, "episodes": 2, "samples_per_input": 1, "shards": again.index("b-results")}
    assert assemble(head, docs)["missing_shards"] == []
    again.add_row(2, 10)
    assert [s.number for s in again.dirty()] == [3]


def _largest_row_bytes() -> int:
    """The compact JSON of a row within every documented episode bound: a 4 KiB log tail, a 4 KiB
    agent output tail, 16 KiB of extras, all of it incompressible."""
    import string

    from rolloutbatch.core import strictjson
    rnd = random.Random(5)

    def noise(n):
        return "".join(rnd.choice(string.ascii_letters + string.digits + "+/") for _ in range(n))
    row = result(0, outcome="failed", reward=0.0, log_tail=noise(4000), extra={f"f{j}": noise(3900) for j in range(4)},
                 agent={"exit_code": 1, "timed_out": False, "output_tail": noise(4000)}).to_row(None)
    return len(strictjson.dumps(row, separators=strictjson.COMPACT))


def test_shards_filled_by_bytes_stay_within_max_shards():
    """A shard closed at SHARD_BYTES whatever the count: rows within every documented bound (~24 KB)
    filled one in ~25 rows, so a 100,000-episode batch (rows_per_shard_for: 100) made ~3,850
    shards, four times MAX_SHARDS, and as many resultsDigests entries in the status (~550 KB beside
    a spec that may hold 900 KiB of inline inputs: etcd keeps objects to 1.5 MiB). A shard now
    closes by bytes only while the rows left fit the shards MAX_SHARDS leaves."""
    from rolloutbatch.core.result_shards import MAX_SHARDS, rows_per_shard_for
    episodes = 100_000
    size = _largest_row_bytes()
    book = ShardBook(rows_per_shard_for(episodes, 1000), episodes=episodes)
    for i in range(episodes):
        book.add_row(i, size)
    assert len(book.shards) <= MAX_SHARDS, (len(book.shards), size)
    assert sum(len(s.indexes) for s in book.shards) == episodes
    assert len(book.shards[0].indexes) < book.rows_per_shard      # the first still filled by bytes


def test_a_restored_book_keeps_the_shard_bound():
    """Restore judged the last shard full by bytes alone: a restart could close a shard the bound
    kept open, one more shard at each restart."""
    from rolloutbatch.core.result_shards import MAX_SHARDS
    episodes, rows_per_shard = 2000, 2
    book = ShardBook(rows_per_shard, shard_bytes=10, episodes=episodes)
    for i in range(episodes - 3):
        book.add_row(i, 100)
    assert len(book.shards) <= MAX_SHARDS and not book.shards[-1].full
    docs = [{"shard": s.number, "full": s.full, "pods": [result(i).to_row(None) for i in s.indexes]}
            for s in book.shards]
    again = ShardBook(rows_per_shard, shard_bytes=10, episodes=episodes)
    again.restore(docs, set(range(episodes)))
    assert not again.shards[-1].full
    for i in range(episodes - 3, episodes):
        again.add_row(i, 100)
    assert len(again.shards) <= MAX_SHARDS


def test_the_status_digests_of_max_shards_stay_bounded():
    """The worst case the status holds: a resultsDigests entry per shard, MAX_SHARDS of them, under
    the longest batch name, beside as many pending. It must leave the batch object (etcd: 1.5 MiB)
    room for 900 KiB of inline inputs."""
    import json

    from rolloutbatch.core import naming
    from rolloutbatch.core.defaults import MAX_BATCH_NAME_LENGTH, MAX_CONFIG_BYTES
    from rolloutbatch.core.result_shards import MAX_SHARDS
    head = naming.results_configmap_name(BatchRef("ns", "b" * MAX_BATCH_NAME_LENGTH, "uid-1", 1))
    digests = {shard_configmap_name(head, n): "sha256:" + "f" * 64 for n in range(MAX_SHARDS)}
    digests[head] = "sha256:" + "f" * 64
    status = {"resultsDigests": digests, "pendingResultsDigests": dict(list(digests.items())[:2])}
    # managedFields name each key again (~its length plus a few bytes)
    size = len(json.dumps(status)) + sum(len(name) + 8 for name in digests)
    assert size + MAX_CONFIG_BYTES <= 1.5 * 1024 * 1024 - 200 * 1024, size


def test_a_shard_kept_open_by_the_bound_still_fits_a_configmap():
    """A shard the bound keeps filling past SHARD_BYTES holds rows_per_shard rows of the largest
    kind: its document sheds fields and fits, as a whole batch's does."""
    import base64
    import string

    from rolloutbatch.core.result_shards import Shard, rows_per_shard_for
    from rolloutbatch.core.results import GZIP_ABOVE, decode_results, encode_results
    rnd = random.Random(9)

    def noise(n):
        return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(n))
    rows = [result(i, outcome="failed", reward=0.0, log_tail=noise(4000), extra={f"f{j}": noise(3900) for j in range(4)},
                   agent={"exit_code": 1, "timed_out": False, "output_tail": noise(4000)}).to_row(None)
            for i in range(rows_per_shard_for(100_000, 1000))]
    data, binary = encode_results(shard_document(REF, Shard(0, full=True), rows, []))
    blob = base64.b64decode(binary["results.json.gz"]) if binary else data["results.json"].encode()
    assert len(blob) <= GZIP_ABOVE
    assert "extra" in decode_results({"binaryData": binary})["dropped_row_fields"]
