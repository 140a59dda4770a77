"""Rewards through the pod status: events in the termination message are judged
with no log read; stdout is the fallback; the parse bounds hold for both channels.
"""
from __future__ import annotations

import json
import re

import pytest

from tests.support.batches import apply, episode_batch, get, unique, wait_finished

pytestmark = [pytest.mark.cluster]

PROGRAM = r'''
import json, os, sys, time
me, case = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
def ev(e, who=me, **f):
    return json.dumps(dict(event=e, at=time.time(), episode_id=who, **f)) + "\n"
def message(text):
    open("/dev/termination-log", "w").write(text)
if case in (0, 1, 2):    # success through the message only
    message(ev("ready") + ev("reward", reward=1))
elif case == 3:          # both channels: the message wins, stdout is never read
    print(ev("ready") + ev("reward", reward=0.25), end="")
    message(ev("ready") + ev("reward", reward=1))
elif case == 4:          # the events split across the channels: one channel holds them all
    print(ev("reward", reward=1), end="")
    message(ev("ready"))
elif case == 5:          # oversize: the kubelet keeps the end, which cannot prove "exactly one"
    message(ev("ready") + ev("reward", reward=1) + "x" * 5000 + "\n" + ev("ready") + ev("reward", reward=1))
elif case == 6:          # forged identity
    message(ev("ready", who="someone-else") + ev("reward", who="someone-else", reward=1))
elif case == 7:          # stdout only: the fallback
    print(ev("ready") + ev("reward", reward=1), end="")
'''

# a failed episode is the agent's failure: graded with the worst reward, 0.0 (core.outcomes)
EXPECT = {0: ("succeeded", None, 1.0), 1: ("succeeded", None, 1.0), 2: ("succeeded", None, 1.0),
          3: ("succeeded", None, 1.0), 4: ("failed", "NoRewardEvent", 0.0),
          5: ("failed", "LogLimitExceeded", 0.0), 6: ("failed", "IdentityMismatch", 0.0),
          7: ("succeeded", None, 1.0)}
CHANNEL = {0: "terminationMessage", 3: "terminationMessage", 7: "log"}


def _reads(operator) -> float:
    found = re.search(r"^rolloutbatch_log_read_seconds_count ([0-9.e+]+)$", operator.metrics(), re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.exclusive   # the operator-wide log-read count must not move
def test_message_channel(operator_process, namespace):
    # First a batch of message-only successes: the operator's log-read count must not move.
    before = _reads(operator_process)
    quiet = unique("termmsg-quiet")
    apply(episode_batch(quiet, PROGRAM, episodes=3), namespace)
    obj = wait_finished(quiet, namespace, timeout=180, operator=operator_process)
    assert obj["status"]["succeededEpisodes"] == 3, obj["status"]
    assert _reads(operator_process) == before, "a termination-message episode had its log read"

    name = unique("termmsg")
    apply(episode_batch(name, PROGRAM, episodes=len(EXPECT), parallelism=4, minSuccessfulEpisodes=1), namespace)
    wait_finished(name, namespace, timeout=240, operator=operator_process)
    rows = {r["index"]: r for r in json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])["pods"]}
    problems = [f"{i}: got {(rows[i]['outcome'], rows[i]['reason'], rows[i]['reward'])} ({rows[i]['message']}), want {want}"
                for i, want in EXPECT.items() if (rows[i]["outcome"], rows[i]["reason"], rows[i]["reward"]) != want]
    problems += [f"{i}: channel {rows[i].get('channel')}, want {c}" for i, c in CHANNEL.items()
                 if rows[i].get("channel") != c]
    assert not problems, "\n".join(problems)
    assert "4096" in rows[5]["message"]
