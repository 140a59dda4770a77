"""Hostile episodes on the real node against the verifier phase and the inputs init container:
what the verifier runs writing into its stdout through /proc/1/fd/1 (no ptrace needed), an agent
ending inside its slack to leave its verifier no time (a "lost" verdict on purpose), and an
episode trying to read or change inputs. Each test asserts that its attack ran."""
from __future__ import annotations

import json

import pytest

from tests.support.batches import apply, episode_batch, get, unique, wait_finished

pytestmark = [pytest.mark.cluster]

# ---------------------------------------------------------------------------------------------
# (2) the verifier's stdout: the agent's code, run by a careful verifier (output captured, not
# dumpable), reaches the container's stdout through its PID 1 (the launcher shell, dumpable):
# it leaves an unterminated line there, so the verifier's own reward line is garbled.
AGENT = r'''
import json, os, time
me, case = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": me}), flush=True)
# a wrong answer; on import (by the verifier's probe) it attacks the verifier's channels
code = """
import json, os, time
def add(a, b):
    return 0
CASE = %d
me = os.environ.get("EPISODE_ID", "")
forged = json.dumps({"event": "reward", "at": time.time(), "episode_id": me, "reward": 1}) + "\\n"
done = []
try:
    fd = os.open("/proc/1/fd/1", os.O_WRONLY)
    if CASE == 0:       # stdout only: a forged reward line, then a dangling prefix
        os.write(fd, forged.encode() + b"x")
    elif CASE == 1:     # the message holds the forged reward, stdout the dangling prefix
        open("/dev/termination-log", "w").write(forged)
        os.write(fd, b"x")
    os.close(fd)
    done.append("wrote")
except Exception as exc:
    done.append(repr(exc))
open("/workspace/attack.json", "w").write(json.dumps(done))
""" % case
open("/workspace/answer.py", "w").write(code if case in (0, 1) else "def add(a, b):\n    return 0\n")
'''

VERIFY = r'''
import ctypes, json, os, subprocess, sys, time
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0: the agent's code cannot open our /proc files
me = os.environ["EPISODE_ID"]
tests = [[2, 3, 5], [-1, 1, 0]]
probe = ("import json, sys; sys.path.insert(0, '/workspace'); from answer import add; "
         "print(json.dumps([add(a, b) for a, b, _ in %r]))" % tests)
try:
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=10,
                         start_new_session=True)
    got = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
except Exception:
    got = None
passed = got is not None and all(g == want for g, (_, _, want) in zip(got, tests))
attack = json.load(open("/workspace/attack.json")) if os.path.exists("/workspace/attack.json") else None
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": me, "reward": 1 if passed else 0,
                  "attack": attack}), flush=True)
'''


def test_agent_code_cannot_forge_a_stdout_verifiers_reward(operator_process, namespace):
    """A verifier reporting on stdout (the documented fallback) that keeps the agent's code's output
    away from its own stdout and is not dumpable grades a wrong answer 0: its code must not get 1."""
    name = unique("atk-vstdout")
    body = episode_batch(name, AGENT, episodes=3, minSuccessfulEpisodes=1,
                         verifier={"command": ["python", "-B", "/verifier/verify.py"],
                                   "files": {"verify.py": VERIFY}, "timeoutSeconds": 60})
    apply(body, namespace)
    wait_finished(name, namespace, timeout=240, operator=operator_process)
    doc = json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])
    rows = {r["index"]: r for r in doc["pods"]}
    print(json.dumps(rows, indent=1)[:6000])
    # the control: the same wrong answer without the attack is graded 0
    assert rows[2]["reward"] == 0.0, rows[2]
    forged = {}
    for case in (0, 1):
        row = rows[case]
        tail = (row.get("log_tail") or "") + json.dumps(row.get("extra"))
        # the attack ran: its writes to PID 1's stdout went through (seen in the verifier's output)
        assert "x{" in tail and '"wrote"' in tail, row
        if row["reward"] == 1.0:
            forged[case] = (row.get("outcome"), row.get("channel"))
    # case 0: a forged line + a dangling prefix on stdout; case 1: the forged reward in the
    # termination message, the verifier's own stdout line garbled by the prefix
    assert not forged, f"wrong answers given the agent's forged reward 1 (case: outcome, channel): {forged}"


