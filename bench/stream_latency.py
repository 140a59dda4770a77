"""Reward-event-to-row-in-trainer latency of ``BatchHandle.stream()``, and the bytes
the operator writes to the results ConfigMaps per row.

    flock /tmp/rolloutbatch-cluster.lock .venv/bin/python bench/stream_latency.py [--episodes 200]

Starts its own operator (as the tests do), submits one grouped batch whose episodes print their
reward at staggered times, and for every row records ``receipt - row["reward_at"]``: the
episode's own ``time.time()`` at its reward event (the devcluster's nodes share this machine's
clock) to the moment ``stream()`` handed the row over. A second watch of the batch's results
ConfigMaps sums the size of every version the operator wrote. Writes
``bench/results/stream-latency.json``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "operator"))

from rolloutbatch.sdk import Client, Task, build_batch  # noqa: E402
from rolloutbatch.sdk.follow import ListWatch  # noqa: E402

EPISODE = """
import json, os, time
def emit(event, **f):
    print(json.dumps({"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **f}), flush=True)
emit("ready")
time.sleep(0.25 * (int(os.environ["EPISODE_INDEX"]) % 40))
emit("reward", reward=1.0)
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def count_writes(client: Client, namespace: str, uid: str, stop: threading.Event, totals: dict) -> None:
    watch = ListWatch(f"/api/v1/namespaces/{namespace}/configmaps",
                      label_selector=f"rl.agentruntime.io/batch-uid={uid}", watch_seconds=30)
    seen: set[str] = set()
    while not stop.is_set():
        try:
            if watch.listing:
                events = watch.on_list(client.api.get(watch.path, "list", **watch.list_params()))
            else:
                response = client.api.raw(watch.path, "watch", timeout=(10, 60), **watch.watch_params())
                events = []
                for line in response.iter_lines():
                    event = watch.on_line(line)
                    if event:
                        events.append(event)
                        break
                response.close()
            for kind, obj in events:
                version = obj["metadata"].get("resourceVersion")
                if kind != "DELETED" and version not in seen:
                    seen.add(version)
                    size = sum(len(v) for v in (obj.get("data") or {}).values()) + \
                        sum(len(v) for v in (obj.get("binaryData") or {}).values())
                    totals["writes"] += 1
                    totals["bytes"] += size
        except Exception:  # noqa: BLE001 - a counting side channel; the stream is what is measured
            time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--parallelism", type=int, default=100)
    parser.add_argument("--namespace", default="bench-stream")
    args = parser.parse_args()
    from tests.support.kube import kubeconfig_path
    from tests.support.operator import OperatorProcess, install_crd, kubectl

    install_crd()
    kubectl("create", "namespace", args.namespace, check=False)
    operator = OperatorProcess("bench-stream")
    operator.start()
    try:
        client = Client(str(kubeconfig_path()), namespace=args.namespace)
        groups = args.episodes // args.samples
        batch = build_batch("latency-", Task(files={"episode.py": EPISODE}, command=["python", "-B", "/task/episode.py"]),
                            episodes=groups * args.samples, samples_per_input=args.samples,
                            inputs=[{"g": g} for g in range(groups)], parallelism=args.parallelism,
                            episode_timeout_seconds=300, active_deadline_seconds=900)
        handle = client.submit(batch)
        totals = {"writes": 0, "bytes": 0}
        stop = threading.Event()
        threading.Thread(target=count_writes, args=(client, args.namespace, handle.uid, stop, totals), daemon=True).start()
        latencies, rows = [], 0
        for row in handle.stream(timeout=900):
            now = time.time()
            rows += 1
            if row.get("reward_at") is not None:
                latencies.append(now - row["reward_at"])
        time.sleep(2)
        stop.set()
        status = handle.refresh()
        handle.delete(wait=True, timeout=300)
    finally:
        operator.stop()
    result = {
        "episodes": groups * args.samples, "samples_per_input": args.samples, "parallelism": args.parallelism,
        "rows_streamed": rows, "phase": status.get("phase"),
        "latency_seconds": {"n": len(latencies), "p50": round(percentile(latencies, 0.5), 3),
                            "p95": round(percentile(latencies, 0.95), 3), "max": round(max(latencies), 3),
                            "mean": round(statistics.fmean(latencies), 3)},
        "results_writes": totals["writes"], "results_bytes_written": totals["bytes"],
        "bytes_written_per_row": round(totals["bytes"] / max(1, rows)),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = ROOT / "bench" / "results" / "stream-latency.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
