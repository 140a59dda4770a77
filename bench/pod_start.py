"""Pod start latency on the running devcluster's nodes: create -> Running, one at a time and 20 at
once, for each RuntimeClass given. A benchmark: nothing asserts a time.

    python bench/pod_start.py [--runtime-class cube] [--runtime-class runc] [--repeats 10] [--burst 20]

`runc` means no runtimeClassName (containerd's default handler), `cube` gVisor. Writes
bench/results/pod-start-containerd.json (pod-start-nodeagent.json beside it is the same
measurement against the Python node agent the devcluster ran before its real nodes).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "operator"))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import lib  # noqa: E402
from lib import Kube  # noqa: E402
from workloads import ensure_namespace  # noqa: E402

SLEEPER = "import time; time.sleep(600)"


def _pod(name: str, runtime_class: str) -> dict:
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "python:3.12-alpine", "imagePullPolicy": "IfNotPresent",
                            "command": ["python3", "-c", SLEEPER]}]}
    if runtime_class != "runc":
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _running_at(kube: Kube, ns: str, names: set[str], timeout: float) -> dict[str, float]:
    """Local time each pod was first seen Running (watch), by name."""
    seen: dict[str, float] = {}
    done = threading.Event()

    def on_event(now: float, type_: str, pod: dict) -> None:
        name = pod["metadata"]["name"]
        if name in names and name not in seen and (pod.get("status") or {}).get("phase") == "Running":
            seen[name] = now
            if len(seen) == len(names):
                done.set()

    watch = lib.start_watch(kube, f"/api/v1/namespaces/{ns}/pods", on_event)
    done.wait(timeout)
    watch.stop()
    return seen


def measure(kube: Kube, ns: str, runtime_class: str, count: int, label: str) -> list[float]:
    """Create `count` pods at once; seconds from each create to its Running."""
    names = {lib.unique(f"{label}-{runtime_class}") for _ in range(count)}
    created: dict[str, float] = {}
    waiter: dict = {}
    t = threading.Thread(target=lambda: waiter.update(_running_at(kube, ns, names, 300)))
    t.start()
    time.sleep(0.3)   # the watch is open before the first create
    for name in names:
        created[name] = time.time()
        kube.create(f"/api/v1/namespaces/{ns}/pods", _pod(name, runtime_class))
    t.join()
    for name in names:
        kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
    for name in names:
        kube.wait_gone(f"/api/v1/namespaces/{ns}/pods/{name}")
    return [round(waiter[n] - created[n], 4) for n in names if n in waiter]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runtime-class", action="append", dest="classes")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--burst", type=int, default=20)
    args = p.parse_args()
    classes = args.classes or ["runc", "cube"]
    kube = Kube()
    node_runtime = "containerd"
    ns = lib.unique("bench-podstart")
    ensure_namespace(kube, ns)
    deadline = time.monotonic() + 60   # ServiceAccount admission refuses pods until KCM made `default`
    while kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default") is None and time.monotonic() < deadline:
        time.sleep(0.2)
    doc = {"machine": lib.machine_info(), "node_runtime": node_runtime, "classes": {}}
    try:
        for rc in classes:
            single = [v for _ in range(args.repeats) for v in measure(kube, ns, rc, 1, "one")]
            burst = measure(kube, ns, rc, args.burst, "burst")
            doc["classes"][rc] = {"one_at_a_time": lib.summary(single), f"{args.burst}_at_once": lib.summary(burst)}
            print(f"[pod-start] {node_runtime}/{rc}: one {doc['classes'][rc]['one_at_a_time']} "
                  f"burst {doc['classes'][rc][f'{args.burst}_at_once']}", flush=True)
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}")
    lib.write_result(f"pod-start-{node_runtime}", doc)


if __name__ == "__main__":
    main()
