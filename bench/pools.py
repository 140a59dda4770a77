"""Warm pool vs cold: one batch of N trivial episodes from a full RolloutPool of N, and the same
batch cold (the same pool's template through a RolloutBatch of its own), on the running
devcluster with a fresh operator. A benchmark: nothing asserts a time.

    python bench/pools.py [--sizes 20 200] [--runtime-class cube] [--settle 10]

Each batch runs once per agent: `python` (episode.py, the default command: a Python
interpreter's start is the agent's first cost), `sh` (episode.sh printing the same two events:
what the sandbox itself costs, with an agent that starts at once), `shwork` (work.sh: the shell
agent working 3 s between its two events, as an agent does) and `pywork` (work.py: the Python
agent working so). In a pod of the devcluster's Python image, `python -B -c 'import json, os,
time'` is 23 ms of CPU alone (13 ms with `-I` and no imports; the host's own python3, 126 ms, is
not what the pods run); twenty of them start while the hand-overs and their API writes already
hold both cores, which the warm pool's targets (all ready <= 1 s) measure along with the
hand-over. An agent that
ends at once has its sandbox torn down (its container, its pod's network, a kube-router resync on
each node) while the batch's later episodes are still being handed over: `shwork` and `pywork`
keep that out of the hand-overs' time, as a real episode (minutes long) does.

`--node-cpu-shares N` (`run.py --pool-node-cpu-shares N`) makes each node's cgroup weigh N for the
run (cgroup v1 `cpu.shares`; the devcluster makes it 1024, one control-plane thread's weight) and
sets it back after; the result says the weights it ran with (`node_cpu_shares`).

`--parallelism N` runs each batch N episodes at a time (the default: all at once): the first
wave claims before the Job, each later index as the Job starts it (service.later_claims), and
`hits` says how many of all claimed. `--result NAME` writes bench/results/NAME.json.

`--repeats N` runs each agent's warm and cold batches N times, one after another on the same
pool, each once the batch before it has no pod left and the pool is full again (`--settle` s); a
mode's figures are then its runs (`runs`) and their medians (`median`).

Per size and mode: batch -> all ready and batch -> all rewards (the status' own figures), batch ->
finished (its creation until the status was seen terminal: what `kubectl wait` waits), and per
episode the claim latency: claim (the operator's annotation) -> the pod was handed its episode
(delivered-at), read from the pods (the batch keeps its sandbox: cleanup Never), and the pods its
Job counted failed (cold pods the Job controller made for claimed indexes, then deleted). Operator
CPU per episode from /proc/<pid>/stat over each batch (a pooled batch's includes whatever of its
pool's refill falls in its time: all of it for `shwork`, little for the others), and per pod over
the pool's first fill (`fill_operator_cpu_ms_per_pod`). Per agent, its CPU and the time it spent
runnable but waiting for a CPU, up to its `ready` (`agent_cpu_s`, `agent_runqueue_wait_s`: the
schedstat line each episode writes to stderr, read from the kept pods' logs). Writes
bench/results/pools.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "operator"))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import lib  # noqa: E402
from lib import Kube  # noqa: E402
from workloads import ensure_namespace  # noqa: E402

from rolloutbatch.core import naming  # noqa: E402
from rolloutbatch.core.model import BatchRef  # noqa: E402

GROUP = "/apis/rl.agentruntime.io/v1alpha1"
# Each agent writes its process's /proc schedstat (CPU time, time spent runnable waiting for a
# CPU, in ns) to stderr just before `ready`: whether its start computed or waited (agent_sched).
EPISODE = ('import json, os, sys, time\n'
           'e = lambda k, **f: print(json.dumps(dict(event=k, at=time.time(), episode_id=os.environ["EPISODE_ID"], '
           '**f)), flush=True)\n'
           'print("schedstat", open("/proc/self/schedstat").read().strip(), file=sys.stderr, flush=True)\n'
           'e("ready"); e("reward", reward=1.0)\n')
SH_SCHEDSTAT = 'echo "schedstat $(cat /proc/$$/schedstat)" >&2\n'
SH_READY = 'printf \'{"event":"ready","at":%s,"episode_id":"%s"}\\n\' "$(date +%s.%N)" "$EPISODE_ID"\n'
SH_REWARD = 'printf \'{"event":"reward","at":%s,"episode_id":"%s","reward":1.0}\\n\' "$(date +%s.%N)" "$EPISODE_ID"\n'
SH_EPISODE = SH_SCHEDSTAT + SH_READY + SH_REWARD
SH_WORK_EPISODE = SH_SCHEDSTAT + SH_READY + "sleep 3\n" + SH_REWARD   # ready, 3 s of work, reward
PY_WORK_EPISODE = EPISODE.replace('e("ready"); ', 'e("ready"); time.sleep(3); ')   # the same in Python
TASK_FILES = {"episode.py": EPISODE, "episode.sh": SH_EPISODE, "work.sh": SH_WORK_EPISODE, "work.py": PY_WORK_EPISODE}
# agent -> (the modes' keys in a size's results, the batch's command: None is the default, episode.py)
AGENTS = {"python": (("warm", "cold"), None), "sh": (("warm_sh", "cold_sh"), ["sh", "/task/episode.sh"]),
          "shwork": (("warm_shwork", "cold_shwork"), ["sh", "/task/work.sh"]),
          "pywork": (("warm_pywork", "cold_pywork"), ["python", "-B", "/task/work.py"])}
RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}


def _wait(kube: Kube, path: str, ok, timeout: float) -> dict:
    end = time.monotonic() + timeout
    obj: dict = {}
    while time.monotonic() < end:
        obj = kube.get(path) or {}
        if ok(obj.get("status") or {}):
            return obj
        time.sleep(0.25)
    raise TimeoutError(f"{path}: {obj.get('status')}")


def _finished(status: dict) -> bool:
    return status.get("phase") in ("Succeeded", "Failed", "Stopped")


def _full(kube: Kube, ns: str, pool: str, size: int, settle: float) -> None:
    """Until the pool is full, then ``settle`` seconds more: the fill's own tail (the last pods'
    status updates, the operator attaching to each new pod) is not the batch's cost, and a
    trainer's pool is full well before its batch."""
    _wait(kube, f"{GROUP}/namespaces/{ns}/rolloutpools/{pool}", lambda st: st.get("readyPods") == size, 900)
    time.sleep(settle)


