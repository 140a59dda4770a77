"""GRPO groups: k samples per input, graded together.

Episode ``i`` works on input ``i // k`` as sample ``i % k``; the ``k`` episodes of one input
form its group (:func:`group_and_sample`, :func:`group_members`, used by every reader). A trainer
computes advantages within a group, so only *valid* rewards enter a group's statistics. The
adversary is the agent, which gains by leaving its bad attempts out of its group (the mean it is
compared with drops less). So a row is valid iff it was graded
(core.outcomes): an episode that succeeded counts its reward, one that failed for a reason the
agent could cause (broke the contract, crashed, its verifier failed on its work) counts
FAILURE_REWARD, exactly as an honest attempt that scored it; only an episode lost to what the
agent cannot cause (infrastructure) is left out, and the group says how many valid samples it has.

Statistics are computed from rows (the results document's ``pods``), so the operator, the SDK
and any reader of a results document get the same numbers from the same function.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.strictjson import finite
from rolloutbatch.core.outcomes import usable_reward


def group_and_sample(index: int, k: int) -> tuple[int, int]:
    """The group (the input) of episode ``index`` and its sample number in that group."""
    return divmod(index, max(1, k))


def group_members(group: int, k: int) -> range:
    """The episode indexes of ``group``, its samples in order."""
    return range(group * k, (group + 1) * k)


def group_count(episodes: int, k: int) -> int:
    """How many groups ``episodes`` episodes form (spec.samplesPerInput divides spec.episodes)."""
    return episodes // max(1, k)


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    # Population standard deviation, as GRPO normalises advantages within the group.
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / len(values))
    return mean, std


def _valid_reward(row: Mapping) -> float | None:
    """A valid row's reward; None past MAX_ABS_REWARD as well (no row of the operator's holds one,
    and a hand-edited 1e308 would overflow the group's mean and std)."""
    return usable_reward(row.get("reward")) if row.get("valid") is True else None


def group_entry(group: int, samples_per_input: int, rows: Mapping[int, Mapping]) -> dict:
    """The statistics of one group from the rows known so far (keyed by episode index)."""
    members = [rows.get(i) for i in group_members(group, samples_per_input)]
    known = [r for r in members if r is not None]
    rewards = [x for x in (_valid_reward(r) for r in known) if x is not None]
    mean, std = _mean_std(rewards)
    return {
        "group": group, "episodes": samples_per_input,
        "succeeded": sum(1 for r in known if r.get("outcome") == v.OUTCOME_SUCCEEDED),
        "valid": len(rewards),
        "reward_mean": mean, "reward_std": std,
        # a stopped sample never becomes known: its group is never final (the owner's stop must
        # not drop an agent's stalled attempts from the group's statistics)
        "final": len(known) == samples_per_input and not any(
            r.get("outcome") == v.OUTCOME_STOPPED for r in known),
    }


def advantages(entry: Mapping, members: Iterable[Mapping], eps: float = 1e-6) -> dict[int, float]:
    """GRPO's group-relative advantage of each valid member: (reward - mean) / (std + eps)."""
    mean, std = finite(entry.get("reward_mean")), finite(entry.get("reward_std"))
    if mean is None or std is None:
        return {}
    out = {}
    for row in members:
        reward = _valid_reward(row)
        if reward is not None and type(row.get("index")) is int:
            out[row["index"]] = (reward - mean) / (std + eps)
    return out


def group_entries(episodes: int, samples_per_input: int, rows: Mapping[int, Mapping]) -> list[dict]:
    return [group_entry(g, samples_per_input, rows) for g in range(group_count(episodes, samples_per_input))]


def groups_completed_by(indexes: Iterable[int], samples_per_input: int, final: Iterable[int] | set[int]) -> list[int]:
    """Groups made final by the episodes ``indexes`` (``final``: every index that is final)."""
    final = final if isinstance(final, (set, frozenset, dict)) else set(final)
    done = set()
    for index in indexes:
        group, _ = group_and_sample(index, samples_per_input)
        if group not in done and all(i in final for i in group_members(group, samples_per_input)):
            done.add(group)
    return sorted(done)
