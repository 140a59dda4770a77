"""A pool's prepare that leaves a process behind (a hostile review's attacks on the devcluster): the
process ran as the launcher's user into the warm wait, took the container's stdin (/proc/1/fd/0) from
the launcher's reader, answered the operator's pings, and read the episode handed over at the claim.
It then killed the reader for an input it did not like (the episode was lost, never counted: a
re-roll of a bad draw), or handed the launcher the script again with its time rewritten (the agent
ran 15 s past its time and its verifier's reward counted). The launcher now kills every process the
prepare left before the pod is warm (core.pool_delivery); the verdict checks a pooled phase's time by
the API's times as well (core.verdict.agent_overran). A later review made the pod look warm from the
prepare itself (it wrote the probe's file at once, was claimed while it ran, and did the same with no
process left behind), or left a FIFO where the launcher writes that file (every claim lost, the pool
Ready throughout), or wrote a whole delivery of its own into the container's stdin (/proc/1/fd/0) and
exited (the launcher ran it as PID 1 once warm, and every claim failed): the probe now waits for the
launcher's own stdin to be /dev/null, and after the prepare the launcher drops what is on its stdin
and empties its claim directory."""
from __future__ import annotations

import json
import secrets
import time

import pytest

from rolloutbatch.core import naming
from tests.e2e.test_pools import EPISODE, get_pool, pooled_batch, wait_pool
from tests.support.batches import apply, results, unique, wait_finished
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

# The process the prepare leaves: detached, it waits for the pod to be warm, stops the launcher's
# reader (the process whose stdin is the container's) and reads the delivery itself; {act} then
# decides what becomes of it (`first`: the length line; `body`: the script; `reader`: its pid).
LEFTOVER = r'''
import os, re, signal, time
stdin = os.open("/proc/1/fd/0", os.O_RDWR)
out = os.open("/proc/1/fd/1", os.O_WRONLY)
if os.fork():
    os._exit(0)
os.setsid()
while not os.path.exists("{claim}/warm"):
    time.sleep(0.01)
me = os.readlink(f"/proc/self/fd/{{stdin}}")
reader = None
while reader is None:
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, os.getpid()):
            try:
                if os.readlink(f"/proc/{{pid}}/fd/0") == me:
                    reader = int(pid)
            except OSError:
                pass
    time.sleep(0.005)
os.kill(reader, signal.SIGSTOP)
def line():
    b = b""
    while not b.endswith(b"\n"):
        b += os.read(stdin, 1)
    return b
while True:
    first = line()
    if first.strip() == b"ping":
        os.write(out, b"rolloutbatch: waiting for an episode\n")
        continue
    n, key = first.split()
    body = b""
    while len(body) < int(n):
        body += os.read(stdin, int(n) - len(body))
    break
{act}
'''
RE_ROLL = '''
if b'"r":0}' in body:                  # a hard draw: the hand-over fails, the episode is lost
    os.kill(reader, signal.SIGKILL)
else:                                  # an easy one: handed on untouched
    os.write(stdin, first + body)
    os.kill(reader, signal.SIGCONT)
'''
MORE_TIME = '''
body = re.sub(rb"ROLLOUTBATCH_TIMEOUT=[0-9]+", b"ROLLOUTBATCH_TIMEOUT=900", body)
os.write(stdin, b"%d %s\\n" % (len(body), key) + body)
os.kill(reader, signal.SIGCONT)
'''
SMALL = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}


def hostile_pool(namespace: str, size: int, act: str, **spec) -> str:
    name = unique("hprep")
    leftover = LEFTOVER.format(claim=naming.CLAIM_MOUNT_PATH, act=act)
    body = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": name},
            "spec": {"size": size, "task": {"files": {"episode.py": EPISODE, "leftover.py": leftover}},
                     "prepare": {"command": ["/bin/sh", "-c", "python3 /task/leftover.py < /dev/null > /dev/null 2>&1; "
                                             "echo warm-$EPISODE_ID > prepared"], "timeoutSeconds": 60},
                     "resources": SMALL, **spec}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    wait_pool(name, namespace, lambda st: st.get("readyPods") == size, timeout=120)
    return name


def test_a_prepares_leftover_cannot_make_an_episode_it_saw_lost(operator_process, namespace):
    pool = hostile_pool(namespace, 2, RE_ROLL)
    name = unique("reroll")
    try:
        apply(pooled_batch(name, pool, 2, parallelism=2, inputs=[{"r": 1}, {"r": 0}],
                           retries={"infrastructure": 0}), namespace)
        wait_finished(name, namespace, timeout=150, operator=operator_process)
        rows = sorted(results(name, namespace)["pods"], key=lambda r: r["index"])
    finally:
        kubectl("delete", "rolloutpool", pool, "-n", namespace, "--wait=false", check=False)
    assert [(row["outcome"], row["reward"]) for row in rows] == [("succeeded", 1.0), ("succeeded", 0.0)], rows


AGENT = '''
import json, os, time
print(json.dumps(dict(event="ready", at=time.time(), episode_id=os.environ["EPISODE_ID"])), flush=True)
time.sleep(25)                      # well past episodeTimeoutSeconds (10) and its 5 s slack
open("answer", "w").write("42")
'''
VERIFY = '''
import json, os, time
answer = open("/workspace/answer").read().strip() if os.path.exists("/workspace/answer") else ""
print(json.dumps(dict(event="reward", at=time.time(), episode_id=os.environ["EPISODE_ID"], reward=float(answer == "42"))))
'''


