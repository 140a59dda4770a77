"""The rolloutbatch benchmark (`make bench`). Benchmarks, not tests: nothing asserts a time.

Parts (each writes bench/results/<part>.json):
  overhead   the same episodes as a bare Indexed Job watched by the bench vs as a RolloutBatch:
             wall-time ratio and the lag from the last reward event to Ready=True
  modes      the same ratio in every isolation mode at 60 x p30 and 1,000 x p100 (bench/modes.py)
  breakdown  where the time goes in the guide's parallel and serial shipping-fix batches
  scale      1,000 x p100, 10,000 x p200 (or --big N), 20 concurrent batches of 100: operator CPU
             per episode, peak RSS, API requests per episode (by user agent, through a counting
             proxy), status and results ConfigMap sizes, exact counts
then bench/plots.py draws the PNGs.

Run against a running devcluster (KUBECONFIG=.devcluster/kubeconfig): python bench/run.py [parts]
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "operator"))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import yaml  # noqa: E402

import lib  # noqa: E402
from lib import GROUP, Kube  # noqa: E402
from rolloutbatch.core import manifests, naming  # noqa: E402
from rolloutbatch.core.model import BatchRef  # noqa: E402
from rolloutbatch.core.results import decode_results  # noqa: E402
from rolloutbatch.core.spec import parse_spec  # noqa: E402

EXAMPLES = HERE.parent / "examples"


def shipping_spec(parallelism: int = 10) -> dict:
    spec = yaml.safe_load((EXAMPLES / "shipping-fix-parallel.yaml").read_text())["spec"]
    spec["parallelism"] = parallelism
    return spec


def trivial_spec(episodes: int = 10, parallelism: int = 10, channel: str = "stdout") -> dict:
    """The trivial episode: ready, reward 1.0, exit. ``channel`` "stdout" (a log read per pod) or
    "termination-message" (events in /dev/termination-log: judged from the pod status)."""
    program = {"stdout": lib.TRIVIAL, "termination-message": lib.TRIVIAL_TERMINATION_MESSAGE}[channel]
    spec = shipping_spec()
    spec.update(episodes=episodes, parallelism=parallelism, task={"mountPath": "/task", "files": {"episode.py": program}})
    spec["activeDeadlineSeconds"] = 7200
    return spec


def batch_obj(name: str, spec: dict, **override) -> dict:
    spec = copy.deepcopy(spec)
    spec.update(override)
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
            "metadata": {"name": name}, "spec": spec}


def ensure_namespace(kube: Kube, name: str) -> None:
    if kube.get(f"/api/v1/namespaces/{name}") is None:
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def condition(obj: dict, type_: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def pods_detail(kube: Kube, tracker: lib.PodTracker, read_logs: bool = True) -> list[dict]:
    rows = []
    for rec in sorted(tracker.pods.values(), key=lambda r: r["name"]):
        row = {k: v for k, v in rec.items() if k != "object"}
        row.update(lib.pod_api_times(rec["object"]))
        if read_logs:
            row.update(lib.episode_events(kube, rec["namespace"], rec["name"]))
        rows.append(row)
    return rows


# --- one run of each kind ---------------------------------------------------------------------------

def run_bare(kube: Kube, ns: str, name: str, spec_raw: dict, timeout: float = 600) -> dict:
    """ConfigMap + Indexed Job built by the operator's own manifest builders (Shared isolation,
    no owner), watched directly: created -> Job Complete observed -> pods listed and logs read."""
    spec = parse_spec({**spec_raw, "isolation": {"namespace": "Shared", "network": "DenyAll"}})
    import uuid
    ref = BatchRef(namespace=ns, name=name, uid=str(uuid.uuid4()))
    job = manifests.job(ref, spec, None)
    cm = manifests.task_configmap(ref, spec, None)
    done = threading.Event()
    job_seen: dict = {}

    def on_job(now, type_, obj):
        job_seen.setdefault("created", now)
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
                job_seen.setdefault("finished", now)
                job_seen["condition"] = cond["type"]
                job_seen["object"] = obj
                done.set()

    tracker = lib.PodTracker()
    sel = f"{lib.BATCH_NAME_LABEL}={name}"
    w_job = lib.start_watch(kube, f"/apis/batch/v1/namespaces/{ns}/jobs", on_job, labelSelector=sel)
    w_pod = lib.start_watch(kube, f"/api/v1/namespaces/{ns}/pods", tracker, labelSelector=sel)
    t0 = time.time()
    kube.create(f"/api/v1/namespaces/{ns}/configmaps", cm)
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    t_created = time.time()
    done.wait(timeout)
    t_complete = time.time()
    pods = kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=sel)["items"]
    time.sleep(0.3)  # let the pod watch catch up
    w_job.stop(), w_pod.stop()
    detail = pods_detail(kube, tracker)
    t_results = time.time()
    succeeded = sum(1 for p in pods if p["status"].get("phase") == "Succeeded")
    kube.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}")
    kube.delete(f"/api/v1/namespaces/{ns}/configmaps/{cm['metadata']['name']}")
    return {"mode": "bare-job", "name": name, "t0": t0, "create_calls_seconds": round(t_created - t0, 4),
            "job_seen": {k: v for k, v in job_seen.items() if k != "object"},
            "wall_to_complete_seconds": round(job_seen.get("finished", t_complete) - t0, 4),
            "wall_to_results_seconds": round(t_results - t0, 4),
            "succeeded": succeeded, "pods": detail}


def run_batch(kube: Kube, ns: str, name: str, spec_raw: dict, timeout: float = 900, detail: bool = True) -> dict:
    """A RolloutBatch (sandbox kept until the bench read the pods), watched until Ready=True."""
    obj = batch_obj(name, spec_raw, cleanup={"sandbox": "Never"})
    seen: dict = {"phases": {}}
    done = threading.Event()

    def on_rb(now, type_, rb):
        status = rb.get("status") or {}
        seen["phases"].setdefault(status.get("phase") or "-", now)
        ready = condition(rb, "Ready")
        if ready and ready.get("status") == "True":
            seen.setdefault("ready", now)
            seen["object"] = rb
            done.set()
        stalled = condition(rb, "Stalled")
        if stalled and stalled.get("status") == "True":
            seen.setdefault("stalled", now)
            seen["object"] = rb
            done.set()

    tracker = lib.PodTracker()
    jobs: dict = {}
    sel = f"{lib.BATCH_NAME_LABEL}={name}"
    w_rb = lib.start_watch(kube, f"{GROUP}/namespaces/{ns}/rolloutbatches", on_rb, fieldSelector=f"metadata.name={name}")
    w_pod = lib.start_watch(kube, "/api/v1/pods", tracker, labelSelector=sel) if detail else None
    w_job = lib.start_watch(kube, "/apis/batch/v1/jobs", lambda now, t, o: jobs.setdefault("created", now),
                            labelSelector=sel)
    t0 = time.time()
    created = kube.create(f"{GROUP}/namespaces/{ns}/rolloutbatches", obj)
    done.wait(timeout)
    t_end = time.time()
    time.sleep(0.3)
    for w in (w_rb, w_pod, w_job):
        if w:
            w.stop()
    rb = seen.get("object") or kube.get(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}")
    status = rb.get("status") or {}
    # jobCompleteSeconds may land in a patch just after Ready=True (the SDK waits for it too)
    for _ in range(15):
        if status.get("jobCompleteSeconds") is not None:
            break
        time.sleep(0.2)
        status = (kube.get(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}") or {}).get("status") or status
    pods = pods_detail(kube, tracker) if detail else []
    out = {"mode": "rolloutbatch", "name": name, "uid": created["metadata"]["uid"], "t0": t0,
           "ready_seen": seen.get("ready"), "stalled_seen": seen.get("stalled"),
           "phases_seen": {k: round(v - t0, 4) for k, v in seen["phases"].items()},
           "job_created_seen": jobs.get("created"),
           "wall_to_ready_seconds": round(seen.get("ready", t_end) - t0, 4),
           "status": status, "pods": pods}
    kube.delete(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}")
    kube.wait_gone(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}", timeout=120)
    return out


# --- part 1: overhead ----------------------------------------------------------------------------

def part_overhead(kube: Kube, repeats: int) -> dict:
    ns = lib.unique("bench-overhead")
    ensure_namespace(kube, ns)
    op = lib.start_operator("bench-overhead")
    runs = {"shipping-fix": [], "trivial": []}
    try:
        for task, spec in (("shipping-fix", shipping_spec()), ("trivial", trivial_spec())):
            for i in range(repeats):
                bare = run_bare(kube, ns, lib.unique(f"bare-{task}"), spec)
                rb = run_batch(kube, ns, lib.unique(f"rb-{task}"), spec)
                ratio = rb["wall_to_ready_seconds"] / bare["wall_to_complete_seconds"]
                rb_last = max((p.get("reward_at") or 0) for p in rb["pods"]) or None
                rb_fin = max((p.get("api_finished") or 0) for p in rb["pods"]) or None
                rb_fin_seen = max((p.get("seen_finished") or 0) for p in rb["pods"]) or None
                row = {"repeat": i, "bare_wall_to_complete": bare["wall_to_complete_seconds"],
                       "bare_wall_to_results": bare["wall_to_results_seconds"],
                       "rb_wall_to_ready": rb["wall_to_ready_seconds"], "ratio": round(ratio, 4),
                       "ratio_vs_bare_results": round(rb["wall_to_ready_seconds"] / bare["wall_to_results_seconds"], 4),
                       "lag_last_reward_to_ready": round(rb["ready_seen"] - rb_last, 4) if rb["ready_seen"] and rb_last else None,
                       "lag_last_finished_api_to_ready": round(rb["ready_seen"] - rb_fin, 4) if rb["ready_seen"] and rb_fin else None,
                       "lag_last_finished_seen_to_ready": round(rb["ready_seen"] - rb_fin_seen, 4) if rb["ready_seen"] and rb_fin_seen else None,
                       "bare_last_reward_to_complete": round(bare["job_seen"]["finished"] - max(p.get("reward_at") or 0 for p in bare["pods"]), 4),
                       "rb_succeeded": rb["status"].get("succeededEpisodes"), "bare_succeeded": bare["succeeded"],
                       "rb_phases_seen": rb["phases_seen"]}
                print(f"[overhead] {task} #{i}: bare {row['bare_wall_to_complete']:.2f}s rb {row['rb_wall_to_ready']:.2f}s "
                      f"ratio {row['ratio']:.3f} lag {row['lag_last_reward_to_ready']}", flush=True)
                runs[task].append({"row": row, "bare": bare, "rolloutbatch": rb})
    finally:
        op.stop()
        kube.delete(f"/api/v1/namespaces/{ns}")
    out = {"part": "overhead", "machine": lib.machine_info(), "repeats": repeats,
           "definitions": {
               "bare_wall_to_complete": "bench creates ConfigMap+Indexed Job (the operator's own manifests, Shared "
                                        "namespace, no owner) -> the bench's Job watch sees Complete",
               "bare_wall_to_results": "... -> pods listed and every log read (what the guide's script does next)",
               "rb_wall_to_ready": "bench creates the RolloutBatch (Dedicated isolation, the default) -> the bench's "
                                   "watch on it sees Ready=True (status holds every count and statistic)",
               "ratio": "rb_wall_to_ready / bare_wall_to_complete (the strict comparison)",
               "lag_last_reward_to_ready": "Ready=True seen - max(reward event 'at') over the batch's episodes",
               "lag_last_finished_api_to_ready": "Ready=True seen - max(container finishedAt) (1 s resolution)",
           },
           "summary": {}, "runs": {}}
    for task, items in runs.items():
        rows = [r["row"] for r in items]
        out["summary"][task] = {k: lib.summary([r[k] for r in rows]) for k in (
            "bare_wall_to_complete", "bare_wall_to_results", "rb_wall_to_ready", "ratio", "ratio_vs_bare_results",
            "lag_last_reward_to_ready", "lag_last_finished_api_to_ready", "lag_last_finished_seen_to_ready",
            "bare_last_reward_to_complete")}
        out["summary"][task]["ratio_of_medians"] = round(
            out["summary"][task]["rb_wall_to_ready"]["p50"] / out["summary"][task]["bare_wall_to_complete"]["p50"], 4)
        out["runs"][task] = items
    lib.write_result("overhead", out)
    return out


# --- part 3: breakdown -----------------------------------------------------------------------------

STAGES = [
    ("slot_free_to_pod_created", "slot_free", "seen_created",
     "Job controller: Job created (first wave) or an earlier pod's exit freeing the slot -> pod created"),
    ("pod_created_to_scheduled", "seen_created", "seen_scheduled", "scheduler"),
    ("scheduled_to_ready_event", "seen_scheduled", "ready_at", "node agent sandbox start + interpreter + task prep"),
    ("scheduled_to_started", "seen_scheduled", "seen_started", "node agent: sandbox + process start, as reported "
     "(the agent delays the running status write by NODEAGENT_RUNNING_WRITE_DELAY=0.2 s, so this overstates)"),
    ("started_to_ready_event", "seen_started", "ready_at", "interpreter start + task prep"),
    ("ready_to_reward", "ready_at", "reward_at", "the task"),
    ("reward_to_finished_seen", "reward_at", "seen_finished", "process exit + status report"),
]


def part_breakdown(kube: Kube, repeats: int) -> dict:
    ns = lib.unique("bench-breakdown")
    ensure_namespace(kube, ns)
    op = lib.start_operator("bench-breakdown")
    out = {"part": "breakdown", "machine": lib.machine_info(), "repeats": repeats,
           "definitions": {s[0]: f"{s[1]} -> {s[2]} ({s[3]})" for s in STAGES} | {
               "finished_to_operator_ready": "last container finished (watch-observed) -> RolloutBatch Ready=True "
                                             "observed (log collection + status)",
               "times": "watch receipt times on the bench (API timestamps have 1 s resolution); ready/reward: the "
                        "episode's own float 'at'"},
           "batches": {}}
    try:
        for label, par in (("parallel", 10), ("serial", 1)):
            runs = []
            for i in range(repeats):
                rb = run_batch(kube, ns, lib.unique(f"ship-{label}"), shipping_spec(par))
                st = rb["status"]
                job_t = rb["job_created_seen"]
                stages = {name: [] for name, *_ in STAGES}
                by_created = sorted(rb["pods"], key=lambda p: p.get("seen_created") or 0)
                finishes = sorted(p.get("seen_finished") or 0 for p in rb["pods"])
                for n, p in enumerate(by_created):
                    p["slot_free"] = job_t if n < par else max(job_t or 0, finishes[n - par])
                for p in rb["pods"]:
                    for name, a, b, _ in STAGES:
                        if p.get(a) and p.get(b):
                            stages[name].append(p[b] - p[a])
                last_fin = max((p.get("seen_finished") or 0) for p in rb["pods"])
                runs.append({
                    "guide_metrics": {"batch_to_all_ready_seconds": st.get("batchToAllReadySeconds"),
                                      "pod_to_ready_p50_seconds": (st.get("podToReadySeconds") or {}).get("p50"),
                                      "pod_to_ready_p95_seconds": (st.get("podToReadySeconds") or {}).get("p95"),
                                      "batch_to_all_rewards_seconds": st.get("batchToAllRewardsSeconds"),
                                      "job_complete_seconds": st.get("jobCompleteSeconds"),
                                      "successful_episodes": st.get("succeededEpisodes"),
                                      "reward_sum": st.get("rewardSum")},
                    "batch_created_to_job_created": round(job_t - rb["t0"], 4) if job_t else None,
                    "finished_to_operator_ready": round(rb["ready_seen"] - last_fin, 4) if rb["ready_seen"] else None,
                    "wall_to_ready_seconds": rb["wall_to_ready_seconds"],
                    "stages": {k: lib.summary(v) for k, v in stages.items()},
                    "pods": rb["pods"], "phases_seen": rb["phases_seen"]})
                print(f"[breakdown] {label} #{i}: wall {rb['wall_to_ready_seconds']:.2f}s "
                      f"{json.dumps(runs[-1]['guide_metrics'])}", flush=True)
            agg = {}
            for key in ("batch_to_all_ready_seconds", "pod_to_ready_p50_seconds", "pod_to_ready_p95_seconds",
                        "batch_to_all_rewards_seconds", "job_complete_seconds"):
                agg[key] = lib.summary([r["guide_metrics"][key] for r in runs])
            agg["batch_created_to_job_created"] = lib.summary([r["batch_created_to_job_created"] for r in runs])
            agg["finished_to_operator_ready"] = lib.summary([r["finished_to_operator_ready"] for r in runs])
            agg["wall_to_ready_seconds"] = lib.summary([r["wall_to_ready_seconds"] for r in runs])
            agg["stages_all_pods"] = {name: lib.summary([
                p[b] - p[a] for r in runs for p in r["pods"] if p.get(a) and p.get(b)]) for name, a, b, _ in STAGES}
            agg["pod_to_ready_all_pods"] = lib.summary([
                p["ready_at"] - p["api_created"] for r in runs for p in r["pods"] if p.get("ready_at") and p.get("api_created")])
            out["batches"][label] = {"parallelism": par, "summary": agg, "runs": runs}
    finally:
        op.stop()
        kube.delete(f"/api/v1/namespaces/{ns}")
    lib.write_result("breakdown", out)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("parts", nargs="*", default=["overhead", "modes", "breakdown", "scale", "plots"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--big", type=int, default=10000, help="episodes of the big scale batch")
    p.add_argument("--huge", type=int, default=30000, help="episodes of the huge scale batch (issue 11)")
    p.add_argument("--huge-parallelism", type=int, default=200, help="its parallelism (2026-12-01 run: 100, see README)")
    p.add_argument("--huge-channel", choices=("stdout", "termination-message"), default="stdout",
                   help="its episodes' channel (2026-12-01 run: termination-message, see README)")
    p.add_argument("--only", nargs="*", help="scale scenarios to (re)run: a family (1k many big huge) or a label "
                                             "(e.g. 1k-p100-tm)")
    p.add_argument("--profile", action="store_true", help="py-spy the operator in every scenario run (perturbs its CPU "
                                                        "numbers; stored as <label>-profiled)")
    args = p.parse_args()
    kube = Kube()
    from tests.support.operator import install_crd
    install_crd()
    started = time.time()
    if "overhead" in args.parts:
        part_overhead(kube, args.repeats)
    if "modes" in args.parts:
        import modes
        modes.part_modes(kube, args.repeats)
    if "breakdown" in args.parts:
        part_breakdown(kube, max(1, args.repeats // 2))
    if "scale" in args.parts:
        import scale
        scale.part_scale(kube, args.big, args.profile, args.only, huge=args.huge,
                         huge_parallelism=args.huge_parallelism, huge_channel=args.huge_channel)
    if "plots" in args.parts:
        import plots
        plots.main()
    print(f"[bench] done in {time.time() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
