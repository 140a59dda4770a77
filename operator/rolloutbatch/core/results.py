"""The results document, in the guide's results.json layout, and its ConfigMap encoding.

The document is also the operator's memory across restarts: the rows already written are final
and are restored before any log is read again (see ``core.tracker``). Past 900 KiB it is
gzipped into ``binaryData`` so a large batch still fits a ConfigMap's 1 MiB. What is written is
strict JSON (``core.strictjson``: no NaN/Infinity anywhere); what is read back
is checked row by row, since the user may edit the ConfigMap.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence

from rolloutbatch.core import strictjson
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.groups import group_entries
from rolloutbatch.core.model import BatchRef, BatchSpec, EpisodeResult, Summary

GZIP_ABOVE = 900 * 1024
# The gzip a row takes (with its group entry) once every shed stage ran and only verdict fields are
# left: ~290 bytes for rows of random 63-character pod and node names, a distinct image digest each
# and three flags, the summary naming each node (tests/unit/core/test_results.py), ~70 for a real
# batch's rows.
SHED_ROW_GZIP_BYTES = 320
# The most rows one results document (a whole batch's head, or a shard) may hold: that many rows,
# shed to their verdict fields, still fit GZIP_ABOVE, so the API never refuses the document. Past
# it a batch is sharded whatever --results-shard-rows says (core.result_shards.rows_per_shard_for).
MAX_DOCUMENT_ROWS = GZIP_ABOVE // SHED_ROW_GZIP_BYTES
MAX_INFLATED = 256 * 1024 * 1024      # decode_results refuses a gzip that inflates past this
# Row fields dropped, in stages, from a document too big even gzipped ("agent.output_tail": the
# verifier's row keeps the agent's last output, up to 4 KiB of what the agent printed). A name
# "<outcome>:<field>" drops the field from rows of that outcome only: succeeded rows' log tails
# go first, so a failure keeps its tail wherever it did before successes kept theirs.
SUCCEEDED_TAILS = f"{v.OUTCOME_SUCCEEDED}:log_tail"
SHED_STAGES = ((SUCCEEDED_TAILS,), ("log_tail", "agent.output_tail"), ("log_tail", "agent.output_tail", "extra"),
               ("log_tail", "agent.output_tail", "extra", "message"))
# Every name SHED_STAGES uses, in the order they go; a document lists the ones its rows may lack
# under DROPPED, and keeps listing them when rows restored after a restart are written again.
SHED_FIELDS = tuple(dict.fromkeys(name for stage in SHED_STAGES for name in stage))
DROPPED = "dropped_row_fields"
KEY, GZ_KEY = "results.json", "results.json.gz"
# The head of a retained sharded batch (spec.cleanup.results: Retain): shard name -> digest of
# what the operator wrote there, for readers once the batch (and its status) is gone.
SHARD_DIGESTS = "shard_digests"


def configmap_digest(cm: Mapping) -> str:
    """What a results ConfigMap holds, as a digest the operator records in the batch's status.

    Anyone who may write ConfigMaps in the namespace can write a results document, label and
    ownerReference included; only the operator writes the status (its subresource). A document
    counts as the operator's (on restore, and for readers) only when its digest is the one the
    status records under its name."""
    content = {"data": cm.get("data") or {}, "binaryData": cm.get("binaryData") or {}}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# The batch status' fields that vouch for results ConfigMaps (name -> digest): the write recorded
# last, and the one about to be written. The operator records a write's digest before making it
# and moves it to DIGESTS after, so a crash between the write and its status loses no trust.
DIGESTS, PENDING_DIGESTS = "resultsDigests", "pendingResultsDigests"


# A stall's final document names it: an operator that died before the Failed status finds it there.
STALL_REASON, STALL_MESSAGE = "stall_reason", "stall_message"


def stall_of(document: Mapping | None) -> tuple[str, str] | None:
    """(reason, message) of the stall a final head document was written for, if any."""
    if not isinstance(document, Mapping) or document.get("final") is not True:
        return None
    reason, message = document.get(STALL_REASON), document.get(STALL_MESSAGE)
    if reason not in v.STALL_REASONS or not isinstance(message, str):
        return None
    return str(reason), message[:1000]


def vouched_digests(status: object) -> dict[str, frozenset[str]]:
    """ConfigMap name -> the digests a batch's status vouches for (``DIGESTS`` and
    ``PENDING_DIGESTS``); anything malformed vouches for nothing."""
    out: dict[str, set[str]] = {}
    for key in (DIGESTS, PENDING_DIGESTS):
        digests = status.get(key) if isinstance(status, Mapping) else None
        if isinstance(digests, Mapping):
            for name, digest in digests.items():
                if isinstance(name, str) and isinstance(digest, str):
                    out.setdefault(name, set()).add(digest)
    return {name: frozenset(found) for name, found in out.items()}


def recorded_by_operator(cm: Mapping, vouched: Mapping[str, frozenset[str]]) -> bool:
    """Whether ``cm`` is exactly what the operator wrote (or was about to write) under its name
    (``vouched``: ``vouched_digests`` of the batch's status)."""
    name = (cm.get("metadata") or {}).get("name")
    return isinstance(name, str) and configmap_digest(cm) in vouched.get(name, ())


def results_document(*, ref: BatchRef, spec: BatchSpec | None, summary: Summary,
                     results: Sequence[EpisodeResult], origin: float | None, extra: Mapping,
                     shards: list[dict] | None = None, rows: Mapping[int, dict] | None = None) -> dict:
    """The head document. With ``shards`` (the index of a sharded batch, see
    ``core.result_shards``) it holds no rows; otherwise ``pods`` (every row) and ``groups``.
    ``rows``: the rows of ``results`` by index, when the caller already made them."""
    document = {
        "batch": ref.name, "namespace": ref.namespace, "uid": ref.uid,
        "episodes": summary.episodes,
        "successful_episodes": summary.succeeded,
        "failed_episodes": summary.failed,
        "lost_episodes": summary.lost,
        "stopped_episodes": summary.stopped,
        "retried_episodes": summary.retried,
        "reward_sum": summary.reward_sum,
        "reward_mean": summary.reward_mean,
        "batch_to_all_ready_seconds": summary.batch_to_all_ready_seconds,
        "batch_to_all_rewards_seconds": summary.batch_to_all_rewards_seconds,
        "pod_to_ready_p50_seconds": summary.pod_to_ready_p50,
        "pod_to_ready_p95_seconds": summary.pod_to_ready_p95,
        "pod_to_ready_max_seconds": summary.pod_to_ready_max,
        "nodes": summary.nodes,
        "image_ids": list(summary.image_ids),
        "origin": origin,
    }
    if summary.pool_hits or summary.pool_misses:
        document.update(pool_hits=summary.pool_hits, pool_misses=summary.pool_misses,
                        claim_p50_seconds=summary.claim_p50, claim_p95_seconds=summary.claim_p95)
    k = spec.samples_per_input if spec is not None else 1
    if spec is not None:
        document.update(image=spec.image, runtime=spec.runtime_class_name, parallelism=spec.parallelism)
    document["samples_per_input"] = k
    document.update(extra)
    if shards is not None:
        document["shards"] = shards
        return document
    if rows is None:
        rows = {r.index: r.to_row(origin, k) for r in results}
    document["pods"] = [rows[i] for i in sorted(rows)]
    document["groups"] = group_entries(summary.episodes, k, rows)
    return document


def dropped_fields(document: object) -> tuple[str, ...]:
    """The row fields ``document`` says its rows may lack (``dropped_row_fields``), known names only."""
    listed = document.get(DROPPED) if isinstance(document, Mapping) else None
    return tuple(name for name in SHED_FIELDS if isinstance(listed, list) and name in listed)


def union_fields(*fields: Sequence[str]) -> list[str]:
    """The shed field names of every ``fields``, once each, in SHED_FIELDS' order."""
    named = {name for names in fields for name in names}
    return [name for name in SHED_FIELDS if name in named]


def _gzip(document: Mapping) -> bytes:
    # Level 6, not gzip's default 9: on escaped episode text 9 took 16x longer for ~the same size
    # (29.6 s against 1.8 s for 1,000 rows of control-byte tails, measured), on the event loop.
    return gzip.compress(strictjson.dumps(document, separators=strictjson.COMPACT).encode(), compresslevel=6, mtime=0)


def _shed(document: Mapping, fields: tuple[str, ...]) -> dict:
    """A copy of ``document`` whose rows lack ``fields`` ("[<outcome>:]<key>[.<inner>]"), saying
    so in ``dropped_row_fields`` (with what it said already: rows shed before a restart)."""
    slim = dict(document)
    specs = []
    for name in fields:
        outcome, _, path = name.rpartition(":")
        key, _, inner = path.partition(".")
        specs.append((outcome or None, key, inner or None))

    def slimmed(row: Mapping) -> dict:
        out = dict(row)
        for outcome, key, inner in specs:
            if outcome is not None and row.get("outcome") != outcome:
                continue
            if inner is None:
                out.pop(key, None)
            elif isinstance(out.get(key), Mapping):
                out[key] = {k: val for k, val in out[key].items() if k != inner}
        return out
    slim["pods"] = [slimmed(row) for row in document.get("pods") or []]
    slim[DROPPED] = union_fields(dropped_fields(document), fields)
    return slim


def _spliced(document: Mapping, row_texts: Sequence[str]) -> str:
    """The compact JSON of ``document`` with ``pods`` written from the rows' own texts."""
    rest = {k: val for k, val in document.items() if k != "pods"}
    text = strictjson.dumps(rest, separators=strictjson.COMPACT)
    return text[:-1] + ("," if rest else "") + '"pods":[' + ",".join(row_texts) + "]}"


def encode_results(document: Mapping, *, sanitized: bool = False,
                   row_texts: Sequence[str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """ConfigMap ``(data, binaryData)`` for the document (``sanitized``: already strict JSON).

    Compact JSON: with an indent, ``json`` falls back from its C encoder to pure Python, which
    made every results checkpoint several times dearer (measured). ``row_texts``: the
    compact strict JSON of each row of ``document["pods"]``, in order, which the caller made
    once per row: a checkpoint then encodes only the rest (re-encoding every row at every
    checkpoint was the largest CPU cost left of a running batch, as profiled).

    Up to 900 KiB of JSON goes to ``data["results.json"]``; past that, gzip to
    ``binaryData["results.json.gz"]``. If even the gzip passes 900 KiB, the least useful row fields
    are dropped in stages (succeeded episodes' log tails, then every log tail, then reward extras,
    then messages), and the document records which in ``dropped_row_fields``. Verdict fields (index, outcome, reason,
    reward, timestamps) are never dropped: they are what a restarted operator resumes from. A
    document of at most ``MAX_DOCUMENT_ROWS`` rows fits after that (callers hold no more:
    ``core.result_shards``); a bigger one is returned as is, and the API server would refuse it.
    """
    if not sanitized:
        document = strictjson.sanitize(document)
    if not isinstance(document, dict):
        document = {}
    pods = document.get("pods")
    if row_texts is not None and isinstance(pods, list) and len(row_texts) == len(pods):
        text = _spliced(document, row_texts)
    else:
        text = strictjson.dumps(document, separators=strictjson.COMPACT)
    if len(text.encode()) <= GZIP_ABOVE:
        return {KEY: text}, {}
    packed = _gzip(document)
    rows = document.get("pods") if isinstance(document.get("pods"), list) else []
    for stage in SHED_STAGES:
        if len(packed) <= GZIP_ABOVE:
            break
        if stage == (SUCCEEDED_TAILS,) and not any(isinstance(r, Mapping) and r.get("outcome") == v.OUTCOME_SUCCEEDED
                                                   and "log_tail" in r for r in rows):
            continue   # nothing to shed there: spare the gzip
        packed = _gzip(_shed(document, stage))
    return {}, {GZ_KEY: base64.b64encode(packed).decode()}


def _gunzip_bounded(blob: bytes, limit: int) -> bytes:
    """Decompress at most ``limit`` bytes: a gzip bomb in a user-writable ConfigMap stays harmless."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = inflater.decompress(blob, limit)
    if inflater.unconsumed_tail:
        raise ValueError(f"results.json.gz inflates past {limit} bytes")
    return out


def decode_results(configmap: Mapping) -> dict | None:
    """The document of a results ConfigMap (either encoding), or None for anything else.

    The ConfigMap lives in the user's namespace, where the user may edit it: garbage, invalid
    base64, a gzip bomb, absurdly nested JSON or a number JSON lacks (NaN, Infinity) all give
    None, never an exception.
    """
    try:
        data, binary = configmap.get("data") or {}, configmap.get("binaryData") or {}
        if KEY in data:
            document = strictjson.loads(data[KEY])
        elif GZ_KEY in binary:
            document = strictjson.loads(_gunzip_bounded(base64.b64decode(binary[GZ_KEY], validate=True), MAX_INFLATED))
        else:
            return None
    except (ValueError, TypeError, AttributeError, OSError, EOFError, RecursionError, binascii.Error, zlib.error):
        return None
    return document if isinstance(document, dict) else None


def results_from_document(document: Mapping) -> dict[int, EpisodeResult]:
    """Rows of a decoded document as results by index.

    Only well-typed rows are restored (see :meth:`EpisodeResult.from_row`); any other row is
    skipped, so its episode is judged again instead of being misread (an unknown outcome must not
    count as final). Of two rows for one index the first wins, as in the tracker.
    """
    restored: dict[int, EpisodeResult] = {}
    pods = document.get("pods") if isinstance(document, Mapping) else None
    for row in pods if isinstance(pods, list) else []:
        try:
            result = EpisodeResult.from_row(row)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError):
            continue
        restored.setdefault(result.index, result)
    return restored


def retried_from_document(document: Mapping) -> int:
    """The document's ``retried_episodes`` if it is a non-negative int, else 0 (never raises:
    ``int(doc.get(...))`` of a hand-edited "lots" or Infinity would)."""
    value = document.get("retried_episodes") if isinstance(document, Mapping) else None
    return value if type(value) is int and value >= 0 else 0
