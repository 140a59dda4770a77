"""Hostile episodes: each fails only itself, with the right reason, and the operator stays small.

One batch runs every case side by side with two well-behaved episodes; the case is chosen by
EPISODE_INDEX. Escape attempts exit 3 when the sandbox stops them (the expected outcome) and
claim a reward with "escaped" when it does not, so a broken sandbox shows up as a success.
"""
from __future__ import annotations

import pytest

from tests.support.batches import apply, episode_batch, results, unique, wait_finished
from tests.support.operator import STATE, kubectl

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CASES = [  # (index, case name, expected outcome, expected reason)
    (0, "good", "succeeded", None),
    (1, "good", "succeeded", None),
    (2, "other-id", "failed", "IdentityMismatch"),
    (3, "two-rewards", "failed", "DuplicateReward"),
    (4, "no-ready", "failed", "NoReadyEvent"),
    (5, "nan-reward", "failed", "InvalidReward"),
    (6, "infinite-reward", "failed", "InvalidReward"),
    (7, "string-reward", "failed", "InvalidReward"),
    (8, "eight-mib", "failed", "LogLimitExceeded"),
    (9, "one-mib-line", "failed", "NoReadyEvent"),
    (10, "invalid-utf8-id", "failed", "IdentityMismatch"),
    (11, "reward-before-ready", "failed", "RewardBeforeReady"),
    (12, "sleep-forever", "failed", "Timeout"),
    (13, "write-outside", "failed", "NonZeroExit"),
    (14, "read-host", "failed", "NonZeroExit"),
    (15, "network", "failed", "NonZeroExit"),
    (16, "find-token", "failed", "NonZeroExit"),
    # Past the kubelet's rotation size (containerLogMaxSize, 10 MiB: devcluster/nodeconfig.py): a
    # real kubelet may rotate the log while it runs and then serves only the file written since,
    # which starts past the ready line. Either way it never succeeds (docs/design.md, §4).
    (17, "fifty-mib", "failed", ("LogLimitExceeded", "NoReadyEvent")),
]

PROGRAM = r'''
import json, os, socket, sys, time
me = os.environ["EPISODE_ID"]
case = int(os.environ["EPISODE_INDEX"])
out = sys.stdout.buffer
def emit(e, who=None, **f):
    out.write(json.dumps(dict(event=e, at=time.time(), episode_id=who or me, **f)).encode() + b"\n"); out.flush()
def blocked(what):
    print("blocked:", what, flush=True)
def escaped(what):
    emit("ready"); emit("reward", reward=1, escaped=what); sys.exit(0)

if case in (0, 1):
    emit("ready"); emit("reward", reward=1)
elif case == 2:
    emit("ready"); emit("reward", who=me[:-1] + ("x" if me[-1] != "x" else "y"), reward=1)
elif case == 3:
    emit("ready"); emit("reward", reward=1); emit("reward", reward=1)
elif case == 4:
    emit("reward", reward=1)
elif case == 5:
    emit("ready"); out.write(('{"event":"reward","at":%f,"episode_id":"%s","reward":NaN}\n' % (time.time(), me)).encode())
elif case == 6:
    emit("ready"); out.write(('{"event":"reward","at":%f,"episode_id":"%s","reward":Infinity}\n' % (time.time(), me)).encode())
elif case == 7:
    emit("ready"); emit("reward", reward="1")
elif case in (8, 17):
    # 8 MiB (plus CRI's line prefixes) stays under the 10 MiB rotation size; 50 MiB may not
    emit("ready")
    line = b"y" * 1023 + b"\n"
    for _ in range((8 if case == 8 else 50) * 1024):
        out.write(line)
    emit("reward", reward=1)
elif case == 9:
    out.write(b'{"event":"ready","at":1,"episode_id":"' + me.encode() + b'","pad":"' + b"z" * 1000000 + b'"}\n')
    emit("reward", reward=1)
elif case == 10:
    bad = me.encode() + b"\xff\xfe"
    out.write(b'{"event":"ready","at":' + str(time.time()).encode() + b',"episode_id":"' + bad + b'"}\n')
    out.write(b'{"event":"reward","at":' + str(time.time()).encode() + b',"episode_id":"' + bad + b'","reward":1}\n')
elif case == 11:
    # both inside the pod's lifetime (ClockSkew is judged first): only the order is wrong
    t = time.time()
    out.write(json.dumps(dict(event="reward", at=t - 0.5, episode_id=me, reward=1)).encode() + b"\n")
    out.write(json.dumps(dict(event="ready", at=t, episode_id=me)).encode() + b"\n")
elif case == 12:
    emit("ready")
    while True:
        time.sleep(60)
elif case == 13:
    for path in ("/task/owned.txt", "/etc/owned.txt", "/owned.txt", "/usr/owned.txt"):
        try:
            open(path, "w").write("x")
            escaped("wrote " + path)
        except OSError as exc:
            blocked(f"{path}: {exc}")
    sys.exit(3)
elif case == 14:
    for path in (os.environ["HOST_SECRET"], "/root/.bashrc", "/work", "/etc/shadow"):
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                open(path).read()
            escaped("read " + path)
        except OSError as exc:
            blocked(f"{path}: {exc}")
    sys.exit(3)
elif case == 15:
    # by name (DNS is closed under DenyAll: that alone fails it) and by address: the API Service's
    # ClusterIP every kubelet puts in the environment, and the node's kubelet at the default gateway
    targets = [("127.0.0.1", int(os.environ["API_PORT"])), ("kubernetes.default.svc", 443),
               (os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"]))]
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000" and fields[2] != "00000000":
            targets.append((socket.inet_ntoa(int(fields[2], 16).to_bytes(4, "little")), 10250))
    for host, port in targets:
        try:
            socket.create_connection((host, port), timeout=3).close()
            escaped(f"connected to {host}:{port}")
        except OSError as exc:
            blocked(f"{host}:{port}: {exc}")
    sys.exit(3)
elif case == 16:
    # The API Service's own KUBERNETES_SERVICE_*/KUBERNETES_PORT* are set by every kubelet,
    # enableServiceLinks or not (an address, not a credential); any other service link is a leak.
    leaks = [k for k in os.environ if k.endswith(("_SERVICE_HOST", "_SERVICE_PORT")) and not k.startswith("KUBERNETES_")]
    for path in ("/var/run/secrets/kubernetes.io/serviceaccount/token", "/run/secrets/kubernetes.io/serviceaccount/token"):
        if os.path.exists(path):
            escaped("found " + path)
    if leaks:
        escaped("service env " + ",".join(leaks))
    blocked("no token, no service environment")
    sys.exit(3)
'''


