"""A mid-run snapshot of a running scale scenario, with the scenario's own measures.

For a scenario that cannot be waited for (the 2026-12-01 30,000-episode run on a shared machine
ran out of time): the operator's CPU (utime+stime) and VmHWM from /proc, the counting proxy's
counters (they were reset when the scenario started its batches), the batch's status and every
results row read through the SDK's reader (head + shards by label), plus the sizes of the results
ConfigMaps. Read-only: nothing is created, deleted or reset.

  python bench/snapshot.py OPERATOR_PID PROXY_PORT NAMESPACE BATCH LABEL [--started UNIX_TIME]

writes bench/results/<LABEL>-snapshot.json.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "operator"))
sys.path.insert(0, str(HERE))

import lib  # noqa: E402
from lib import GROUP, Kube  # noqa: E402
from rolloutbatch.sdk.client import Client  # noqa: E402
from scale import read_results  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pid", type=int)
    p.add_argument("proxy_port", type=int)
    p.add_argument("namespace")
    p.add_argument("batch")
    p.add_argument("label")
    p.add_argument("--started", type=float, help="unix time the scenario created the batch (default: its "
                                                 "creationTimestamp, 1 s resolution)")
    p.add_argument("--cpu-at-start", type=float, default=0.0, help="operator CPU seconds when the batch was created "
                                                                   "(default 0: the operator's start-up is included)")
    args = p.parse_args()
    kube = Kube()
    t = time.time()
    cpu = lib.proc_cpu_seconds(args.pid) - args.cpu_at_start
    hwm, rss = lib.proc_status(args.pid, "VmHWM"), lib.proc_status(args.pid, "VmRSS")
    counts = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{args.proxy_port}/__bench/counts", timeout=10).read())
    rb = kube.get(f"{GROUP}/namespaces/{args.namespace}/rolloutbatches/{args.batch}")
    st = rb.get("status") or {}
    res = read_results(Client(kubeconfig=kube.kubeconfig), kube, rb)
    rows = res.pop("rows")
    indices = {r.get("index") for r in rows}
    done = int(st.get("succeededEpisodes") or 0) + int(st.get("failedEpisodes") or 0)
    requests = sum(c["count"] for c in counts)
    started = args.started or lib.parse_ts(rb["metadata"].get("creationTimestamp"))
    elapsed = t - started if started else None
    out = {
        "label": args.label, "snapshot_at": t, "machine": lib.machine_info(),
        "episodes_planned": (rb.get("spec") or {}).get("episodes"), "phase": st.get("phase"),
        "finished_in_status": done, "succeededEpisodes": st.get("succeededEpisodes"),
        "failedEpisodes": st.get("failedEpisodes"), "rewardSum": st.get("rewardSum"),
        "elapsed_seconds": round(elapsed, 1) if elapsed else None,
        "episodes_per_second": round(done / elapsed, 2) if elapsed else None,
        "operator_cpu_seconds": round(cpu, 2), "operator_cpu_ms_per_episode": round(1000 * cpu / done, 3) if done else None,
        "operator_peak_rss_mib": round(hwm / 2**20, 1), "operator_rss_mib": round(rss / 2**20, 1),
        "operator_api_requests": requests, "operator_api_requests_per_episode": round(requests / done, 3) if done else None,
        "operator_api_requests_detail": sorted(counts, key=lambda c: -c["count"]),
        "results_rows": len(rows), "distinct_indices": len(indices),
        "rows_minus_status": len(rows) - done,
        "all_valid_reward_1": all(r.get("valid") is True and r.get("reward") == 1.0 for r in rows),
        "status_bytes": len(json.dumps(st, separators=(",", ":"))),
        "results_bytes_per_row": round(res["total_bytes"] / len(rows), 1) if rows else None,
        **{f"results_{k}": v for k, v in res.items()},
        "note": "taken while the batch was still running: rows (written first) and status are written ~1 s apart, so "
                "they can differ by one checkpoint",
    }
    lib.write_result(f"{args.label}-snapshot", out)
    print({k: v for k, v in out.items() if k not in ("machine", "operator_api_requests_detail")})


if __name__ == "__main__":
    main()
