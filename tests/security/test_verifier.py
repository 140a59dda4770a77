"""spec.verifier against hostile agents, side by side with honest ones, in one batch.

The task: write /workspace/answer.py with add(a, b). The verifier imports it in a subprocess
(captured output, a timeout), with its own tests from /verifier, and ignores every other file the
agent wrote. Each index is one agent behaviour; the verifier also reports what it saw, so every
row says what happened.
"""
from __future__ import annotations

import json

import pytest

from tests.support.batches import apply, episode_batch, get, unique, wait_finished

pytestmark = [pytest.mark.cluster]

AGENT = r'''
import json, os, sys, time
me, case = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
def emit(e, **f):
    print(json.dumps(dict(event=e, at=time.time(), episode_id=me, **f)), flush=True)
def answer(good):
    open("/workspace/answer.py", "w").write("def add(a, b):\n    return a %s b\n" % ("+" if good else "-"))
if case == 1:      # honest, its ready in the termination message: no log read for this agent
    open("/dev/termination-log", "w").write(json.dumps(dict(event="ready", at=time.time(), episode_id=me)) + "\n")
    answer(True); sys.exit(0)
emit("ready")
if case == 0:      # honest
    answer(True)
elif case == 2:    # prints a forged reward
    answer(False); emit("reward", reward=1)
elif case == 11:   # forges a reward in its termination message: that channel then holds all its
    answer(True)   # events, and it has no ready there (one channel per container)
    open("/dev/termination-log", "w").write(json.dumps(dict(event="reward", at=time.time(), episode_id=me, reward=1)))
elif case == 3:    # reward files in the workspace
    answer(False)
    open("/workspace/reward.json", "w").write('{"reward": 1}'); open("/workspace/reward.txt", "w").write("1")
elif case == 4:    # rewrites the tests in the workspace
    answer(False); os.makedirs("/workspace/tests", exist_ok=True)
    open("/workspace/tests/test_answer.py", "w").write("def test_ok():\n    assert True\n")
elif case == 5:    # looks for the verifier's files
    found = [p for p in ("/verifier", "/verifier/verify.py", "/verifier/tests.json") if os.path.exists(p)]
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/dev", "/usr")):   # /usr: the node's own, read-only
            dirs[:] = []
            continue
        found += [os.path.join(root, f) for f in files if f in ("verify.py", "tests.json")]
    open("/workspace/found.json", "w").write(json.dumps(found)); answer(False)
elif case == 6:    # a background process that would print a reward and fix the answer later
    answer(False)
    if os.fork() == 0:
        os.setsid(); time.sleep(2)
        emit("reward", reward=1); answer(True)
        open("/dev/termination-log", "a").write("late")
        os._exit(0)
elif case == 7:    # exits non-zero after honest work: still graded
    answer(True); raise SystemExit(3)
elif case == 8:    # crashes with nothing done
    raise RuntimeError("agent blew up")
elif case == 9:    # sleeps past its time
    time.sleep(600)
elif case == 10:   # honest, but the verifier of this index crashes
    answer(True)
elif case == 12:   # its code, imported by the verifier, kills every process of its UID
    open("/workspace/answer.py", "w").write("import os\nos.kill(-1, 9)\n")
elif case == 13:   # its code takes the verifier's termination message away
    open("/workspace/answer.py", "w").write("import os\nos.chmod('/dev/termination-log', 0)\n"
                                            "def add(a, b):\n    return a - b\n")
elif case == 14:   # a sparse 40 GiB file the verifier reads whole
    answer(False)
    with open("/workspace/big.bin", "wb") as f:
        f.truncate(40 << 30)
elif case == 15:   # leaves the switch that makes its verifier refuse to grade
    answer(False); open("/workspace/.no-attempt", "w").write("gave up")
'''