def test_a_prepares_leftover_cannot_lift_its_agents_time_limit(operator_process, namespace):
    pool = hostile_pool(namespace, 1, MORE_TIME, verifier={})
    name = unique("overtime")
    batch = pooled_batch(name, pool, 1, command=["python3", "-c", AGENT], retries={"infrastructure": 0},
                         verifier={"command": ["python3", "-c", VERIFY], "timeoutSeconds": 30})
    batch["spec"]["episodeTimeoutSeconds"] = 10
    try:
        apply(batch, namespace)
        wait_finished(name, namespace, timeout=150, operator=operator_process)
        row = results(name, namespace)["pods"][0]
    finally:
        kubectl("delete", "rolloutpool", pool, "-n", namespace, "--wait=false", check=False)
    # stopped at its time (graded on what it left then: nothing) or Timeout: never the late answer's 1.0
    assert row["reward"] == 0.0 and row["outcome"] in ("succeeded", "failed"), row
    assert row["outcome"] == "failed" or row["agent"]["timed_out"] is True, row


def test_a_prepare_that_writes_the_warm_file_is_not_claimable_until_it_ended(operator_process, namespace):
    """The probe's file alone was the prepare's to write: its pod counted warm and was claimed while
    the prepare still ran, and read the delivery from /proc/1/fd/0."""
    pool = unique("earlywarm")
    prepare = f": > {naming.CLAIM_MOUNT_PATH}/warm; sleep 60; : > prepared"
    body = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": pool},
            "spec": {"size": 2, "task": {"files": {"episode.py": EPISODE}},
                     "prepare": {"command": ["/bin/sh", "-c", prepare], "timeoutSeconds": 120}, "resources": SMALL}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    try:
        # Watched while both pods' prepares run (their containers running, the file written), for
        # 8 s: the probe runs each second. A deadline well inside the prepare's 60 s, so that a slow
        # start leaves no vacuous pass: the check must see the prepares run, or fail.
        made, seen, started, running_for = time.monotonic(), [], [], 0
        while running_for < 8:
            assert time.monotonic() - made < 45, f"the pool's pods never ran their prepare in time: {seen}"
            seen.append((get_pool(pool, namespace).get("status") or {}).get("readyPods") or 0)
            statuses = [c for pod in _pods(naming.pool_namespace(namespace, pool))
                        for c in (pod.get("status") or {}).get("containerStatuses") or []]
            started += [c["name"] for c in statuses if c.get("started")]
            running = [c for c in statuses if "running" in (c.get("state") or {})]
            running_for = running_for + 1 if len(running) >= 2 else 0
            time.sleep(1)
        assert max(seen) == 0 and not started, (seen, started)
        wait_pool(pool, namespace, lambda st: st.get("readyPods") == 2, timeout=120)
    finally:
        kubectl("delete", "rolloutpool", pool, "-n", namespace, "--wait=false", check=False)


def _pods(namespace: str) -> list[dict]:
    return json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]


def one_episode_on(operator_process, namespace: str, prepare: str, files: dict | None = None,
                   while_warm=lambda pool: None) -> list[dict]:
    """A pool of one pod whose prepare is ``prepare`` (sh), ``while_warm(pool)`` once it is warm,
    then one episode of a batch from it (no infrastructure retry): its rows."""
    pool = unique("hprep")
    body = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": pool},
            "spec": {"size": 1, "task": {"files": {"episode.py": EPISODE, **(files or {})}},
                     "prepare": {"command": ["/bin/sh", "-c", "echo warm > prepared; " + prepare],
                                 "timeoutSeconds": 60},
                     "resources": SMALL}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    name = unique("hprep")
    try:
        wait_pool(pool, namespace, lambda st: st.get("readyPods") == 1, timeout=180)
        while_warm(pool)
        apply(pooled_batch(name, pool, 1, parallelism=1, retries={"infrastructure": 0}), namespace)
        wait_finished(name, namespace, timeout=240, operator=operator_process)
        return results(name, namespace)["pods"]
    finally:
        kubectl("delete", "rolloutpool", pool, "-n", namespace, "--wait=false", check=False)


def outcomes(rows: list[dict]) -> list[tuple]:
    return [(row["outcome"], row.get("reason"), row.get("message")) for row in rows]


def test_a_fifo_the_prepare_left_as_the_warm_file_does_not_wedge_the_pool(operator_process, namespace):
    rows = one_episode_on(operator_process, namespace, f"mkfifo {naming.CLAIM_MOUNT_PATH}/warm")
    assert [row["outcome"] for row in rows] == ["succeeded"], outcomes(rows)


def test_a_delivery_the_prepare_left_on_the_stdin_never_runs(operator_process, namespace):
    """runc: under gVisor the prepare's write to /proc/1/fd/0 fails (EBADF), its pool PrepareFailed."""
    key = secrets.token_hex(16)
    script = ("set -- /bin/sh -c 'echo planted-script-ran-as-pid-1; exec sleep 86400'\n"
              f"ROLLOUTBATCH_EPISODE={key}\n")
    logs: list[str] = []

    def read_logs(pool: str) -> None:
        sandbox = naming.pool_namespace(namespace, pool)
        logs.extend(kubectl("logs", "-n", sandbox, p["metadata"]["name"], check=False).stdout for p in _pods(sandbox))

    rows = one_episode_on(operator_process, namespace, "cat /task/plant > /proc/1/fd/0",
                          files={"plant": f"{len(script.encode())} {key}\n{script}"}, while_warm=read_logs)
    assert logs and not any("planted-script-ran-as-pid-1" in log for log in logs), logs
    assert [row["outcome"] for row in rows] == ["succeeded"], outcomes(rows)