def _pods_gone(kube: Kube, batch_uid: str, timeout: float = 300.0) -> None:
    """Until no pod of the batch is left on the cluster (a pooled batch's in its pool's namespace,
    a cold one's beside it)."""
    end = time.monotonic() + timeout
    while (kube.get("/api/v1/pods", labelSelector=f"{naming.LABEL_BATCH_UID}={batch_uid}") or {}).get("items"):
        if time.monotonic() > end:
            raise RuntimeError(f"the pods of batch {batch_uid} are still on the cluster after {timeout:.0f} s")
        time.sleep(0.5)


def schedstat_of(log: str) -> tuple[float, float] | None:
    """(CPU seconds, seconds runnable but waiting for a CPU) of an agent up to its `ready`, from the
    schedstat line its episode wrote to stderr (None when its log has none)."""
    for line in log.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[0] == "schedstat" and all(f.isdigit() for f in fields[1:]):
            return int(fields[1]) / 1e9, int(fields[2]) / 1e9
    return None


def agent_sched(kube: Kube, batch_uid: str) -> dict:
    """Over a finished batch's pods (kept: cleanup Never), each agent's CPU and run-queue wait up to
    its `ready` (schedstat_of): a start that waited for a CPU it did not get shows here, one that
    computed in the CPU figure."""
    cpu, wait = [], []
    for pod in (kube.get("/api/v1/pods", labelSelector=f"{naming.LABEL_BATCH_UID}={batch_uid}") or {}).get("items") or []:
        meta = pod["metadata"]
        try:
            log = kube.text(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log",
                            container=naming.CONTAINER_NAME, limitBytes="65536")
        except RuntimeError:
            continue
        if (got := schedstat_of(log)) is not None:
            cpu.append(got[0])
            wait.append(got[1])
    return {"agent_cpu_s": lib.summary(cpu), "agent_runqueue_wait_s": lib.summary(wait)}


