"""Part 2, scale: operator cost per episode for big and many batches, on either episode channel.

Each scenario gets a fresh operator (so VmHWM is that scenario's peak) that talks to the API only
through bench/apiproxy.py, which counts its requests by user agent (kube-apiserver's
apiserver_request_total has no user-agent label; its all-clients delta is recorded beside).
Results are read back the way a trainer reads them: the SDK's reader (head + every shard found
by the batch-uid label, reassembled by core.result_shards.assemble), with the admin kubeconfig
(not through the proxy, after the measurement window).
"""
from __future__ import annotations

import subprocess
import threading
import time

import lib
from lib import GROUP, Kube
from workloads import batch_obj, ensure_namespace, trivial_spec
from rolloutbatch.core import vocabulary
from rolloutbatch.core.results import decode_results
from rolloutbatch.sdk.client import Client
from rolloutbatch.sdk.result_ops import results_name, shard_selector

LISTS_UP_TO = 2000   # per-episode lists (reward_times, pod_to_ready) kept in the JSON up to this many episodes


def _cm_bytes(cm: dict) -> int:
    """len(compact JSON of data + binaryData): the payload as stored (binaryData is base64)."""
    payload = {k: cm.get(k) for k in ("data", "binaryData") if cm.get(k)}
    return len(lib.json.dumps(payload, separators=(",", ":")))


def read_results(client: Client, kube: Kube, rb: dict) -> dict:
    """Every row through the SDK's reader, and the size of every results ConfigMap (head + shards)."""
    meta = rb["metadata"]
    doc = client.results_document(rb)
    rows = doc.get("pods") or []
    head = kube.get(f"/api/v1/namespaces/{meta['namespace']}/configmaps/{results_name(rb)}") or {}
    shards = (kube.get(f"/api/v1/namespaces/{meta['namespace']}/configmaps",
                       labelSelector=shard_selector(meta["uid"])) or {}).get("items") or []
    shard_bytes = sorted(_cm_bytes(cm) for cm in shards)
    total = _cm_bytes(head) + sum(shard_bytes)
    channels: dict[str, int] = {}
    for r in rows:
        channels[str(r.get("channel"))] = channels.get(str(r.get("channel")), 0) + 1
    return {"rows": rows, "head_bytes": _cm_bytes(head), "head_gzipped": bool(head.get("binaryData")),
            "shards": len(shards), "shards_in_head": len((decode_results(head) or {}).get("shards") or []),
            "shard_bytes_min_max": [shard_bytes[0], shard_bytes[-1]] if shard_bytes else None,
            "shards_gzipped": sum(1 for cm in shards if cm.get("binaryData")),
            "total_bytes": total, "unreadable_shards": doc.get("unreadable_shards") or [],
            "rows_json_bytes": len(lib.json.dumps(rows, separators=(",", ":"))), "channels": channels}


def _wait_namespaces_gone(kube: Kube, names: list[str], timeout: float) -> float:
    """Sandbox namespaces of a finished scenario, so their deletion does not load the next one."""
    t0 = time.monotonic()
    for ns in names:
        kube.wait_gone(f"/api/v1/namespaces/{ns}", timeout=max(1.0, timeout - (time.monotonic() - t0)))
    return round(time.monotonic() - t0, 1)


