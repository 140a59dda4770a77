"""RolloutPool on the devcluster (core.pools, service.pools, service.pool_claims): a pool fills
with warm pods; a batch claims them (hits) and runs the rest cold (misses); every episode is
judged as a Job episode is; a pool whose image cannot run says so; a missing pool stalls the batch
before anything is claimed.
"""
from __future__ import annotations

import json
import pathlib
import time

import pytest
import yaml

from devcluster.nodeconfig import PAUSE_IMAGE   # an image with no /bin/sh, on every node
from rolloutbatch.core import naming, pool_delivery
from rolloutbatch.core.model import BatchRef
from tests.support.batches import apply, condition, results, unique, wait_finished, wait_status
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]
ROOT = pathlib.Path(__file__).resolve().parents[2]

EPISODE = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
prepared = open("prepared").read().strip()
inp = json.load(open(os.environ["EPISODE_INPUT"])) if os.environ.get("EPISODE_INPUT") else {}
emit("reward", reward=float(inp.get("r", 1)), prepared=prepared, index=int(os.environ["EPISODE_INDEX"]),
     group=int(os.environ["EPISODE_GROUP"]), sample=int(os.environ["EPISODE_SAMPLE"]), foo=os.environ.get("FOO"))
'''


def pool(name: str, size: int, image: str | None = None) -> dict:
    spec: dict = {"size": size, "task": {"files": {"episode.py": EPISODE}},
                  "prepare": {"command": ["/bin/sh", "-c", "echo warm-$EPISODE_ID > prepared"], "timeoutSeconds": 60},
                  "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}}
    if image:
        spec["image"] = image
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": name},
            "spec": spec}


def get_pool(name: str, namespace: str) -> dict:
    return json.loads(kubectl("get", "rolloutpool", name, "-n", namespace, "-o", "json").stdout)


def wait_pool(name: str, namespace: str, ok, timeout: float = 120) -> dict:
    end = time.monotonic() + timeout
    obj: dict = {}
    while time.monotonic() < end:
        obj = get_pool(name, namespace)
        if ok(obj.get("status") or {}):
            return obj
        time.sleep(0.5)
    raise AssertionError(f"pool {name} never got there: {obj.get('status')}")


def pooled_batch(name: str, pool_name: str, episodes: int, **spec) -> dict:
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": name},
            "spec": {"episodes": episodes, "poolRef": {"name": pool_name}, "episodeTimeoutSeconds": 120, **spec}}


def test_a_batch_claims_warm_pods_and_runs_the_rest_cold(operator_process, namespace):
    pool_name = unique("pool")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pool(pool_name, 3)))
    full = wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 3, timeout=180)
    assert condition(full, "Ready")["status"] == "True"
    sandbox = full["status"]["sandboxNamespace"]
    assert sandbox == naming.pool_namespace(namespace, pool_name)

    name = unique("pooled")
    inputs = [{"r": 0.5}, {"r": 0.25}]
    apply(pooled_batch(name, pool_name, 4, samplesPerInput=2, inputs=inputs, env=[{"name": "FOO", "value": "it's $x"}]),
          namespace)
    done = wait_finished(name, namespace, timeout=240, operator=operator_process)
    status = done["status"]
    assert status["phase"] == "Succeeded" and status["succeededEpisodes"] == 4, status
    assert status["rewardSum"] == pytest.approx(0.5 + 0.5 + 0.25 + 0.25)
    # the claim figures: 3 hits, 1 miss, each row's own, and the hits' percentiles
    assert (status["pool"]["hits"], status["pool"]["misses"]) == (3, 1), status
    assert status["pool"]["claimSeconds"]["p50"] is not None, status
    document = results(name, namespace)
    rows = sorted(document["pods"], key=lambda r: r["index"])
    assert sorted(row["pool"]["hit"] for row in rows) == [False, True, True, True], rows
    assert (document["pool_hits"], document["pool_misses"]) == (3, 1)
    for row in rows:
        extra = row["extra"]
        assert extra["index"] == row["index"] and extra["group"] == row["index"] // 2
        assert extra["sample"] == row["index"] % 2 and extra["foo"] == "it's $x"
        assert extra["prepared"].startswith("warm-")   # the pool's prepare ran in the episode's pod
    events = json.loads(kubectl("get", "events", "-n", namespace, "--field-selector", "reason=ClaimedFromPool",
                                "-o", "json").stdout)["items"]
    assert events and events[0]["message"].startswith("3 of the first 4"), events
    # the pool refills behind the claims
    wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 3, timeout=180)

    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=true", "--timeout=120s")
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=180s")
    end = time.monotonic() + 120
    while kubectl("get", "namespace", sandbox, check=False).returncode == 0:
        assert time.monotonic() < end, f"the pool's namespace {sandbox} outlived the pool"
        time.sleep(1)


def test_later_waves_claim_warm_pods_as_they_start(operator_process, namespace):
    """Past the first wave (parallelism 2 of 4), each index the Job starts claims a warm pod: its
    gated cold pod never reaches a node, and every row is a hit."""
    pool_name = unique("waves")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pool(pool_name, 4)))
    full = wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 4, timeout=240)
    sandbox = full["status"]["sandboxNamespace"]
    name = unique("waves")
    apply(pooled_batch(name, pool_name, 4, parallelism=2), namespace)
    done = wait_finished(name, namespace, timeout=240, operator=operator_process)
    status = done["status"]
    assert status["phase"] == "Succeeded" and status["succeededEpisodes"] == 4, status
    assert (status["pool"]["hits"], status["pool"]["misses"]) == (4, 0), status
    rows = sorted(results(name, namespace)["pods"], key=lambda r: r["index"])
    assert [row["pool"]["hit"] for row in rows] == [True] * 4, rows
    assert all(row["extra"]["prepared"].startswith("warm-") for row in rows), rows
    # the Job's gated pods were deleted unscheduled: no pod of the batch ran on a node but the claims
    events = json.loads(kubectl("get", "events", "-n", sandbox, "--field-selector", "reason=Scheduled",
                                "-o", "json").stdout)["items"]
    job = naming.job_name(BatchRef(namespace=namespace, name=name, uid=done["metadata"]["uid"], generation=1))
    cold = sorted(e["involvedObject"]["name"] for e in events if e["involvedObject"]["name"].startswith(f"{job}-"))
    assert cold == [], f"cold pods of the Job were scheduled: {cold}"
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=true", "--timeout=120s")
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=180s")


def test_the_pool_example_runs_as_a_user_applies_it(operator_process, namespace):
    """examples/shipping-fix-pool.yaml, applied in one go: the pool warms, the batch waits for it
    and claims every episode from it, and the verifier it brings grades each agent's fix (applied
    together with the default whenEmpty, Cold, the batch ran every episode cold)."""
    pool_doc, batch_doc = yaml.safe_load_all((ROOT / "examples" / "shipping-fix-pool.yaml").read_text())
    pool_doc["metadata"]["name"] = pool_name = unique("expool")
    batch_doc["metadata"]["name"], batch_doc["spec"]["poolRef"]["name"] = unique("expooled"), pool_name
    size = pool_doc["spec"]["size"]
    both = {"apiVersion": "v1", "kind": "List", "items": [pool_doc, batch_doc]}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(both))
    try:
        done = wait_finished(batch_doc["metadata"]["name"], namespace, timeout=300, operator=operator_process)
        status = done["status"]
        assert (status["phase"], status["succeededEpisodes"], status["rewardSum"]) == ("Succeeded", size, size), status
        assert status["pool"]["hits"] == size and status["pool"]["misses"] == 0, status   # every episode a hit
        rows = results(batch_doc["metadata"]["name"], namespace)["pods"]
        assert all(row["pool"]["hit"] and row["pool"]["claim_seconds"] >= 0 for row in rows), rows
    finally:
        kubectl("delete", "rolloutbatch", batch_doc["metadata"]["name"], "-n", namespace, "--wait=false", check=False)
        kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=false", check=False)

def test_a_batch_waiting_for_its_pool_says_why_in_its_status_and_its_watch(operator_process, namespace, tmp_path):
    """A new user's review: `submit --pool --watch` of a batch waiting for an empty pool showed only
    `Provisioning 0/2` until its timeout; a batch waiting for a pool no node can place said only how
    many pods were ready, for the 300 s before the pool stalls. The watch now shows the status's
    reason and message; the batch's message quotes the pool's while it is short."""
    from tests.e2e.test_cli import cli
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pool("empty", 0)))
    huge = pool("huge", 1)
    huge["spec"]["resources"] = {"requests": {"cpu": "64", "memory": "32Mi"},          # no node has 64 cores
                                 "limits": {"cpu": "64", "memory": "128Mi"}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(huge))
    wait_pool("empty", namespace, lambda st: st.get("readyPods") == 0 and st.get("sandboxNamespace"), timeout=60)
    batch = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": "waits"},
             "spec": {"episodes": 2, "command": ["python", "/task/episode.py"], "episodeTimeoutSeconds": 60,
                      "poolRef": {"whenEmpty": "Wait"}}}
    (tmp_path / "batch.yaml").write_text(json.dumps(batch))
    run = cli("submit", "-f", str(tmp_path / "batch.yaml"), "--pool", "empty", "-n", namespace, "--watch",
              "--timeout", "15", timeout=60)
    assert run.returncode == 3, run.stdout + run.stderr                      # timed out, as asked
    assert "WaitingForPool: waiting for RolloutPool empty" in run.stdout, run.stdout
    wait_pool("huge", namespace, lambda st: "not placed yet" in (st.get("message") or ""), timeout=60)
    apply(pooled_batch("w", "huge", 1, poolRef={"name": "huge", "whenEmpty": "Wait"}), namespace)
    status = wait_status("w", namespace, lambda st: "Insufficient cpu" in (st.get("message") or ""),
                         timeout=60)["status"]
    assert status["reason"] == "WaitingForPool" and "the pool says:" in status["message"], status
    for name in ("waits", "w"):
        kubectl("patch", "rolloutbatch", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"stop":true}}')

def test_under_the_sandbox_runtime_each_pod_gets_its_episode_on_its_stdin(operator_process, namespace):
    """Under gVisor (`cube`) an attach reaches the container's stdin through gVisor's shim, as under
    runc: both episodes are warm hits, and each pod's log begins with the launcher's lines (its
    answer to the operator's ping, then the episode received) before the episode's own."""
    pool_name = unique("pool")
    body = pool(pool_name, 2)
    body["spec"]["runtimeClassName"] = "cube"
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    full = wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 2, timeout=240)
    name = unique("pooled")
    apply(pooled_batch(name, pool_name, 2, cleanup={"sandbox": "Never"}), namespace)   # its pods stay to be read
    done = wait_finished(name, namespace, timeout=240, operator=operator_process)
    assert done["status"]["phase"] == "Succeeded" and done["status"]["succeededEpisodes"] == 2, done["status"]
    pods = json.loads(kubectl("get", "pods", "-n", full["status"]["sandboxNamespace"], "-l",
                              f"{naming.LABEL_BATCH_UID}={done['metadata']['uid']}", "-o", "json").stdout)["items"]
    assert len(pods) == 2 and all(p["spec"]["runtimeClassName"] == "cube" for p in pods)
    assert all(naming.ANNOTATION_CLAIMED_AT in p["metadata"]["annotations"] for p in pods)   # warm hits
    for p in pods:
        log = kubectl("logs", p["metadata"]["name"], "-n", p["metadata"]["namespace"]).stdout.splitlines()
        # one answer per ping the operator sent before it heard one (a ping is sent again after 20 ms,
        # and under gVisor the first answer can take longer), then the hand-over's line
        pongs = next(i for i, line in enumerate(log) if line != pool_delivery.PONG)
        assert pongs >= 1 and log[pongs] == pool_delivery.RECEIVED, log[:pongs + 2]
        assert json.loads(log[pongs + 1])["event"] == "ready"
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=true", "--timeout=120s")
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=180s")


# 2 MiB of build output: past the 1 MiB an episode's log read takes, and below nothing else
VERBOSE = "i=0; while [ $i -lt 16384 ]; do printf '%0127d\\n' $i; i=$((i+1)); done"


def test_a_verbose_prepare_costs_the_episodes_nothing_and_a_failing_one_says_why(operator_process, namespace):
    """On the real node: the prepare's output stays out of the container's log that each
    episode's verdict reads (it would spend the episode's byte budget); one that fails stalls the
    pool with PrepareFailed, its last words in the pod's log and in the condition."""
    pool_name = unique("verbose")
    body = pool(pool_name, 2)
    body["spec"]["prepare"]["command"] = ["/bin/sh", "-c", VERBOSE + "; echo warm-$EPISODE_ID > prepared"]
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 2, timeout=180)
    name = unique("verbose")
    apply(pooled_batch(name, pool_name, 2), namespace)
    done = wait_finished(name, namespace, timeout=180, operator=operator_process)
    assert (done["status"]["phase"], done["status"]["succeededEpisodes"]) == ("Succeeded", 2), done["status"]
    kubectl("delete", "rolloutbatch", name, "-n", namespace, "--wait=true", "--timeout=120s")
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=180s")

    failing = unique("failprep")
    body = pool(failing, 1)
    body["spec"]["prepare"]["command"] = ["/bin/sh", "-c", VERBOSE + "; echo the-last-words; exit 3"]
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    stalled = wait_pool(failing, namespace, lambda st: any(c.get("type") == "Stalled" and c.get("status") == "True"
                                                           for c in st.get("conditions") or []), timeout=120)
    said = condition(stalled, "Stalled")
    assert said["reason"] == "PrepareFailed", stalled["status"]
    # the condition quotes how the prepare ended and its last words (the pod's termination message)
    assert "exited 3" in said["message"] and "the-last-words" in said["message"], said
    kubectl("delete", "rolloutpool", failing, "-n", namespace, "--wait=true", "--timeout=120s")


def test_a_pool_whose_image_cannot_run_says_so(operator_process, namespace):
    pool_name = unique("badpool")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pool(pool_name, 1, image="no-such-image:0")))
    stalled = wait_pool(pool_name, namespace,
                        lambda st: any(c.get("type") == "Stalled" and c.get("status") == "True"
                                       for c in st.get("conditions") or []), timeout=120)
    assert condition(stalled, "Stalled")["reason"] == "ImagePullFailed"
    assert condition(stalled, "Ready")["status"] == "False"
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=120s")


def test_a_pool_whose_container_cannot_start_stalls_not_churns(operator_process, namespace):
    """An image without /bin/sh (the launcher's shell): the runtime's StartError, in the pool's
    status, its Event and `kubectl get rp`; no pod made and deleted every round."""
    pool_name = unique("nosh")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pool(pool_name, 2, image=PAUSE_IMAGE)))
    # Stalled with the runtime's reason: on a cluster the other tests fill, a pod may first find no
    # room (kept pending) before a node takes it
    stalled = wait_pool(pool_name, namespace, lambda st: any(
        c.get("type") == "Stalled" and c.get("reason") == "ContainerCannotStart" for c in st.get("conditions") or []),
        timeout=180)
    assert "/bin/sh" in condition(stalled, "Stalled")["message"]
    assert condition(stalled, "Ready")["status"] == "False" and condition(stalled, "Reconciling")["status"] == "False"
    assert "ContainerCannotStart" in kubectl("get", "rp", pool_name, "-n", namespace).stdout
    def pod_names() -> set[str]:
        listed = json.loads(kubectl("get", "pods", "-n", stalled["status"]["sandboxNamespace"], "-o", "json").stdout)
        return {p["metadata"]["name"] for p in listed["items"]}
    before = pod_names()
    time.sleep(5)   # rounds go on (0.5 s apart while short): none makes a pod
    assert pod_names() <= before
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=120s")


def test_a_pool_whose_pods_no_node_can_place_keeps_them_pending_and_says_why(operator_process, namespace):
    """Requests no node can meet: the real scheduler's words in the pool's message while it fills,
    and its pods kept pending (a cluster autoscaler adds a node for a pending pod), not replaced."""
    pool_name = unique("huge")
    body = pool(pool_name, 1)
    body["spec"]["resources"] = {"requests": {"cpu": "10m", "memory": "4000Gi"}, "limits": {"memory": "4000Gi"}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    filling = wait_pool(pool_name, namespace, lambda st: "not placed yet" in (st.get("message") or ""), timeout=60)
    assert "Insufficient memory" in filling["status"]["message"], filling["status"]
    assert condition(filling, "Ready")["reason"] == "PoolFilling"
    assert condition(filling, "Reconciling")["status"] == "True"
    listed = lambda: {p["metadata"]["uid"] for p in json.loads(kubectl(   # noqa: E731
        "get", "pods", "-n", filling["status"]["sandboxNamespace"], "-o", "json").stdout)["items"]}
    before = listed()
    time.sleep(5)
    assert listed() == before and len(before) == 1   # the same pod, still pending
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=120s")


def test_a_pool_whose_runtime_class_is_missing_says_so(operator_process, namespace):
    """`kubectl wait --for=condition=Stalled` names the cause the CRD documents, and no pod is made
    for the RuntimeClass admission plugin to refuse."""
    pool_name = unique("norc")
    body = pool(pool_name, 1)
    body["spec"]["runtimeClassName"] = "no-such-class"
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    kubectl("wait", f"rolloutpool/{pool_name}", "-n", namespace, "--for=condition=Stalled", "--timeout=60s")
    stalled = get_pool(pool_name, namespace)
    assert condition(stalled, "Stalled")["reason"] == "RuntimeClassNotFound", stalled["status"]
    assert condition(stalled, "Ready")["status"] == "False"
    pods = json.loads(kubectl("get", "pods", "-n", stalled["status"]["sandboxNamespace"], "-o", "json").stdout)
    assert pods["items"] == []
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=true", "--timeout=120s")


def test_a_missing_pool_stalls_the_batch_before_anything_is_claimed(operator_process, namespace):
    name = unique("nopool")
    apply(pooled_batch(name, "no-such-pool", 2), namespace)
    done = wait_status(name, namespace, lambda st: st.get("phase") == "Failed", timeout=60)
    assert done["status"]["reason"] == "PoolNotFound", done["status"]


AGENT = '''
import json, os, pathlib, subprocess, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
pathlib.Path("saw").write_text(str(os.path.exists("/verifier") and bool(os.listdir("/verifier"))))
pathlib.Path("answer").write_text("42" if int(os.environ["EPISODE_INDEX"]) % 2 == 0 else "41")
# left running: killed with the agent's phase, so it cannot rewrite the answer under the verifier
subprocess.Popen(["/bin/sh", "-c", "sleep 3; echo 42 > answer"], start_new_session=True)
# the code the verifier runs (it imports it): it rewrites the verifier's truth to its own answer
pathlib.Path("solution.py").write_text(
    "import pathlib\\n"
    "try:\\n"
    "    pathlib.Path('/verifier/expected').write_text(pathlib.Path('/workspace/answer').read_text())\\n"
    "    FORGED = 'rewritten'\\n"
    "except OSError as exc:\\n"
    "    FORGED = exc.strerror\\n")