def operator_peak_rss_mib(operator) -> float:
    for line in open(f"/proc/{operator.proc.pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.exclusive   # the operator's own peak memory; 18 cube episodes fill both nodes
def test_hostile_episodes_fail_only_themselves(operator_process, namespace, tmp_path_factory):
    secret = STATE / f"hostsecret-{unique('s')}"
    secret.write_text("host secret")
    api_port = __import__("json").loads((STATE / "state.json").read_text())["apiserver_port"]
    name = unique("hostile")
    apply(episode_batch(name, PROGRAM, episodes=len(CASES), minSuccessfulEpisodes=2, episodeTimeoutSeconds=30,
                        env=[{"name": "HOST_SECRET", "value": str(secret)}, {"name": "API_PORT", "value": str(api_port)}]),
          namespace)
    obj = wait_finished(name, namespace, timeout=300, operator=operator_process)
    rows = {row["index"]: row for row in results(name, namespace)["pods"]}
    problems = []
    for index, case, outcome, reason in CASES:
        row = rows[index]
        if row["outcome"] != outcome or row["reason"] not in (reason if isinstance(reason, tuple) else (reason,)):
            problems.append(f"{index} {case}: got {row['outcome']}/{row['reason']} ({row.get('message')}), "
                            f"want {outcome}/{reason}; extra={row.get('extra')}")
    assert not problems, "\n".join(problems)
    for index in (13, 14, 15, 16):
        assert "blocked" in (rows[index].get("log_tail") or ""), rows[index]
    assert ":10250:" in rows[15]["log_tail"] and rows[15]["log_tail"].count("blocked") == 4, rows[15]   # by address too
    st = obj["status"]
    assert st["phase"] == "Succeeded" and st["succeededEpisodes"] == 2 and st["failedEpisodes"] == len(CASES) - 2
    # 50 MiB of output and a 1 MiB line went through the operator: its memory stayed bounded.
    assert operator_peak_rss_mib(operator_process) < 400


def test_privileged_pod_is_refused_in_a_sandbox_namespace(operator_process, namespace):
    name = unique("psa")
    apply(episode_batch(name, "import time; time.sleep(20)", episodes=1, cleanup={"sandbox": "Never"},
                        isolation={"resourceQuota": True}), namespace)
    import time
    from tests.support.batches import get
    deadline = time.monotonic() + 60
    sandbox = None
    while time.monotonic() < deadline and not sandbox:
        sandbox = ((get(name, namespace) or {}).get("status") or {}).get("sandboxNamespace")
        time.sleep(0.5)
    assert sandbox
    ns = get(sandbox, None, kind="namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "privileged", "namespace": sandbox},
           "spec": {"containers": [{"name": "c", "image": "python:3.12-alpine",
                                    "securityContext": {"privileged": True}}]}}
    out = kubectl("create", "-f", "-", input=__import__("json").dumps(pod), check=False)
    assert out.returncode != 0 and "violates PodSecurity" in out.stderr, out.stderr
    assert kubectl("get", "networkpolicies", "-n", sandbox, "-o", "name").stdout.strip()
    assert kubectl("get", "resourcequotas", "-n", sandbox, "-o", "name").stdout.strip()
    pods = __import__("json").loads(kubectl("get", "pods", "-n", sandbox, "-o", "json").stdout)["items"]
    assert pods and all(p["spec"].get("automountServiceAccountToken") is False for p in pods)


@pytest.mark.exclusive   # stops and restarts the shared operator
def test_foreign_namespace_in_the_way_is_never_touched(operator_process, namespace):
    """A namespace with the sandbox's name but another owner: Stalled, and it is left alone.

    The sandbox name comes from the batch's UID, so the squatter is created while the operator
    is paused, between the batch's creation and its provisioning.
    """
    from tests.support.batches import condition, get
    operator_process.stop()
    try:
        name = unique("squat")
        created = apply(episode_batch(name, "print(1)", episodes=1), namespace)
        squatted = "rb-" + created["metadata"]["uid"].replace("-", "")[:10]
        kubectl("create", "namespace", squatted)
        kubectl("label", "namespace", squatted, "team=someone-else")
        kubectl("create", "configmap", "precious", "-n", squatted, "--from-literal=k=v")
    finally:
        operator_process.start()
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "NamespaceConflict", stalled
    kubectl("delete", "rb", name, "-n", namespace, "--timeout=60s", timeout=70)
    live = get(squatted, None, kind="namespace")
    assert live and not live["metadata"].get("deletionTimestamp")
    assert live["metadata"]["labels"].get("team") == "someone-else"
    assert "rl.agentruntime.io/batch-uid" not in live["metadata"]["labels"]
    assert get("precious", squatted, kind="configmap")
    kubectl("delete", "namespace", squatted, "--wait=false")
