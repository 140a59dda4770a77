"""An agent that fills its pod's process limit (the kubelet's podPidsLimit, 1024 on the devcluster)
so that the launchers that run after it (its own launcher, the verifier's) cannot fork, and one
that gets a process of its own killed for its memory. Under runc, where both reach the host.
(A review also ran these under `cube` and through a pool's pods, where they held; those runs
are not kept: minutes each.)

The promise: a hostile episode fails only itself, with its own failure counted (never lost or
retried, never graded a success), and never hurts a neighbour. Each batch runs honest neighbours
(index 0, 1) beside the hostile indexes; the bomb never tries to hold more than 3000 processes.
"""
from __future__ import annotations

import json

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.vocabulary import AGENT_OOM_KILLED_EXIT
from tests.support.batches import apply, episode_batch, results, unique, wait_finished
from tests.support.operator import kubectl
from tests.support.kube import wait_for

pytestmark = [pytest.mark.cluster]

# The bomb: sleeping processes (their stdio closed, so no pipe waits for them) until refused, at
# most 3000; then what the case says.
BOMB = r'''
import os, subprocess, sys, time, signal
def bomb():
    held, err = 0, ""
    try:
        while held < 3000:
            subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
            held += 1
    except OSError as exc:
        err = repr(exc)
    return held, err
def kill_all_but_me():
    """Every process of this container but PID 1 and this one: the watchdog too."""
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, me):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
'''

# Cases by EPISODE_INDEX: 0, 1 honest; 2 fills the limit, leaves its orphans and exits 0; 3 kills its
# watchdog, fills the limit and holds it until 2 s past its time, then exits 0 (orphans left);
# 4 fills the limit and exits 7 (its own failure).
AGENT = BOMB + r'''
import json
me, case = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
T = int(os.environ["T"])
start = time.monotonic()
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=me, **f)), flush=True)
emit("ready")
ws = os.environ.get("WS", "/workspace")
if case in (0, 1):
    open(ws + "/answer.py", "w").write("print('ok')\n")
    if os.environ.get("NOVERIFIER"):
        emit("reward", reward=1)
    sys.exit(0)
open(ws + "/answer.py", "w").write("print('bad')\n")
if case == 3:
    kill_all_but_me()
held, err = bomb()
print("held", held, err, flush=True)
if os.environ.get("NOVERIFIER"):
    emit("reward", reward=1)     # it claims success: its exit and its limit must decide
if case == 3:
    time.sleep(max(0, T + 2 - (time.monotonic() - start)))
sys.exit(7 if case == 4 else 0)
'''

VERIFY = r'''
import json, os, subprocess, sys, time
try:
    out = subprocess.run([sys.executable, "/workspace/answer.py"], capture_output=True, text=True, timeout=15).stdout
except Exception as exc:
    out = repr(exc)
print("verifier saw", out.strip()[:200], flush=True)
print(json.dumps(dict(event="reward", at=time.time(), episode_id=os.environ["EPISODE_ID"],
                      reward=1 if out.strip() == "ok" else 0)), flush=True)
'''

HOSTILE = (2, 3, 4)
# room for the bomb's processes: the pid limit, not the memory limit, must be what refuses them
ROOMY = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "768Mi"}}


def check(rows: dict, status: dict, pods: str = "", hostile=HOSTILE) -> None:
    """The neighbours succeeded with their reward; each hostile index is a counted attempt of its
    own (failed, or graded by its verifier with reward 0: never lost, never retried, never a reward)."""
    problems = []
    for index in (0, 1):
        if rows[index]["outcome"] != "succeeded" or rows[index].get("reward") != 1:
            problems.append(f"neighbour {index}: {rows[index]['outcome']}/{rows[index]['reason']} "
                            f"{rows[index].get('message')}")
    for index in hostile:
        row = rows.get(index)
        if row is None:
            problems.append(f"{index}: no row")
            continue
        if row["outcome"] not in ("failed", "succeeded") or row.get("reward") not in (0, 0.0) \
                or (row.get("attempts") or 1) != 1:
            problems.append(f"{index}: {row['outcome']}/{row['reason']} reward={row.get('reward')} "
                            f"attempts={row.get('attempts')} {row.get('message')!r} tail={row.get('log_tail')!r:.300}")
    if status.get("retriedEpisodes") or status.get("lostEpisodes"):
        problems.append(f"retriedEpisodes={status.get('retriedEpisodes')} lostEpisodes={status.get('lostEpisodes')}")
    assert not problems, json.dumps(dict(problems=problems, status={k: status.get(k) for k in (
        "phase", "succeededEpisodes", "failedEpisodes", "lostEpisodes", "retriedEpisodes")}, pods=pods))[:2900]


def test_a_job_agent_that_fills_its_pid_limit_fails_only_itself_with_a_verifier(operator_process, namespace):
    runtime = "runc"   # the host's pids: under gVisor the sandbox refuses with ENOMEM at ~490 first
    name = unique(f"pidv-{runtime}")
    apply(episode_batch(name, AGENT, episodes=5, minSuccessfulEpisodes=0, episodeTimeoutSeconds=25,
                        activeDeadlineSeconds=240, runtimeClassName=runtime, retries={"infrastructure": 2},
                        resources=ROOMY, env=[{"name": "T", "value": "25"}],
                        verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 40,
                                  "command": ["python", "-B", "/verifier/verify.py"]}), namespace)
    done = wait_finished(name, namespace, timeout=300, operator=operator_process)
    rows = {row["index"]: row for row in results(name, namespace)["pods"]}
    check(rows, done["status"])


