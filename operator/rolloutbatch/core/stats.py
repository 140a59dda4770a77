"""Batch statistics with the guide's definitions (its results.json is the reference).

Percentiles interpolate linearly between the two nearest ranks of the sorted sample, as the
guide's script does; timings are relative to the batch origin (the Job's creation time).
Whatever results come in (hand-edited, hostile), every number out is finite or None: the status
patch and the results document are JSON, which has no Infinity (issue 10 item 1).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import EpisodeResult, Summary, usable_reward
from rolloutbatch.core.strictjson import finite

MAX_IMAGE_IDS = 20


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile, ``q`` in [0, 1]; ValueError on an empty sample."""
    if not values:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    lo, hi = math.floor(position), math.ceil(position)
    a, b, t = ordered[lo], ordered[hi], position - lo
    if lo == hi:
        return a
    value = a + (b - a) * t if math.isfinite(b - a) else a * (1 - t) + b * t
    return min(max(value, a), b)    # rounding never leaves [a, b] (nor overflows)


def _offset(ts: object, origin: float | None) -> float | None:
    if origin is None:
        return None
    number = finite(ts)
    return finite(number - origin) if number is not None else None


def summarize(results: Iterable[EpisodeResult], *, episodes: int, origin: float | None,
              retried: int = 0) -> Summary:
    counts: Counter[str] = Counter()
    rewards: list[float] = []
    startup: list[float] = []
    ready_offsets: list[float] = []
    reward_offsets: list[float] = []
    nodes: Counter[str] = Counter()
    images: list[str] = []
    origin = finite(origin)
    for result in results:
        counts[result.outcome] += 1
        if isinstance(result.node, str) and result.node:
            nodes[result.node] += 1
        if isinstance(result.image_id, str) and result.image_id and result.image_id not in images \
                and len(images) < MAX_IMAGE_IDS:
            images.append(result.image_id)
        if result.outcome != v.OUTCOME_SUCCEEDED:
            continue
        reward = usable_reward(result.reward)
        if reward is not None:
            rewards.append(reward)
        startup_seconds = finite(result.pod_to_ready_seconds)
        if startup_seconds is not None:
            startup.append(startup_seconds)
        for ts, offsets in ((result.ready_at, ready_offsets), (result.reward_at, reward_offsets)):
            offset = _offset(ts, origin)
            if offset is not None:
                offsets.append(offset)
    # |reward| <= MAX_ABS_REWARD: fsum of any realistic count stays finite (and exact-ish).
    total = math.fsum(rewards)
    return Summary(
        episodes=episodes, succeeded=counts[v.OUTCOME_SUCCEEDED], failed=counts[v.OUTCOME_FAILED],
        lost=counts[v.OUTCOME_LOST], retried=retried, reward_sum=total,
        reward_mean=(total / len(rewards)) if rewards else None,
        batch_to_all_ready_seconds=max(ready_offsets) if ready_offsets else None,
        batch_to_all_rewards_seconds=max(reward_offsets) if reward_offsets else None,
        pod_to_ready_p50=percentile(startup, 0.5) if startup else None,
        pod_to_ready_p95=percentile(startup, 0.95) if startup else None,
        pod_to_ready_max=max(startup) if startup else None,
        nodes=dict(sorted(nodes.items())), image_ids=tuple(images),
    )