VERIFY = r'''
import json, os, subprocess, sys, time
me, case = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
if case == 6:
    time.sleep(3)      # past the moment the agent's background process would have acted
if case == 10:
    raise SystemExit("verifier bug")
if case == 15 and os.path.exists("/workspace/.no-attempt"):   # a switch the agent can leave
    raise SystemExit("nothing to grade")
if case == 14:     # reads a workspace file whole; the limit stands in for the pod's memory limit
    import resource           # (the devcluster enforces none; a kubelet would OOM-kill it)
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    open("/workspace/big.bin", "rb").read()
tests = json.load(open("/verifier/tests.json"))
probe = "import json, sys; sys.path.insert(0, '/workspace'); from answer import add; print(json.dumps([add(a, b) for a, b, _ in %r]))" % tests
try:
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=10)
    got = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
except Exception:
    got = None
passed = got is not None and all(g == want for g, (_, _, want) in zip(got, tests))
seen = {"workspace": sorted(os.listdir("/workspace"))}
if case == 13:   # whose file the agent's code tried to take away (a kubelet's is root's, mode 0666)
    seen["termlog_owned"] = os.stat("/dev/termination-log").st_uid == os.getuid()
if os.path.exists("/workspace/found.json"):
    seen["found"] = json.load(open("/workspace/found.json"))
event = dict(event="reward", at=time.time(), episode_id=me, reward=1 if passed else 0, seen=seen)
if case in (1, 13):
    open("/dev/termination-log", "w").write(json.dumps(event) + "\n")
else:
    print(json.dumps(event))
'''

TESTS = json.dumps([[2, 3, 5], [-1, 1, 0], [10, 5, 15]])

# index -> (outcome, reason, reward, agent exit code, flags that must be present)
EXPECT = {
    0: ("succeeded", None, 1, 0, set()),
    1: ("succeeded", None, 1, 0, set()),
    2: ("succeeded", None, 0, 0, {"AgentRewardIgnored"}),
    3: ("succeeded", None, 0, 0, set()),
    4: ("succeeded", None, 0, 0, set()),
    5: ("succeeded", None, 0, 0, set()),
    6: ("succeeded", None, 0, 0, set()),
    7: ("succeeded", None, 1, 3, set()),
    8: ("succeeded", None, 0, 1, set()),
    9: ("succeeded", None, 0, 137, {"AgentTimedOut"}),
    # A verifier that fails on the agent's work is the agent's failure: reward 0, valid, counted.
    10: ("failed", "VerifierFailed", 0, 0, set()),
    11: ("failed", "NoReadyEvent", 0, 0, {"AgentRewardIgnored"}),
    12: ("failed", "VerifierFailed", 0, 0, set()),
    13: ("failed", "VerifierFailed", 0, 0, set()),   # or the chmod was refused: see below
    14: ("failed", "VerifierFailed", 0, 0, set()),
    15: ("failed", "VerifierFailed", 0, 0, set()),
}


def test_only_honest_work_earns_reward(operator_process, namespace):
    name = unique("verifier")
    body = episode_batch(name, AGENT, episodes=len(EXPECT), parallelism=6, minSuccessfulEpisodes=1,
                         episodeTimeoutSeconds=8, activeDeadlineSeconds=240,
                         verifier={"files": {"verify.py": VERIFY, "tests.json": TESTS}, "timeoutSeconds": 60})
    apply(body, namespace)
    obj = wait_finished(name, namespace, timeout=300, operator=operator_process)
    doc = json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])
    rows = {row["index"]: row for row in doc["pods"]}
    problems = []
    for i, (outcome, reason, reward, code, flags) in EXPECT.items():
        row = rows[i]
        if i == 13 and row["outcome"] == "succeeded":
            # A real kubelet makes the termination-message file root's (mode 0666): the agent's
            # chmod is refused, the verifier writes its reward there and grades the wrong answer
            # 0. Only a node that gives the container its own file lets the chmod through, and
            # then the verifier cannot report: VerifierFailed. Either way the agent gains nothing.
            assert (row.get("extra") or {}).get("seen", {}).get("termlog_owned") is False, row
            outcome, reason = "succeeded", None
        got = (row["outcome"], row["reason"], row["reward"], (row.get("agent") or {}).get("exit_code"))
        if got != (outcome, reason, reward, code) or not flags <= set(row.get("flags") or []):
            problems.append(f"{i}: got {got} flags {row.get('flags')} ({row.get('message')}), "
                            f"want {(outcome, reason, reward, code)} {flags}")
    assert not problems, "\n".join(problems)
    assert all(row["valid"] for row in rows.values())      # nobody abstained by failing
    # honest work is the only reward: 0, 1 and the crash-after-work 7; every failure counts 0
    assert obj["status"]["rewardSum"] == 3.0, obj["status"]
    assert obj["status"]["rewardMean"] == pytest.approx(3.0 / len(EXPECT), abs=1e-3), obj["status"]   # 3 decimals
    # the agent never saw the verifier's files; the reward files and rewritten tests were ignored
    assert rows[5]["extra"]["seen"]["found"] == []
    assert {"reward.json", "reward.txt"} <= set(rows[3]["extra"]["seen"]["workspace"])
    # the background process died with the agent phase: no late reward, no fixed answer
    assert "DuplicateReward" not in json.dumps(rows[6]) and rows[6]["reward"] == 0
    # a crashed or stopped agent keeps its last output; the timeout is on the row
    assert "agent blew up" in rows[8]["agent"]["output_tail"]
    assert rows[9]["agent"]["timed_out"] is True
    assert "verifier bug" in (rows[10].get("log_tail") or "")
    # index 1 used termination messages only: no log was read for it
    assert rows[1]["channel"] == "terminationMessage" and rows[1]["agent"]["channel"] == "terminationMessage"
    assert rows[0]["channel"] == "log" and rows[0]["agent"]["channel"] == "log"


