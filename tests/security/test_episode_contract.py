"""The episode contract enforced as written: reward range, clocks, log lines, strict JSON.

One batch, one case per index, side by side with well-behaved episodes: every hostile case fails
only itself with its documented reason, the batch ends, and everything the operator wrote (status
and results) is strict JSON with finite numbers.
"""
from __future__ import annotations

import json
import math

import pytest

from tests.support.batches import apply, episode_batch, get, unique, wait_finished
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

CASES = [  # (index, case, outcome, reason)
    (0, "good", "succeeded", None),
    (1, "good-nan-extras", "succeeded", None),
    (2, "overflow-reward", "failed", "InvalidReward"),
    (3, "overflow-reward", "failed", "InvalidReward"),
    (4, "reward-line-before-ready-same-at", "failed", "RewardBeforeReady"),
    (5, "reward-at-before-ready-at-within-2s", "failed", "RewardBeforeReady"),
    (6, "far-future-at", "failed", "ClockSkew"),
    (7, "carriage-returns", "failed", "NoRewardEvent"),
    (8, "duplicate-past-the-limit", "failed", "LogLimitExceeded"),
    (9, "huge-reward", "failed", "InvalidReward"),
]

PROGRAM = r'''
import json, os, sys, time
me = os.environ["EPISODE_ID"]
case = int(os.environ["EPISODE_INDEX"])
out = sys.stdout.buffer
def line(text):
    out.write(text.encode() + b"\n"); out.flush()
def emit(e, at=None, **f):
    line(json.dumps(dict(event=e, at=time.time() if at is None else at, episode_id=me, **f)))

t = time.time()
if case == 0:
    emit("ready"); emit("reward", reward=1)
elif case == 1:
    emit("ready", at=t); line('{"event":"reward","at":%f,"episode_id":"%s","reward":1,"score":NaN,"big":Infinity}' % (t + 0.01, me))
elif case in (2, 3):
    emit("ready", at=t); line('{"event":"reward","at":%f,"episode_id":"%s","reward":1e308}' % (t + 0.01, me))
elif case == 4:
    emit("reward", at=t, reward=1); emit("ready", at=t)
elif case == 5:
    emit("ready", at=t); emit("reward", at=t - 1.0, reward=1)
elif case == 6:
    emit("ready", at=1e12); emit("reward", at=1e12 + 1, reward=1)
elif case == 7:
    emit("ready"); out.write(b"tests 50%\rtests 100%\r\n"); out.flush()
elif case == 8:
    emit("ready"); emit("reward", reward=1)
    chunk = b"x" * 1023 + b"\n"
    for _ in range(1100):
        out.write(chunk)
    emit("reward", reward=1)
elif case == 9:
    emit("ready", at=t); line('{"event":"reward","at":%f,"episode_id":"%s","reward":%d}' % (t + 0.01, me, 10 ** 400))
'''


def strict_loads(text: str):
    def refuse(token):
        raise ValueError(f"non-strict JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def results_text(name: str, namespace: str) -> str:
    import base64
    import gzip
    cm = get(f"{name}-results", namespace, kind="configmap")
    if "results.json" in (cm.get("data") or {}):
        return cm["data"]["results.json"]
    return gzip.decompress(base64.b64decode(cm["binaryData"]["results.json.gz"])).decode()


def finite_numbers(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_numbers(v) for v in value)
    return True


def test_contract_cases_fail_only_themselves_and_everything_written_is_strict(operator_process, namespace):
    name = unique("contract")
    apply(episode_batch(name, PROGRAM, episodes=len(CASES), minSuccessfulEpisodes=2, episodeTimeoutSeconds=60),
          namespace)
    obj = wait_finished(name, namespace, timeout=240, operator=operator_process)
    document = strict_loads(results_text(name, namespace))
    rows = {row["index"]: row for row in document["pods"]}
    problems = [f"{i} {case}: got {rows[i]['outcome']}/{rows[i]['reason']} ({rows[i].get('message')}), "
                f"want {outcome}/{reason}"
                for i, case, outcome, reason in CASES if (rows[i]["outcome"], rows[i]["reason"]) != (outcome, reason)]
    assert not problems, "\n".join(problems)
    st = obj["status"]
    assert st["phase"] == "Succeeded" and st["succeededEpisodes"] == 2 and st["rewardSum"] == 2.0, st
    # The raw status as the API server stores it: strict JSON, every number finite.
    raw = kubectl("get", "rolloutbatch", name, "-n", namespace, "-o", "json").stdout
    assert finite_numbers(strict_loads(raw)["status"])
    assert finite_numbers(document)
    assert document["reward_sum"] == 2.0
    # A progress bar's carriage returns are part of the line (containerd's CRI logger takes the
    # last one, before the newline, as part of a CRLF line end).
    assert "tests 50%\rtests 100%" in (rows[7].get("log_tail") or ""), rows[7].get("log_tail")
    # NaN/Infinity in extras never reach the document as such (strict_loads above refuses the bare
    # tokens too). Only a row's log tail may hold them: as text, what the episode printed.
    for row in document["pods"]:
        quoted = json.dumps({k: v for k, v in row.items() if k not in ("log_tail", "output_tail")})
        assert "Infinity" not in quoted and "NaN" not in quoted, row
    assert "NaN" in (rows[1].get("log_tail") or ""), "a success keeps its log's end"
