"""An episode's input is its own (README threat model: the agent "may not get ... another
episode's input"): a Job-mode episode tries to read its neighbour's input, and to change its own
before the verifier reads it."""
from __future__ import annotations

import pytest

from tests.support.batches import apply, episode_batch, results, unique, wait_finished

pytestmark = [pytest.mark.cluster]

PROGRAM = r'''
import json, os, time
me, index = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
own = json.load(open(os.environ["EPISODE_INPUT"]))
other_path = os.path.join(os.path.dirname(os.environ["EPISODE_INPUT"]), "input-%d.json" % (1 - index))
try:
    other = json.load(open(other_path))["secret"]
except Exception as exc:   # noqa
    other = None
listing = sorted(n for n in os.listdir(os.path.dirname(os.environ["EPISODE_INPUT"])) if n.startswith("input-"))
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": me}))
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": me, "reward": 1,
                  "own": own["secret"], "other": other, "listing": listing}))
'''


def test_an_episode_cannot_read_another_episodes_input(operator_process, namespace):
    name = unique("atk-inputs")
    apply(episode_batch(name, PROGRAM, episodes=2, inputs=[{"secret": "alpha"}, {"secret": "bravo"}]), namespace)
    obj = wait_finished(name, namespace, timeout=240, operator=operator_process)
    assert obj["status"]["succeededEpisodes"] == 2, obj["status"]
    rows = {r["index"]: r for r in results(name, namespace)["pods"]}
    # the attack ran: each episode read its own input through EPISODE_INPUT
    assert rows[0]["extra"]["own"] == "alpha" and rows[1]["extra"]["own"] == "bravo", rows
    for index, row in rows.items():
        assert row["extra"]["other"] is None, (
            f"episode {index} read the other episode's input {row['extra']['other']!r} "
            f"(its inputs directory lists {row['extra']['listing']})")


TAMPER = r'''
import json, os, time
me, path = os.environ["EPISODE_ID"], os.environ["EPISODE_INPUT"]
tried = {}
for what, act in (("rewrite", lambda: open(path, "w").write("{}")),
                  ("create", lambda: open(os.path.join(os.path.dirname(path), "forged.json"), "w").write("{}")),
                  ("remove", lambda: os.remove(path))):
    try:
        act()
        tried[what] = "done"
    except OSError as exc:
        tried[what] = exc.__class__.__name__
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": me}))
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": me, "reward": 1, "tried": tried,
                  "input": json.load(open(path))}))
'''


def test_an_episode_cannot_change_its_own_input(operator_process, namespace):
    """The copy is read-only: with a verifier, what it reads is the input, not the agent's edit."""
    name = unique("atk-inputs-rw")
    apply(episode_batch(name, TAMPER, episodes=2, samplesPerInput=2, inputs=[{"secret": "alpha"}]), namespace)
    obj = wait_finished(name, namespace, timeout=240, operator=operator_process)
    assert obj["status"]["succeededEpisodes"] == 2, obj["status"]
    for row in results(name, namespace)["pods"]:
        assert row["extra"]["input"] == {"secret": "alpha"}, row
        assert "done" not in row["extra"]["tried"].values(), row["extra"]["tried"]