def test_the_verified_shipping_fix_example_succeeds(operator_process, namespace):
    """examples/shipping-fix-verified.yaml as a user applies it: every agent fixes the bug and
    only the verifier's tests (its own files, not the workspace's) award the reward."""
    from tests.support.batches import load_example
    body = load_example("shipping-fix-verified.yaml")
    body["metadata"]["name"] = unique("verified")
    apply(body, namespace)
    obj = wait_finished(body["metadata"]["name"], namespace, timeout=300, operator=operator_process)
    st = obj["status"]
    assert (st["phase"], st["succeededEpisodes"], st["rewardSum"]) == ("Succeeded", 10, 10.0), st


GROUP_AGENT = r'''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
task = json.load(open(os.environ["EPISODE_INPUT"]))
open("/workspace/answer.txt", "w").write(str(task["a"] + task["b"]) if int(os.environ["EPISODE_SAMPLE"]) == 0 else "?")
'''
GROUP_VERIFY = r'''
import json, os, time
task = json.load(open(os.environ["EPISODE_INPUT"]))
answer = open("/workspace/answer.txt").read().strip()
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": os.environ["EPISODE_ID"],
                  "reward": 1 if answer == str(task["a"] + task["b"]) else 0}), flush=True)
'''


def test_a_verifier_grades_groups_of_samples(operator_process, namespace):
    """A verifier with groups: k samples per input, the verifier reads the group's input."""
    name = unique("vgroups")
    body = episode_batch(name, GROUP_AGENT, episodes=6, samplesPerInput=2, minSuccessfulEpisodes=1,
                         inputs=[{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}],
                         verifier={"command": ["python", "-B", "/verifier/verify.py"],
                                   "files": {"verify.py": GROUP_VERIFY}, "timeoutSeconds": 60})
    apply(body, namespace)
    obj = wait_finished(name, namespace, timeout=240, operator=operator_process)
    doc = json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])
    rewards = {r["index"]: r["reward"] for r in doc["pods"]}
    assert rewards == {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0, 4: 1.0, 5: 0.0}, doc["pods"]
    assert [g["reward_mean"] for g in doc["groups"]] == [0.5, 0.5, 0.5] and obj["status"]["rewardSum"] == 3.0


HANGING_VERIFY = r'''
import json, os, subprocess, sys, time
# the agent's code holds the verifier (here: a child that never ends, in a session of its own)
subprocess.run([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
'''


def test_a_hanging_verifier_is_stopped_at_its_timeout_not_the_pods_deadline(operator_process, namespace):
    """verifier.timeoutSeconds counts from the verifier's start: with episodeTimeoutSeconds 120
    and a quick agent, the pod's deadline alone let a 10 s verifier run ~135 s."""
    import time
    name = unique("vhang")
    body = episode_batch(name, AGENT, episodes=1, minSuccessfulEpisodes=0, episodeTimeoutSeconds=120,
                         activeDeadlineSeconds=300,
                         verifier={"files": {"verify.py": HANGING_VERIFY, "tests.json": TESTS}, "timeoutSeconds": 10})
    started = time.monotonic()
    apply(body, namespace)
    wait_finished(name, namespace, timeout=120, operator=operator_process)
    took = time.monotonic() - started
    doc = json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])
    (row,) = doc["pods"]
    assert (row["outcome"], row["reason"], row["valid"], row["reward"]) == ("failed", "VerifierFailed", True, 0.0), row
    assert "verifier.timeoutSeconds" in row["message"], row
    assert took < 60, f"the batch took {took:.0f} s"
