"""The rolloutbatch benchmark (`make bench`). Benchmarks, not tests: nothing asserts a time.

Parts (each writes bench/results/<part>.json):
  overhead   the same episodes as a bare Indexed Job watched by the bench vs as a RolloutBatch:
             wall-time ratio and the lag from the last reward event to Ready=True
  modes      the same ratio in every isolation mode at 60 x p30 and 1,000 x p100 (bench/modes.py)
  breakdown  where the time goes in the guide's parallel and serial shipping-fix batches
  scale      1,000 x p100, 10,000 x p200 (or --big N), 20 concurrent batches of 100: operator CPU
             per episode, peak RSS, API requests per episode (by user agent, through a counting
             proxy), status and results ConfigMap sizes, exact counts
  images     one batch over 4 images (spec.inputImages) vs the same in one image vs 4 batches (bench/images.py)
  pools      a batch from a full RolloutPool vs the same batch cold (bench/pools.py)
then bench/plots.py draws the PNGs.

The defaults fit real nodes (kubelet + containerd, about two pod starts a second on 2 cores): the
whole run is about 40 minutes there. The long runs are asked for by name: `modes` at 1,000 x p100
(--modes-sizes 60x30 1000x100), `scale --only many big huge` (hours on real nodes), pools of 200
(--pool-sizes 20 200).

Run against a running devcluster (KUBECONFIG=.devcluster/kubeconfig): python bench/run.py [parts]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "operator"))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import lib  # noqa: E402
from lib import Kube  # noqa: E402
from workloads import ensure_namespace, run_bare, run_batch, shipping_spec, trivial_spec  # noqa: E402


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
    ("scheduled_to_ready_event", "seen_scheduled", "ready_at",
     "kubelet: pod sandbox (pause, CNI) + container start + interpreter + task prep"),
    ("scheduled_to_started", "seen_scheduled", "seen_started",
     "kubelet: pod sandbox + container start, as its status update reports it"),
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
    p.add_argument("parts", nargs="*", default=["overhead", "modes", "images", "breakdown", "scale", "pools", "plots"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--big", type=int, default=10000, help="episodes of the big scale batch")
    p.add_argument("--huge", type=int, default=30000, help="episodes of the huge scale batch (every row must be kept)")
    p.add_argument("--huge-parallelism", type=int, default=200, help="its parallelism (2026-12-01 run: 100, see README)")
    p.add_argument("--huge-channel", choices=("stdout", "termination-message"), default="stdout",
                   help="its episodes' channel (2026-12-01 run: termination-message, see README)")
    p.add_argument("--only", nargs="*", default=["1k-p100"],
                   help="scale scenarios to (re)run: a family (1k many big huge) or a label (e.g. 1k-p100-tm); "
                        "default 1k-p100 alone (the others take hours on real nodes)")
    p.add_argument("--modes-sizes", nargs="*", default=["60x30"], metavar="EPISODESxPARALLELISM",
                   help="the sizes `modes` runs (default 60x30; 1000x100 adds four runs of 1,000 pods: over half an hour on "
                        "real nodes)")
    p.add_argument("--pool-sizes", type=int, nargs="*", default=[20], metavar="N",
                   help="the pool sizes `pools` runs (default 20)")
    p.add_argument("--pool-runtime-class", default=None, metavar="NAME",
                   help="the RuntimeClass of `pools`' pods (default none: runc)")
    p.add_argument("--pools-result", default="pools", help="the results file of `pools` (results/<name>.json)")
    p.add_argument("--pool-agents", nargs="+", default=["python", "sh"], metavar="AGENT",
                   help="the agents `pools` runs each batch with, of pools.AGENTS (default python and sh: a Python "
                        "interpreter's start, and none; shwork and pywork: the shell and the Python agent working 3 s "
                        "between their events)")
    p.add_argument("--pool-repeats", type=int, default=1, metavar="N",
                   help="runs of each of `pools`' batches (medians when more than one)")
    p.add_argument("--pool-node-cpu-shares", type=int, default=None, metavar="N",
                   help="each node's cgroup weighs N during `pools` (cgroup v1 cpu.shares; default: as the devcluster "
                        "makes it, 1024)")
    p.add_argument("--pool-settle", type=float, default=10.0, metavar="SECONDS",
                   help="seconds a full pool is left before each batch (default 10: the fill's tail is not the batch's)")
    p.add_argument("--modes-variants", nargs="*", default=None, metavar="VARIANT",
                   help="the `modes` variants to run beside the bare Job (dedicated, dedicated+quota, shared; "
                        "default all)")
    p.add_argument("--modes-result", default="modes", help="the results file of `modes` (results/<name>.json)")
    p.add_argument("--profile", action="store_true", help="py-spy the operator in every scenario run (perturbs its CPU "
                                                        "numbers; stored as <label>-profiled)")
    args = p.parse_args()
    if "pools" in args.parts:   # checked before any setup; the agents are pools.AGENTS' (imported only for pools)
        import pools
        unknown = sorted(set(args.pool_agents) - set(pools.AGENTS))
        if unknown:
            p.error(f"--pool-agents: unknown {', '.join(unknown)} (choose from {', '.join(sorted(pools.AGENTS))})")
    if args.pool_repeats < 1:
        p.error("--pool-repeats must be at least 1")
    if "pools" in args.parts and (why := pools.cpu_shares_refused(args.pool_node_cpu_shares)):
        p.error(f"--pool-node-cpu-shares {why}")
    if args.modes_variants:
        import modes
        unknown = set(args.modes_variants) - set(modes.VARIANTS)
        if unknown:
            p.error(f"--modes-variants: no such variant {', '.join(sorted(unknown))} (of {', '.join(modes.VARIANTS)})")
    kube = Kube()
    from tests.support.operator import install_crd
    install_crd()
    started = time.time()
    if "overhead" in args.parts:
        part_overhead(kube, args.repeats)
    if "modes" in args.parts:
        import modes
        sizes = tuple(tuple(int(n) for n in size.split("x")) for size in args.modes_sizes)
        modes.part_modes(kube, args.repeats, sizes, args.modes_result, tuple(args.modes_variants or modes.VARIANTS))
    if "images" in args.parts:
        import images
        images.part_images(kube, args.repeats)
    if "breakdown" in args.parts:
        part_breakdown(kube, max(1, args.repeats // 2))
    if "scale" in args.parts:
        import scale
        scale.part_scale(kube, args.big, args.profile, args.only, huge=args.huge,
                         huge_parallelism=args.huge_parallelism, huge_channel=args.huge_channel)
    if "pools" in args.parts:
        import pools
        pools.part_pools(kube, args.pool_sizes, args.pool_runtime_class, args.pools_result, args.pool_settle,
                         tuple(args.pool_agents), args.pool_repeats, args.pool_node_cpu_shares)
    if "plots" in args.parts:
        import plots
        plots.main()
    print(f"[bench] done in {time.time() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