# The same through memory alone, the way the bomb above ended under runc (its 1,000 processes passed
# the pod's 128Mi): one of the agent's processes is killed for its memory and the agent exits 0. The
# container runtime then reports the agent's init container `OOMKilled` (any process of its cgroup,
# not its PID 1, which exited 0), the kubelet counts an init container so reported as failed
# (kuberuntime isInitContainerFailed) and, restartPolicy Never, kills the pod: its verifier never
# starts, and the pod was seen Pending until its deadline. The verdict said VerifierNotStarted
# (lost, its index run again) until core.pod_reading.agent_init_oom_killed made it the agent's failure.
OOM_AGENT = r'''
import json, os, subprocess, sys, time
me, case = os.environ["EPISODE_ID"], int(os.environ["EPISODE_INDEX"])
print(json.dumps(dict(event="ready", at=time.time(), episode_id=me)), flush=True)
open("/workspace/answer.py", "w").write("print('%s')\n" % ("ok" if case in (0, 1) else "bad"))
if case == 2:   # its bad attempt: a child that asks for more memory than the pod has, killed for it
    subprocess.run([sys.executable, "-c", "x = bytearray(1 << 30)"])
sys.exit(0)
'''


def test_a_job_agent_cannot_make_its_attempt_lost_by_getting_a_child_oom_killed(operator_process, namespace):
    runtime = "runc"   # under gVisor the kill stays inside the sandbox: the agent is not reported OOMKilled
    name = unique(f"oomv-{runtime}")
    apply(episode_batch(name, OOM_AGENT, episodes=3, minSuccessfulEpisodes=0, episodeTimeoutSeconds=20,
                        activeDeadlineSeconds=200, runtimeClassName=runtime, retries={"infrastructure": 2},
                        cleanup={"sandbox": "Never"},
                        verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 30,
                                  "command": ["python", "-B", "/verifier/verify.py"]}), namespace)
    done = wait_finished(name, namespace, timeout=300, operator=operator_process)
    rows = {row["index"]: row for row in results(name, namespace)["pods"]}
    check(rows, done["status"], hostile=(2,))
    # The agent's launcher exits AGENT_OOM_KILLED_EXIT after its record: the kubelet fails the pod at
    # once, and the Job fails the index on that exit (its podFailurePolicy cannot read a reason).
    # With exit 0 the kubelet kept the pod Pending until the operator's deadline ended it, and only
    # the never-started verifier's exit code (137, "could not be located") kept the Job from
    # counting it against backoffLimitPerIndex and running the agent again. The batch is finished
    # before the Job's status says so.
    selector = f"{naming.LABEL_BATCH_UID}={done['metadata']['uid']}"

    def job_status() -> dict:
        jobs = json.loads(kubectl("get", "jobs", "-A", "-o", "json", "-l", selector).stdout)["items"]
        assert len(jobs) == 1, jobs
        return jobs[0].get("status") or {}
    # failedIndexes is written before the failed pod is counted: the Job controller lists it in
    # uncountedTerminatedPods first, then removes its finalizer, then counts it (a second write)
    status = wait_for(lambda: (s := job_status()).get("failedIndexes") == "2"
                      and not (s.get("uncountedTerminatedPods") or {}).get("failed") and s, timeout=150,
                      what="the Job to fail index 2 and count its pods")
    assert status.get("failed") == 1, status
    pods = json.loads(kubectl("get", "pods", "-A", "-o", "json", "-l", selector).stdout)["items"]
    hostile = [p for p in pods if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == "2"]
    agent = [c["state"].get("terminated") or {} for p in hostile for c in p["status"].get("initContainerStatuses") or []
             if c["name"] == naming.AGENT_CONTAINER]
    assert [(p["status"].get("phase"), p["status"].get("reason")) for p in hostile] == [("Failed", None)] \
        and [(a.get("reason"), a.get("exitCode")) for a in agent] == [("OOMKilled", AGENT_OOM_KILLED_EXIT)], \
        json.dumps([p["status"] for p in hostile])[:2500]


def test_a_job_agents_fork_bomb_at_the_default_resources_does_not_make_its_attempt_lost(operator_process,
                                                                                         namespace):
    """The bomb of the first test at a batch's default resources (128Mi) under runc: its processes
    pass the memory limit before the pid limit, the runtime reports the agent's init container
    OOMKilled, and the kubelet kills the pod before its verifier (see OOM_AGENT)."""
    name = unique("pidd-runc")
    apply(episode_batch(name, AGENT, episodes=3, minSuccessfulEpisodes=0, episodeTimeoutSeconds=20,
                        activeDeadlineSeconds=200, runtimeClassName="runc", retries={"infrastructure": 2},
                        env=[{"name": "T", "value": "20"}],
                        verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 30,
                                  "command": ["python", "-B", "/verifier/verify.py"]}), namespace)
    done = wait_finished(name, namespace, timeout=300, operator=operator_process)
    rows = {row["index"]: row for row in results(name, namespace)["pods"]}
    check(rows, done["status"], hostile=(2,))