CPU_CGROUPS = pathlib.Path("/sys/fs/cgroup/cpu")   # cgroup v1's cpu hierarchy (the devcluster's real nodes)


def node_cgroups(state: pathlib.Path = lib.STATE) -> list[pathlib.Path]:
    """Each devcluster node's cgroup in the cpu hierarchy: its launch.json's cgroupRoot, under
    which the kubelet puts every pod of the node."""
    return [CPU_CGROUPS / json.loads(path.read_text())["cgroupRoot"].strip("/")
            for path in sorted((state / "nodes").glob("*/launch.json"))]


CPU_SHARES = (2, 262144)   # cgroup v1's bounds of cpu.shares


def cpu_shares_refused(shares: int | None) -> str | None:
    """Why ``shares`` cannot be a node cgroup's weight, or None."""
    if shares is not None and not CPU_SHARES[0] <= shares <= CPU_SHARES[1]:
        return f"must be from {CPU_SHARES[0]} to {CPU_SHARES[1]} (cgroup v1's bounds of cpu.shares), got {shares}"
    return None


@contextlib.contextmanager
def node_cpu_shares(shares: int | None, cgroups: list[pathlib.Path] | None = None):
    """With ``shares``, each node's cgroup weighs that much (cgroup v1 ``cpu.shares``) for the
    block, and what it weighed before after it; yields the weights the run has. A node's cgroup
    weighs 1024 as the devcluster makes it, as much as one thread of the control plane, which runs
    in the root cgroup (README: "The Python agents wait for a CPU")."""
    cgroups = node_cgroups() if cgroups is None else cgroups
    before = {path: (path / "cpu.shares").read_text().strip() for path in cgroups if (path / "cpu.shares").exists()}
    if shares is not None and not before:
        raise RuntimeError(f"no devcluster node cgroup in {CPU_CGROUPS} to weigh {shares}: is a cluster of real "
                           "nodes up, on cgroup v1?")
    try:
        for path in before if shares is not None else ():
            (path / "cpu.shares").write_text(str(shares))
        yield sorted({int(shares) if shares is not None else int(v) for v in before.values()})
    finally:
        if shares is not None:
            for path, value in before.items():
                with contextlib.suppress(OSError):   # a node gone meanwhile
                    (path / "cpu.shares").write_text(value)


QUIET_TIMEOUT = 300.0   # seconds an earlier run's pods get to go before a run starts


def _quiet(kube: Kube, timeout: float = QUIET_TIMEOUT) -> None:
    """Until no pod of ours is left on the cluster (a pool's or a batch's): an earlier run's pods
    still terminating take CPU from this one's figures (a scratch run that began beside 178 of
    them was discarded). Raises past ``timeout``, naming how many are left."""
    end = time.monotonic() + timeout
    selector = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
    while True:
        left = (kube.get("/api/v1/pods", labelSelector=selector) or {}).get("items") or []
        if not left:
            return
        if time.monotonic() > end:
            raise RuntimeError(f"{len(left)} pods of an earlier run are still on the cluster after {timeout:.0f} s "
                               f"(e.g. {left[0]['metadata']['namespace']}/{left[0]['metadata']['name']}): "
                               "the figures would carry their CPU")
        time.sleep(1.0)