def scenario(kube: Kube, proxy: lib.Proxy, label: str, batches: list[tuple[str, int, int]], timeout: float,
             profile: bool = False, channel: str = "stdout") -> dict:
    machine = lib.machine_info()   # at the start: the code (git commit) the scenario ran
    ns = lib.unique(f"bench-{label}")
    ensure_namespace(kube, ns)
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
            if cond.get("type") in (vocabulary.CONDITION_READY, vocabulary.CONDITION_STALLED) \
                    and cond.get("status") == vocabulary.CONDITION_TRUE:
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
                    batch_obj(name, trivial_spec(episodes, par, channel), episodeTimeoutSeconds=600,
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
    client = Client(kubeconfig=kube.kubeconfig)
    sandboxes = []
    for name, episodes, par in batches:
        rb = kube.get(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}") or objects.get(name) or {}
        st = rb.get("status") or {}
        if st.get("sandboxNamespace") and st["sandboxNamespace"] != ns:
            sandboxes.append(st["sandboxNamespace"])
        t_read = time.time()
        res = read_results(client, kube, rb) if rb else {"rows": [], "total_bytes": 0, "shards": 0}
        read_seconds = round(time.time() - t_read, 2)
        rows = res.pop("rows")
        indices = {r.get("index") for r in rows}
        ok = (st.get("succeededEpisodes") == episodes and len(rows) == episodes and len(indices) == episodes
              and indices == set(range(episodes)) and st.get("rewardSum") == episodes
              and sum(1 for r in rows if r.get("valid") is True and r.get("reward") == 1.0) == episodes
              and not res.get("unreadable_shards"))
        exact = exact and ok
        reward_times = sorted(r["batch_to_reward_seconds"] for r in rows if r.get("batch_to_reward_seconds") is not None)
        pod_to_ready = sorted(r["pod_to_ready_seconds"] for r in rows if r.get("pod_to_ready_seconds") is not None)
        per_batch[name] = {
            "episodes": episodes, "parallelism": par, "channel": channel, "phase": st.get("phase"),
            "wall_to_ready_seconds": round(finished[name] - t0, 3) if name in finished else None,
            "succeededEpisodes": st.get("succeededEpisodes"), "failedEpisodes": st.get("failedEpisodes"),
            "lostEpisodes": st.get("lostEpisodes"), "rewardSum": st.get("rewardSum"),
            "results_rows": len(rows), "distinct_indices": len(indices), "exact": ok,
            "rows_by_channel": res.get("channels"),
            "status_bytes": len(lib.json.dumps(st, separators=(",", ":"))),
            "results_shards": res.get("shards"), "results_shards_in_head": res.get("shards_in_head"),
            "results_configmaps_total_bytes": res.get("total_bytes"),
            "results_bytes_per_row": round(res["total_bytes"] / len(rows), 1) if rows else None,
            "results_head_bytes": res.get("head_bytes"), "results_head_gzipped": res.get("head_gzipped"),
            "results_shard_bytes_min_max": res.get("shard_bytes_min_max"),
            "results_shards_gzipped": res.get("shards_gzipped"),
            "results_rows_json_bytes": res.get("rows_json_bytes"),
            "results_unreadable_shards": res.get("unreadable_shards"),
            "results_read_seconds": read_seconds,
            "guide_metrics": {"batch_to_all_ready_seconds": st.get("batchToAllReadySeconds"),
                              "batch_to_all_rewards_seconds": st.get("batchToAllRewardsSeconds"),
                              "pod_to_ready": st.get("podToReadySeconds"),
                              "job_complete_seconds": st.get("jobCompleteSeconds")},
            "reward_times_summary": lib.summary(reward_times), "pod_to_ready_summary": lib.summary(pod_to_ready),
        }
        if episodes <= LISTS_UP_TO:
            per_batch[name]["reward_times"] = reward_times
            per_batch[name]["pod_to_ready"] = pod_to_ready
    op_requests = sum(c["count"] for c in counts)
    by_agent: dict[str, int] = {}
    for c in counts:
        by_agent[c["user_agent"]] = by_agent.get(c["user_agent"], 0) + c["count"]
    out = {
        "label": label, "machine": machine, "channel": channel,
        "batches": len(batches), "episodes": total_eps,
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
        "results_configmaps_total_bytes": sum(b["results_configmaps_total_bytes"] or 0 for b in per_batch.values()),
        "results_shards": sum(b["results_shards"] or 0 for b in per_batch.values()),
        "exact_counts": exact,
        "progress": [(round(t - t0, 3), n, f, r) for t, n, f, r in progress],
        "per_batch": per_batch,
        "profile": f"profile-{label}.svg" if profile else None,
    }
    print(f"[scale] {label}: {total_eps} episodes in {out['wall_seconds']}s, cpu {out['operator_cpu_ms_per_episode']} ms/ep, "
          f"{out['operator_api_requests_per_episode']} req/ep, peak RSS {out['operator_peak_rss_mib']} MiB, "
          f"status {out['max_status_bytes']} B, results {out['results_configmaps_total_bytes']} B in "
          f"{out['results_shards']} shards, exact {exact}", flush=True)
    for name in names:  # while the operator runs: its finalizer releases them
        kube.delete(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}")
    for name in names:
        kube.wait_gone(f"{GROUP}/namespaces/{ns}/rolloutbatches/{name}", timeout=600)
    op.stop()
    out["sandbox_cleanup_seconds"] = _wait_namespaces_gone(kube, sandboxes, 900)
    return out, ns


def selected(label: str, only: list[str] | None) -> bool:
    """--only names a family (the label's first word: 1k, many, big, huge) or one exact label."""
    return not only or label in only or label.split("-")[0] in only


def part_scale(kube: Kube, big: int, profile: bool, only: list[str] | None = None, huge: int = 30000,
               huge_parallelism: int = 200, huge_channel: str = "stdout") -> dict:
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
                                                     "kubelets, bench): no user-agent label exists on it",
        "status_bytes": "len(JSON of .status), compact",
        "results_configmaps_total_bytes": "sum over the head ConfigMap <batch>-results and every shard ConfigMap "
                                          "(label batch-uid + role=results-shard) of len(compact JSON of "
                                          "data+binaryData); binaryData (gzip) counts as its base64",
        "results_bytes_per_row": "results_configmaps_total_bytes / rows",
        "results_rows": "rows of the document the SDK's reader (Client.results_document: head + shards, "
                        "core.result_shards.assemble) returns, read with the admin kubeconfig after the window",
        "exact": "succeededEpisodes == rewardSum == results rows == distinct indices == episodes, indices are "
                 "exactly 0..episodes-1, every row valid with reward 1.0, no unreadable shard",
        "channel": "stdout: the episode prints its events (one log read per pod); termination-message: it writes "
                   "them to /dev/termination-log (judged from the pod status, no log read)",
        "labels": "-tm = termination-message episodes; -profiled = run under py-spy (CPU numbers perturbed)",
    }
    proxy = lib.Proxy()
    # label -> (batches, timeout, channel). 20 x 100 at parallelism 25: 500 pods at once (4 nodes x 300 pods).
    plan: dict[str, tuple[list[tuple[str, int, int]], float, str]] = {}
    for suffix, channel in (("", "stdout"), ("-tm", "termination-message")):
        plan[f"1k-p100{suffix}"] = ([(lib.unique("scale-1k"), 1000, 100)], 1800, channel)
    tm = "-tm" if huge_channel == "termination-message" else ""
    plan[f"huge-{huge}-p{huge_parallelism}{tm}"] = ([(lib.unique("scale-huge"), huge, huge_parallelism)], 3 * 3600,
                                                  huge_channel)
    for suffix, channel in (("", "stdout"), ("-tm", "termination-message")):
        plan[f"big-{big}-p200{suffix}"] = ([(lib.unique("scale-big"), big, 200)], 5400, channel)
    for suffix, channel in (("", "stdout"), ("-tm", "termination-message")):
        plan[f"many-20x100{suffix}"] = ([(lib.unique(f"many-{i:02d}"), 100, 25) for i in range(20)], 1800, channel)
    namespaces = []
    try:
        for label, (batches, timeout, channel) in plan.items():
            if not selected(label, only):
                continue
            key = f"{label}-profiled" if profile else label
            result, ns = scenario(kube, proxy, key, batches, timeout, profile, channel)
            namespaces.append(ns)
            doc["scenarios"][key] = result
            lib.write_result("scale", doc)
    finally:
        proxy.stop()
        for ns in namespaces:
            kube.delete(f"/api/v1/namespaces/{ns}")
    return doc
