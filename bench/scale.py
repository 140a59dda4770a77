"""Part 2, scale: operator cost per episode for big and many batches.

Each scenario gets a fresh operator (so VmHWM is that scenario's peak) that talks to the API only
through bench/apiproxy.py, which counts its requests by user agent (kube-apiserver's
apiserver_request_total has no user-agent label; its all-clients delta is recorded beside).
"""
from __future__ import annotations

import subprocess
import threading
import time

import lib
from lib import GROUP, Kube
from rolloutbatch.core.results import decode_results


def scenario(kube: Kube, proxy: lib.Proxy, label: str, batches: list[tuple[str, int, int]], timeout: float,
             profile: bool = False) -> dict:
    import run
    ns = lib.unique(f"bench-{label}")
    run.ensure_namespace(kube, ns)
    op = lib.start_operator(f"bench-{label}", kubeconfig=str(proxy.kubeconfig))
    pid = op.proc.pid
    time.sleep(2)  # let kopf finish its initial listing
    names = [name for name, _, _ in batches]
    progress: list[tuple[float, str, int, int]] = []
    finished: dict[str, float] = {}
    objects: dict[str, dict] = {}
    done = threading.Event()

    def on_rb(now, type_, rb):
        name = rb["metadata"]["name"]
        if name not in names:
            return
        st = rb.get("status") or {}
        progress.append((now, name, int(st.get("succeededEpisodes") or 0) + int(st.get("failedEpisodes") or 0),
                         int(st.get("readyEpisodes") or 0)))
        for cond in st.get("conditions") or []:
            if cond.get("type") in ("Ready", "Stalled") and cond.get("status") == "True":
                finished.setdefault(name, now)
                objects[name] = rb
        if len(finished) == len(names):
            done.set()

    watch = lib.start_watch(kube, f"{GROUP}/namespaces/{ns}/rolloutbatches", on_rb)
    proxy.reset()
    cpu0, api0 = lib.proc_cpu_seconds(pid), kube.request_totals()
    spy = None
    if profile:
        svg = lib.RESULTS / f"profile-{label}.svg"
        spy = subprocess.Popen(["py-spy", "record", "-o", str(svg), "--pid", str(pid), "--rate", "50",
                                "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    for name, episodes, par in batches:
        kube.create(f"{GROUP}/namespaces/{ns}/rolloutbatches",
                    run.batch_obj(name, run.trivial_spec(episodes, par), episodeTimeoutSeconds=600,
                                  activeDeadlineSeconds=int(timeout) + 600))
    done.wait(timeout)
    t_end = time.time()
    cpu1, api1 = lib.proc_cpu_seconds(pid), kube.request_totals()
    if spy:
        spy.send_signal(2)
        spy.wait(60)
    hwm, rss = lib.proc_status(pid, "VmHWM"), lib.proc_status(pid, "VmRSS")
    counts = proxy.counts()
    watch.stop()
    per_batch = {}
    total_eps = sum(e for _, e, _ in batches)
    exact = True
    for name, episodes, par in batches:
        rb = objects.get(name) or kube.get(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}") or {}
        st = rb.get("status") or {}
        cm = kube.get(f"/api/v1/namespaces/{ns}/configmaps/{name}-results") or {}
        payload = {k: cm.get(k) for k in ("data", "binaryData") if cm.get(k)}
        doc = decode_results(cm) or {}
        rows = doc.get("pods") or []
        indices = {r.get("index") for r in rows}
        ok = (st.get("succeededEpisodes") == episodes and len(rows) == episodes and len(indices) == episodes
              and st.get("rewardSum") == episodes)
        exact = exact and ok
        per_batch[name] = {
            "episodes": episodes, "parallelism": par, "phase": st.get("phase"),
            "wall_to_ready_seconds": round(finished[name] - t0, 3) if name in finished else None,
            "succeededEpisodes": st.get("succeededEpisodes"), "failedEpisodes": st.get("failedEpisodes"),
            "lostEpisodes": st.get("lostEpisodes"), "rewardSum": st.get("rewardSum"),
            "results_rows": len(rows), "distinct_indices": len(indices), "exact": ok,
            "status_bytes": len(lib.json.dumps(st, separators=(",", ":"))),
            "results_configmap_bytes": len(lib.json.dumps(payload, separators=(",", ":"))),
            "results_gzipped": "binaryData" in payload,
            "guide_metrics": {"batch_to_all_ready_seconds": st.get("batchToAllReadySeconds"),
                              "batch_to_all_rewards_seconds": st.get("batchToAllRewardsSeconds"),
                              "pod_to_ready": st.get("podToReadySeconds"),
                              "job_complete_seconds": st.get("jobCompleteSeconds")},
            "reward_times": sorted(r["batch_to_reward_seconds"] for r in rows if r.get("batch_to_reward_seconds") is not None),
            "pod_to_ready": sorted(r["pod_to_ready_seconds"] for r in rows if r.get("pod_to_ready_seconds") is not None),
        }
    op_requests = sum(c["count"] for c in counts)
    by_agent: dict[str, int] = {}
    for c in counts:
        by_agent[c["user_agent"]] = by_agent.get(c["user_agent"], 0) + c["count"]
    out = {
        "label": label, "batches": len(batches), "episodes": total_eps,
        "wall_seconds": round(t_end - t0, 2), "all_finished": len(finished) == len(names),
        "episodes_per_second": round(total_eps / (t_end - t0), 2),
        "operator_cpu_seconds": round(cpu1 - cpu0, 2),
        "operator_cpu_ms_per_episode": round(1000 * (cpu1 - cpu0) / total_eps, 3),
        "operator_peak_rss_mib": round(hwm / 2**20, 1), "operator_rss_end_mib": round(rss / 2**20, 1),
        "operator_api_requests": op_requests,
        "operator_api_requests_per_episode": round(op_requests / total_eps, 3),
        "operator_api_requests_by_agent": by_agent,
        "operator_api_requests_detail": sorted(counts, key=lambda c: -c["count"]),
        "apiserver_request_total_delta_all_clients": api1 - api0,
        "max_status_bytes": max(b["status_bytes"] for b in per_batch.values()),
        "max_results_configmap_bytes": max(b["results_configmap_bytes"] for b in per_batch.values()),
        "exact_counts": exact,
        "progress": [(round(t - t0, 3), n, f, r) for t, n, f, r in progress],
        "per_batch": per_batch,
        "profile": f"profile-{label}.svg" if profile else None,
    }
    print(f"[scale] {label}: {total_eps} episodes in {out['wall_seconds']}s, cpu {out['operator_cpu_ms_per_episode']} ms/ep, "
          f"{out['operator_api_requests_per_episode']} req/ep, peak RSS {out['operator_peak_rss_mib']} MiB, "
          f"status {out['max_status_bytes']} B, exact {exact}", flush=True)
    for name in names:  # while the operator runs: its finalizer releases them
        kube.delete(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}")
    for name in names:
        kube.wait_gone(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}", timeout=60)
    op.stop()
    return out, ns


def part_scale(kube: Kube, big: int, profile: bool, only: list[str] | None = None) -> dict:
    path = lib.RESULTS / "scale.json"
    doc = lib.json.loads(path.read_text()) if path.exists() and only else {"part": "scale", "scenarios": {}}
    doc["machine"] = lib.machine_info()
    doc["definitions"] = {
        "operator_cpu_seconds": "utime+stime of the operator process (/proc/<pid>/stat) from the first create to the "
                                "last batch's Ready/Stalled, a fresh operator per scenario",
        "operator_peak_rss_mib": "VmHWM of that operator at the end of the scenario",
        "operator_api_requests": "every HTTP request the operator sent, counted by bench/apiproxy.py by user agent "
                                 "(rolloutbatch-operator = its own client, kopf = kopf's watches/patches); "
                                 "a watch counts once per connection",
        "apiserver_request_total_delta_all_clients": "kube-apiserver's own counter (all clients: KCM, scheduler, "
                                                     "node agents, bench): no user-agent label exists on it",
        "status_bytes": "len(JSON of .status), compact", "results_configmap_bytes": "len(JSON of data+binaryData)",
        "exact": "succeededEpisodes == rewardSum == results rows == distinct indices == episodes",
    }
    proxy = lib.Proxy()
    # 20 x 100 at parallelism 25: 500 pods at once (4 nodes x 300 pods of capacity)
    plan = {
        "1k-p100": ([(lib.unique("scale-1k"), 1000, 100)], 1800),
        "many-20x100": ([(lib.unique(f"many-{i:02d}"), 100, 25) for i in range(20)], 1800),
        f"big-{big}-p200": ([(lib.unique("scale-big"), big, 200)], 5400),
    }
    namespaces = []
    try:
        for label, (batches, timeout) in plan.items():
            if only and label.split("-")[0] not in only:
                continue
            result, ns = scenario(kube, proxy, label, batches, timeout, profile and label.startswith("big"))
            namespaces.append(ns)
            doc["scenarios"][label] = result
            lib.write_result("scale", doc)
    finally:
        proxy.stop()
        for ns in namespaces:
            kube.delete(f"/api/v1/namespaces/{ns}")
    return doc