def run(kube: Kube, op, ns: str, size: int, runtime_class: str | None, settle: float = 10.0,
        agents: tuple[str, ...] = tuple(AGENTS), repeats: int = 1, parallelism: int | None = None) -> dict:
    _quiet(kube)
    pool = lib.unique(f"pool{size}")
    spec: dict = {"size": size, "maxSize": max(size, 1), "task": {"files": TASK_FILES},
                  "resources": RESOURCES}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    cpu0 = lib.proc_cpu_seconds(op.proc.pid)
    kube.create(f"{GROUP}/namespaces/{ns}/rolloutpools",
                {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool", "metadata": {"name": pool},
                 "spec": spec})
    t0 = time.monotonic()
    _full(kube, ns, pool, size, 0)
    fill = time.monotonic() - t0
    fill_cpu = lib.proc_cpu_seconds(op.proc.pid) - cpu0
    time.sleep(settle)
    # the operator's CPU from the pool's creation until it is full: what each pod's start costs
    # it (its creation, the pool's rounds, the channel opened to it), which a pooled episode's
    # figure carries when the refill falls in its batch's time
    out: dict = {"episodes": size, "parallelism": min(parallelism or size, size),
                 "pool_fill_seconds": round(fill, 2), "settle_seconds": settle,
                 "fill_operator_cpu_ms_per_pod": round(1000 * fill_cpu / size, 2)}
    runs = [(mode, AGENTS[agent][1]) for _ in range(repeats) for agent in agents for mode in AGENTS[agent][0]]
    rows: dict[str, list[dict]] = {}
    for mode, command in runs:
        warm = mode.startswith("warm")
        name = lib.unique(f"{mode.replace('_', '')}{size}")
        body: dict = {"episodes": size, "parallelism": out["parallelism"], "cleanup": {"sandbox": "Never"},
                      "episodeTimeoutSeconds": 300}
        if command:
            body["command"] = command
        if warm:
            body["poolRef"] = {"name": pool}
        else:
            body.update(task={"files": TASK_FILES}, resources=RESOURCES, isolation={"namespace": "Shared"})
            if runtime_class:
                body["runtimeClassName"] = runtime_class
        cpu0, began = lib.proc_cpu_seconds(op.proc.pid), time.monotonic()
        kube.create(f"{GROUP}/namespaces/{ns}/rolloutbatches",
                    {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": name},
                     "spec": body})
        done = _wait(kube, f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}", _finished, 1800)
        cpu, took = lib.proc_cpu_seconds(op.proc.pid) - cpu0, time.monotonic() - began
        st = done["status"]
        row = {"phase": st.get("phase"), "succeeded": st.get("succeededEpisodes"),
               "batch_to_all_ready_s": st.get("batchToAllReadySeconds"),
               "batch_to_all_rewards_s": st.get("batchToAllRewardsSeconds"),
               "pod_to_ready_s": st.get("podToReadySeconds"),
               # created -> seen finished (polled every 0.25 s): what `kubectl wait` waits
               "batch_to_finished_s": round(took, 2),
               "operator_cpu_ms_per_episode": round(1000 * cpu / size, 2),
               **agent_sched(kube, done["metadata"]["uid"])}
        if warm:
            pods = kube.get(f"/api/v1/namespaces/{naming.pool_namespace(ns, pool)}/pods",
                            labelSelector=f"{naming.LABEL_BATCH_UID}={done['metadata']['uid']}")["items"]
            claims, hits = [], 0
            for pod in pods:
                notes = pod["metadata"].get("annotations") or {}
                start = notes.get(naming.ANNOTATION_CLAIMED_AT)
                end = notes.get(naming.ANNOTATION_DELIVERED_AT)
                if start and end:
                    hits += 1
                    claims.append(float(end) - float(start))
            # The Job controller counts as failed each cold pod it made for a claimed index (its
            # informer behind the claims) and then deleted: with every episode a success, that is
            # the number of such pods (core.pools.shadowed_by_claim)
            job = kube.get(f"/apis/batch/v1/namespaces/{naming.pool_namespace(ns, pool)}/jobs/"
                           f"{naming.job_name(BatchRef(ns, name, done['metadata']['uid']))}") or {}
            row.update(hits=hits, claim_seconds=lib.summary(claims),
                       job_counted_failed_pods=(job.get("status") or {}).get("failed", 0))
        rows.setdefault(mode, []).append(row)
        print(f"[bench] pools {size} {mode}: {json.dumps(row)}", flush=True)
        kube.delete(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}")
        kube.wait_gone(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}", 300)
        # the next batch starts once this one's pods are gone (their sandboxes torn down would
        # take the node's CPU from its hand-overs) and the pool is full again: each run from the
        # same state, as a trainer's batch finds a full pool on a quiet node
        _pods_gone(kube, done["metadata"]["uid"])
        _full(kube, ns, pool, size, settle)
    kube.delete(f"{GROUP}/namespaces/{ns}/rolloutpools/{pool}")
    kube.wait_gone(f"{GROUP}/namespaces/{ns}/rolloutpools/{pool}", 300)
    out.update((mode, got[0] if repeats == 1 else {"runs": got, "median": medians(got)}) for mode, got in rows.items())
    return out


