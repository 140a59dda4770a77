"""The results document, in the guide's results.json layout, and its ConfigMap encoding.

The document is also the operator's memory across restarts: the rows already written are final
and are restored before any log is read again (see ``core.tracker``). Past 900 KiB it is
gzipped into ``binaryData`` so a large batch still fits a ConfigMap's 1 MiB.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from collections.abc import Mapping, Sequence

from rolloutbatch.core.model import BatchRef, BatchSpec, EpisodeResult, Summary

GZIP_ABOVE = 900 * 1024
KEY, GZ_KEY = "results.json", "results.json.gz"


def results_document(*, ref: BatchRef, spec: BatchSpec | None, summary: Summary,
                     results: Sequence[EpisodeResult], origin: float | None, extra: Mapping) -> dict:
    document = {
        "batch": ref.name, "namespace": ref.namespace, "uid": ref.uid,
        "episodes": summary.episodes,
        "successful_episodes": summary.succeeded,
        "failed_episodes": summary.failed,
        "lost_episodes": summary.lost,
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
    if spec is not None:
        document.update(image=spec.image, runtime=spec.runtime_class_name, parallelism=spec.parallelism)
    document.update(extra)
    document["pods"] = [r.to_row(origin) for r in sorted(results, key=lambda r: r.index)]
    return document


def encode_results(document: Mapping) -> tuple[dict[str, str], dict[str, str]]:
    text = json.dumps(document, indent=1, sort_keys=False)
    if len(text.encode()) <= GZIP_ABOVE:
        return {KEY: text}, {}
    packed = gzip.compress(json.dumps(document, separators=(",", ":")).encode(), mtime=0)
    return {}, {GZ_KEY: base64.b64encode(packed).decode()}


def decode_results(configmap: Mapping) -> dict | None:
    try:
        data, binary = configmap.get("data") or {}, configmap.get("binaryData") or {}
        if KEY in data:
            document = json.loads(data[KEY])
        elif GZ_KEY in binary:
            document = json.loads(gzip.decompress(base64.b64decode(binary[GZ_KEY])))
        else:
            return None
    except (ValueError, OSError, EOFError, binascii.Error, zlib.error):
        return None
    return document if isinstance(document, dict) else None


def results_from_document(document: Mapping) -> dict[int, EpisodeResult]:
    restored = {}
    for row in document.get("pods") or []:
        try:
            result = EpisodeResult.from_row(row)
        except (KeyError, TypeError, ValueError):
            continue
        restored[result.index] = result
    return restored