emit("reward", reward=100)   # an agent's own reward: ignored
'''
VERIFY = '''
import json, os, pathlib, sys, time
time.sleep(4)
ws = pathlib.Path(os.environ["WORKSPACE"])
answer = (ws / "answer").read_text().strip()
sys.path.insert(0, str(ws))
import solution   # the agent's code, run as the verifier's UID, before the verifier reads its truth
expected = (pathlib.Path(__file__).parent / "expected").read_text().strip()
print(json.dumps(dict(event="reward", at=time.time(), episode_id=os.environ["EPISODE_ID"], reward=float(answer == expected),
                      saw=(ws / "saw").read_text(), grade=os.environ.get("GRADE"), index=int(os.environ["EPISODE_INDEX"]),
                      forged=solution.FORGED)))
'''


def test_a_pool_with_a_verifier_grades_every_episode_the_agent_cannot_forge(operator_process, namespace):
    """The verifier phase in a pool's pods: the agent's reward is ignored, the verifier's counts; the
    agent never sees the verifier's files, and what it left running is gone before grading; the
    agent's code the verifier runs (as its UID) cannot rewrite the verifier's files, which its own
    container writes (naming.VERIFIER_FILES_CONTAINER). Three episodes from a pool of two: one of
    them cold, judged alike."""
    pool_name = unique("vpool")
    body = pool(pool_name, 2)
    body["spec"]["verifier"] = {}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 2, timeout=180)

    name = unique("verified")
    apply(pooled_batch(name, pool_name, 3, parallelism=3, command=["python", "-c", AGENT],
                       env=[{"name": "WORKSPACE", "value": "/workspace"}],
                       verifier={"files": {"verify.py": VERIFY, "expected": "42"}, "timeoutSeconds": 60,
                                 "env": [{"name": "GRADE", "value": "strict"},
                                         {"name": "WORKSPACE", "value": "/workspace"}]}), namespace)
    done = wait_finished(name, namespace, timeout=300, operator=operator_process)
    status = done["status"]
    assert status["phase"] == "Succeeded" and status["succeededEpisodes"] == 3, status
    assert status["rewardSum"] == 2.0, status     # episodes 0 and 2; the agents' 100s count nowhere
    rows = sorted(results(name, namespace)["pods"], key=lambda r: r["index"])
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0]
    for row in rows:
        assert "AgentRewardIgnored" in row["flags"], row
        assert row["extra"]["saw"] == "False" and row["extra"]["grade"] == "strict", row
        assert row["extra"]["index"] == row["index"]
        assert row["extra"]["forged"] == "Read-only file system", row
    events = json.loads(kubectl("get", "events", "-n", namespace, "--field-selector", "reason=ClaimedFromPool",
                                "-o", "json").stdout)["items"]
    assert events and events[0]["message"].startswith("2 of the first 3"), events

    # a batch without a verifier cannot take such a pool's pods
    plain = unique("plain")
    apply(pooled_batch(plain, pool_name, 1), namespace)
    refused = wait_status(plain, namespace, lambda st: st.get("phase") == "Failed", timeout=60)
    assert refused["status"]["reason"] == "PoolConflict", refused["status"]
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=false")


def test_inputs_by_reference_reach_each_pooled_episode(operator_process, namespace):
    """spec.inputsFrom on a pooled batch: the opted-in ConfigMap is copied (the batch's own, so a
    change to the original mid-batch changes nothing) and each episode is handed its group's input."""
    pool_name = unique("ipool")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pool(pool_name, 2)))
    wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 2, timeout=180)
    tasks = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "tasks", "labels": {naming.LABEL_INPUTS: naming.INPUTS_OPT_IN}},
             "data": {"input-0.json": json.dumps({"r": 0.5}), "input-1.json": json.dumps({"r": 0.25})}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(tasks))
    name = unique("byref")
    apply(pooled_batch(name, pool_name, 2, parallelism=2, inputsFrom={"configMaps": ["tasks"], "count": 2}), namespace)
    done = wait_finished(name, namespace, timeout=240, operator=operator_process)
    assert done["status"]["phase"] == "Succeeded" and done["status"]["rewardSum"] == pytest.approx(0.75), done["status"]
    rows = sorted(results(name, namespace)["pods"], key=lambda r: r["index"])
    assert [r["reward"] for r in rows] == [0.5, 0.25]
    kubectl("delete", "rolloutpool", pool_name, "-n", namespace, "--wait=false")