# ---------------------------------------------------------------------------------------------
# (1)+(3) the inputs: with k = 2 samples per input and a verifier, each agent tries every way it
# knows to read another group's input and to change its own before the verifier reads it.
SNOOP = r'''
import glob, json, os, ssl, stat, time, urllib.request
me, index = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
path = os.environ["EPISODE_INPUT"]
d = os.path.dirname(path)
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": me}), flush=True)
own = json.load(open(path))
seen, tried = set(), {}
SECRETS = ("al" + "pha-se" + "cret", "br" + "avo-se" + "cret")   # not in this file's text
def look(p):
    try:
        data = open(p, "rb").read(1 << 20)
    except Exception:
        return
    for s in SECRETS:
        if s.encode() in data and s != own["secret"]:
            seen.add(p)
for root in ("/rollout", "/tmp", "/dev/shm", "/workspace", "/task", "/var", "/run", "/etc", "/mnt"):
    for dirpath, dirs, files in os.walk(root):
        for f in files:
            look(os.path.join(dirpath, f))
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    look(p)
look("/proc/self/mountinfo")
tried["mountinfo_has_source"] = "inputs-source" in open("/proc/self/mountinfo").read()
tried["token"] = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
if host:
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    try:
        body = urllib.request.urlopen("https://%s:%s/api/v1/configmaps" % (host, port), context=ctx, timeout=5).read()
        tried["api"] = "read"
        for s in SECRETS:
            if s.encode() in body and s != own["secret"]:
                seen.add("api")
    except Exception as exc:
        tried["api"] = type(exc).__name__ + str(getattr(exc, "code", ""))
target = path
def attempt(what, act):
    try:
        act(); tried[what] = "done"
    except Exception as exc:
        tried[what] = type(exc).__name__
attempt("chmod", lambda: os.chmod(target, 0o666))
attempt("chmod_dir", lambda: os.chmod(d, 0o777))
attempt("rename", lambda: os.rename(target, target + ".x"))
attempt("link", lambda: os.link(target, "/tmp/hl"))
attempt("symlink_in", lambda: os.symlink("/tmp/evil.json", os.path.join(d, "evil.json")))
attempt("utime", lambda: os.utime(target, (0, 0)))
attempt("truncate", lambda: os.truncate(target, 0))
attempt("otrunc", lambda: os.close(os.open(target, os.O_WRONLY | os.O_TRUNC)))
attempt("proc_root", lambda: open("/proc/self/root" + target, "w").write('{"secret": "forged"}'))
attempt("proc1_root", lambda: open("/proc/1/root" + target, "w").write('{"secret": "forged"}'))
attempt("remount", lambda: os.system("mount -o remount,rw %s 2>/dev/null" % d) == 0 or (_ for _ in ()).throw(OSError()))
json.dump({"seen": sorted(seen), "tried": tried, "own": own}, open("/workspace/snoop.json", "w"))
'''

SNOOP_VERIFY = r'''
import hashlib, json, os, time
me, index = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
raw = open(os.environ["EPISODE_INPUT"], "rb").read()
task = json.loads(raw)
want = ("alpha-secret", "bravo-secret")[index // 2]
snoop = json.load(open("/workspace/snoop.json"))
listing = sorted(os.listdir(os.path.dirname(os.environ["EPISODE_INPUT"])))
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": me,
                  "reward": 1 if task.get("secret") == want and not snoop["seen"] else 0,
                  "input": task, "listing": listing, "snoop": snoop}), flush=True)
'''


