"""Batch statistics with the guide's definitions (its results.json is the reference).

Percentiles interpolate linearly between the two nearest ranks of the sorted sample, as the
guide's script does; timings are relative to the batch origin (the Job's creation time).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from rolloutbatch.core.model import EpisodeResult, Summary

MAX_IMAGE_IDS = 20


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile, ``q`` in [0, 1]; ValueError on an empty sample."""
    if not values:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    lo, hi = math.floor(position), math.ceil(position)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def summarize(results: Iterable[EpisodeResult], *, episodes: int, origin: float | None,
              retried: int = 0) -> Summary:
    counts: Counter[str] = Counter()
    rewards: list[float] = []
    startup: list[float] = []
    ready_offsets: list[float] = []
    reward_offsets: list[float] = []
    nodes: Counter[str] = Counter()
    images: list[str] = []
    for result in results:
        counts[result.outcome] += 1
        if result.node:
            nodes[result.node] += 1
        if result.image_id and result.image_id not in images and len(images) < MAX_IMAGE_IDS:
            images.append(result.image_id)
        if result.outcome != "succeeded":
            continue
        if result.reward is not None:
            rewards.append(result.reward)
        if result.pod_to_ready_seconds is not None:
            startup.append(result.pod_to_ready_seconds)
        if origin is not None and result.ready_at is not None:
            ready_offsets.append(result.ready_at - origin)
        if origin is not None and result.reward_at is not None:
            reward_offsets.append(result.reward_at - origin)
    return Summary(
        episodes=episodes, succeeded=counts["succeeded"], failed=counts["failed"], lost=counts["lost"],
        retried=retried, reward_sum=float(sum(rewards)), reward_mean=(sum(rewards) / len(rewards)) if rewards else None,
        batch_to_all_ready_seconds=max(ready_offsets) if ready_offsets else None,
        batch_to_all_rewards_seconds=max(reward_offsets) if reward_offsets else None,
        pod_to_ready_p50=percentile(startup, 0.5) if startup else None,
        pod_to_ready_p95=percentile(startup, 0.95) if startup else None,
        pod_to_ready_max=max(startup) if startup else None,
        nodes=dict(sorted(nodes.items())), image_ids=tuple(images),
    )