MEDIAN_KEYS = {"batch_to_all_ready_s": ("batch_to_all_ready_s",), "batch_to_all_rewards_s": ("batch_to_all_rewards_s",),
               "claim_p50_s": ("claim_seconds", "p50"), "claim_p95_s": ("claim_seconds", "p95"),
               "operator_cpu_ms_per_episode": ("operator_cpu_ms_per_episode",),
               "batch_to_finished_s": ("batch_to_finished_s",),
               "agent_cpu_p50_s": ("agent_cpu_s", "p50"),
               "agent_runqueue_wait_p50_s": ("agent_runqueue_wait_s", "p50")}


def medians(rows: list[dict]) -> dict:
    """The median over a mode's runs of each of its figures (those a row has)."""
    out = {}
    for name, path in MEDIAN_KEYS.items():
        values = []
        for row in rows:
            value = row
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, (int, float)):
                values.append(value)
        if values:
            out[name] = round(statistics.median(values), 4)
    return out


def part_pools(kube: Kube, sizes: list[int], runtime_class: str | None = None, result: str = "pools",
               settle: float = 10.0, agents: tuple[str, ...] = tuple(AGENTS), repeats: int = 1,
               cpu_shares: int | None = None, parallelism: int | None = None) -> dict:
    """Every size in turn with one fresh operator; writes results/<result>.json. ``cpu_shares``:
    each node's cgroup weighs that much for the run (node_cpu_shares)."""
    ns = "bench-pools"
    ensure_namespace(kube, ns)
    with node_cpu_shares(cpu_shares) as weights:
        op = lib.start_operator("bench-pools")
        try:
            runs = [run(kube, op, ns, size, runtime_class, settle, agents, repeats, parallelism) for size in sizes]
        finally:
            op.stop()
    out = {"machine": lib.machine_info(), "runtime_class": runtime_class or "runc", "node_cpu_shares": weights,
           "sizes": {str(run_["episodes"]): run_ for run_ in runs}}
    lib.write_result(result, out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 200])
    parser.add_argument("--runtime-class", default=None)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds a full pool is left before each batch")
    parser.add_argument("--agents", nargs="+", choices=list(AGENTS), default=list(AGENTS))
    parser.add_argument("--repeats", type=int, default=1, help="runs of each batch (medians when more than one)")
    parser.add_argument("--node-cpu-shares", type=int, default=None, metavar="N",
                        help="each node's cgroup weighs N for the run (cgroup v1 cpu.shares; the devcluster's 1024 after it)")
    parser.add_argument("--parallelism", type=int, default=None, metavar="N",
                        help="each batch's parallelism (default its episodes): the later waves claim as they start")
    parser.add_argument("--result", default="pools", help="writes results/<result>.json")
    args = parser.parse_args(argv)
    if args.parallelism is not None and args.parallelism < 1:
        parser.error("--parallelism must be at least 1")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if why := cpu_shares_refused(args.node_cpu_shares):
        parser.error(f"--node-cpu-shares {why}")
    part_pools(Kube(), args.sizes, args.runtime_class, args.result, settle=args.settle, agents=tuple(args.agents),
               repeats=args.repeats, cpu_shares=args.node_cpu_shares, parallelism=args.parallelism)


if __name__ == "__main__":
    main()
