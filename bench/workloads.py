"""One run of each kind the bench compares, and the specs they run: a bare Indexed Job built by the
operator's own manifest builders, and a RolloutBatch, each watched to the end.

Shared by run.py, modes.py and scale.py (imported after run.py put the operator on sys.path).
"""
from __future__ import annotations

import copy
import pathlib
import threading
import time

import yaml

import lib
from lib import GROUP, Kube
from rolloutbatch.core import manifests, vocabulary
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"


def shipping_spec(parallelism: int = 10) -> dict:
    spec = yaml.safe_load((EXAMPLES / "shipping-fix-parallel.yaml").read_text())["spec"]
    spec["parallelism"] = parallelism
    return spec


TRIVIAL_RUNTIME_CLASS = "runc"
TRIVIAL_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}


def trivial_spec(episodes: int = 10, parallelism: int = 10, channel: str = "stdout") -> dict:
    """The trivial episode: ready, reward 1.0, exit. ``channel`` "stdout" (a log read per pod) or
    "termination-message" (events in /dev/termination-log: judged from the pod status)."""
    program = {"stdout": lib.TRIVIAL, "termination-message": lib.TRIVIAL_TERMINATION_MESSAGE}[channel]
    spec = shipping_spec()
    spec.update(episodes=episodes, parallelism=parallelism, task={"mountPath": "/task", "files": {"episode.py": program}})
    # What is measured is the operator and the pod pipeline, not the sandbox: runc, and a CPU
    # request small enough that a parallelism of 100-200 fits nodes that report the machine's
    # 2 CPUs each (the guide's 100m would hold ~19 pods per node, `cube`'s overhead ~5).
    spec.update(runtimeClassName=TRIVIAL_RUNTIME_CLASS, resources=TRIVIAL_RESOURCES)
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

def wait_timeout(spec_raw: dict) -> float:
    """How long a workload may take before the bench gives up on it: 600 s, or 3 s an episode
    (1,000 x p100 took 1,143 s on real nodes here). Past it the bench fails: a time cut short by
    its own wait is not a measurement."""
    return max(600.0, 3.0 * int(spec_raw.get("episodes", 1)))


class WorkloadTimedOut(RuntimeError):
    """A workload the bench waited for did not finish within :func:`wait_timeout`."""


def run_bare(kube: Kube, ns: str, name: str, spec_raw: dict, timeout: float | None = None) -> dict:
    """ConfigMap + Indexed Job built by the operator's own manifest builders (Shared isolation,
    no owner), watched directly: created -> Job Complete observed -> pods listed and logs read.
    Raises WorkloadTimedOut when the Job did not finish within ``timeout`` (:func:`wait_timeout`)."""
    spec = parse_spec({**spec_raw, "isolation": {"namespace": vocabulary.ISOLATION_SHARED,
                                                "network": vocabulary.NETWORK_DENY_ALL}})
    import uuid
    ref = BatchRef(namespace=ns, name=name, uid=str(uuid.uuid4()))
    job = manifests.job(ref, spec, None)
    cm = manifests.task_configmap(ref, spec, None)
    done = threading.Event()
    job_seen: dict = {}

    def on_job(now, type_, obj):
        job_seen.setdefault("created", now)
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("status") == vocabulary.CONDITION_TRUE and cond.get("type") in ("Complete", "Failed"):
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
    timeout = wait_timeout(spec_raw) if timeout is None else timeout
    if not done.wait(timeout):
        w_job.stop(), w_pod.stop()
        raise WorkloadTimedOut(f"bare Job {ns}/{name}: not finished within {timeout:g}s")
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


def run_batch(kube: Kube, ns: str, name: str, spec_raw: dict, timeout: float | None = None,
              detail: bool = True) -> dict:
    """A RolloutBatch (sandbox kept until the bench read the pods), watched until Ready=True.
    Raises WorkloadTimedOut when it was not ready within ``timeout`` (:func:`wait_timeout`)."""
    obj = batch_obj(name, spec_raw, cleanup={"sandbox": vocabulary.CLEANUP_NEVER})
    seen: dict = {"phases": {}}
    done = threading.Event()

    def on_rb(now, type_, rb):
        status = rb.get("status") or {}
        seen["phases"].setdefault(status.get("phase") or "-", now)
        ready = condition(rb, vocabulary.CONDITION_READY)
        if ready and ready.get("status") == vocabulary.CONDITION_TRUE:
            seen.setdefault("ready", now)
            seen["object"] = rb
            done.set()
        stalled = condition(rb, vocabulary.CONDITION_STALLED)
        if stalled and stalled.get("status") == vocabulary.CONDITION_TRUE:
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
    timeout = wait_timeout(spec_raw) if timeout is None else timeout
    if not done.wait(timeout):
        for w in (w_rb, w_pod, w_job):
            if w:
                w.stop()
        raise WorkloadTimedOut(f"RolloutBatch {ns}/{name}: not ready within {timeout:g}s")
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