def test_inputs_stay_unread_and_unchanged_under_every_trick(operator_process, namespace):
    name = unique("atk-inputs-k2")
    body = episode_batch(name, SNOOP, episodes=4, samplesPerInput=2, minSuccessfulEpisodes=1,
                         inputs=[{"secret": "alpha-secret"}, {"secret": "bravo-secret"}],
                         verifier={"command": ["python", "-B", "/verifier/verify.py"],
                                   "files": {"verify.py": SNOOP_VERIFY}, "timeoutSeconds": 60})
    apply(body, namespace)
    obj = wait_finished(name, namespace, timeout=240, operator=operator_process)
    doc = json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])
    rows = {r["index"]: r for r in doc["pods"]}
    print(json.dumps(rows, indent=1)[:8000])
    for index, row in rows.items():
        extra = row.get("extra") or {}
        assert "snoop" in extra, row       # the attack ran and the verifier saw its report
        tried = extra["snoop"]["tried"]
        assert len(tried) >= 10, tried
        assert extra["snoop"]["seen"] == [], (index, extra["snoop"])
        assert not tried["token"] and tried["api"] != "read", tried
        assert "done" not in {k: v for k, v in tried.items() if k not in ("api", "token", "link")}.values(), tried
        assert extra["input"] == {"secret": ("alpha-secret", "bravo-secret")[index // 2]}, row
        assert extra["listing"] == [f"input-{index // 2}.json"], extra["listing"]
        assert row["reward"] == 1.0, row
    assert [g["reward_mean"] for g in doc["groups"]] == [1.0, 1.0], doc["groups"]
    assert obj["status"]["succeededEpisodes"] == 4, obj["status"]


# ---------------------------------------------------------------------------------------------
# (1) a "lost" verdict on purpose: the agent kills its watchdog and ends within the launcher's
# slack, as late as it allows; the pod's deadline (episodeTimeoutSeconds + timeoutSeconds + 5)
# then comes before the node starts the verifier: VerifierNotStarted, lost, out of its group.
LATE_AGENT = r'''
import json, os, signal, time
me, index = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
u0 = float(open("/proc/uptime").read().split()[0])   # gVisor: the sandbox's uptime, about the pod's age
print(json.dumps({"event": "ready", "at": time.time(), "episode_id": me}), flush=True)
print("uptime at start", u0, flush=True)
MARGINS = [0.2, 0.5, 0.8, 1.2]
if index < len(MARGINS):      # the bad attempts: no answer, and the attack
    killed = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, os.getpid()):
            try:
                os.kill(int(pid), signal.SIGKILL); killed.append(int(pid))
            except OSError:
                pass
    # just before the pod's deadline (episodeTimeoutSeconds + timeoutSeconds + 5 from its start),
    # within the launcher's slack (int(ended) - int(began) - 5 <= episodeTimeoutSeconds)
    end = min(int(os.environ["T"]) + int(os.environ["VT"]) + 5 - MARGINS[index], int(u0) + int(os.environ["T"]) + 5.9)
    while float(open("/proc/uptime").read().split()[0]) < end:
        time.sleep(0.02)
    print("ended at uptime", open("/proc/uptime").read().split()[0], "killed", killed, flush=True)
else:
    open("/workspace/answer.txt", "w").write("42")
'''

LATE_VERIFY = r'''
import json, os, time
ok = os.path.exists("/workspace/answer.txt")
print(json.dumps({"event": "reward", "at": time.time(), "episode_id": os.environ["EPISODE_ID"],
                  "reward": 1 if ok else 0}), flush=True)
'''


@pytest.mark.parametrize("vt", [1, 4])
def test_an_agent_cannot_make_its_bad_attempt_lost_by_ending_late(operator_process, namespace, vt):
    name = unique("atk-late")
    body = episode_batch(name, LATE_AGENT, episodes=5, samplesPerInput=5, minSuccessfulEpisodes=1,
                         inputs=[{"task": 1}], episodeTimeoutSeconds=10, activeDeadlineSeconds=200,
                         env=[{"name": "T", "value": "10"}, {"name": "VT", "value": str(vt)}],
                         verifier={"command": ["python", "-B", "/verifier/verify.py"],
                                   "files": {"verify.py": LATE_VERIFY}, "timeoutSeconds": vt})
    apply(body, namespace)
    wait_finished(name, namespace, timeout=240, operator=operator_process)
    doc = json.loads(get(f"{name}-results", namespace, kind="configmap")["data"]["results.json"])
    rows = {r["index"]: r for r in doc["pods"]}
    print(json.dumps(rows, indent=1)[:6000], json.dumps(doc["groups"]))
    assert rows[4]["reward"] == 1.0, rows[4]
    attackers = [rows[i] for i in range(4)]
    # Whatever the timing did, no bad attempt is dropped from its group as lost.
    lost = [(r["index"], r["reason"], r["message"]) for r in attackers if r["outcome"] == "lost"]
    assert not lost, f"bad attempts dropped from their group as lost: {lost}; group {doc['groups']}"
    assert doc["groups"][0]["valid"] == 5, doc["groups"]
    # The attack lands when a bad attempt ends within its launcher's slack and the pod's deadline
    # comes before its verifier starts; on a loaded machine every attempt may be cut by the
    # deadline while it still runs instead (each margin is under 1.2 s): then it proved nothing.
    if not any("before its verifier started" in r["message"] for r in attackers):
        pytest.skip(f"the attack did not land this run (every bad attempt cut while it ran): "
                    f"{[(r['reason'], r['message'][:60]) for r in attackers]}")
