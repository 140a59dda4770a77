"""Pure builders for the pod status a kubelet reports."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

OWN_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def rfc3339(ts: float) -> str:
    """metav1.Time: second precision, UTC, 'Z'."""
    return _dt.datetime.fromtimestamp(int(ts), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(ts: float) -> str:
    """metav1.MicroTime (Lease renewTime)."""
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def waiting(reason: str, message: str = "") -> dict:
    w = {"reason": reason}
    if message:
        w["message"] = message
    return {"waiting": w}


def running(started_at: float) -> dict:
    return {"running": {"startedAt": rfc3339(started_at)}}


def terminated(exit_code: int, started_at: float | None, finished_at: float, container_id: str = "",
               reason: str | None = None, message: str = "") -> dict:
    t = {"exitCode": int(exit_code),
         "reason": reason or ("Completed" if exit_code == 0 else "Error"),
         "finishedAt": rfc3339(finished_at)}
    if started_at is not None:
        t["startedAt"] = rfc3339(started_at)
    if exit_code > 128 and exit_code - 128 < 65:
        t["signal"] = exit_code - 128
    if container_id:
        t["containerID"] = container_id
    if message:
        t["message"] = message
    return {"terminated": t}


@dataclass
class ContainerView:
    """What the agent knows about one container, enough to render its status."""
    name: str
    image: str
    image_id: str = ""
    container_id: str = ""
    state: dict = field(default_factory=lambda: waiting("ContainerCreating"))
    last_state: dict = field(default_factory=dict)
    restart_count: int = 0

    @property
    def is_running(self) -> bool:
        return "running" in self.state

    @property
    def is_terminated(self) -> bool:
        return "terminated" in self.state

    @property
    def exit_code(self) -> int | None:
        t = self.state.get("terminated")
        return None if t is None else t["exitCode"]


def container_status(c: ContainerView) -> dict:
    d = {"name": c.name, "image": c.image, "imageID": c.image_id,
         "ready": c.is_running, "started": c.is_running,
         "restartCount": c.restart_count, "state": c.state, "lastState": c.last_state}
    if c.container_id:
        d["containerID"] = c.container_id
    return d


def pod_phase(restart_policy: str, containers: list[ContainerView], init_done: bool = True,
              terminal: bool = False) -> str:
    """The kubelet's getPhase, simplified to what this agent can observe.

    terminal=True: the pod is being finished (deletion, deadline): no more restarts.
    """
    if not init_done and not terminal:
        return "Pending"
    if not containers:
        return "Pending"
    if terminal or restart_policy == "Never":
        if all(c.is_terminated for c in containers):
            return "Succeeded" if all(c.exit_code == 0 for c in containers) else "Failed"
        if terminal:
            return "Failed"
    if restart_policy == "OnFailure" and all(c.is_terminated and c.exit_code == 0 for c in containers):
        return "Succeeded"
    if any(c.is_running or c.is_terminated or c.restart_count > 0 for c in containers):
        return "Running"
    return "Pending"


def desired_conditions(phase: str, containers: list[ContainerView], sandbox_ready: bool,
                       init_done: bool) -> dict:
    """type -> (status, reason) for the conditions the kubelet owns."""
    out = {"PodReadyToStartContainers": ("True" if sandbox_ready else "False", "")}
    out["Initialized"] = ("True", "") if init_done else ("False", "ContainersNotInitialized")
    if phase in ("Succeeded", "Failed"):
        ready = ("False", "PodCompleted")
    elif containers and all(c.is_running for c in containers):
        ready = ("True", "")
    else:
        ready = ("False", "ContainersNotReady")
    out["ContainersReady"] = ready
    out["Ready"] = ready
    return out


def merge_conditions(previous: dict, desired: dict, now: float, containers: list[ContainerView]) -> tuple[dict, list[dict]]:
    """Keep lastTransitionTime when a condition's status did not change.

    previous: type -> (status, lastTransitionTime string). Returns (new previous, condition list).
    """
    new_prev, out = {}, []
    not_ready = [c.name for c in containers if not c.is_running]
    for ctype in OWN_CONDITIONS:
        status, reason = desired[ctype]
        old = previous.get(ctype)
        ltt = old[1] if old and old[0] == status else rfc3339(now)
        new_prev[ctype] = (status, ltt)
        cond = {"type": ctype, "status": status, "lastTransitionTime": ltt}
        if reason:
            cond["reason"] = reason
            if reason == "ContainersNotReady" and not_ready:
                cond["message"] = f"containers with unready status: [{' '.join(not_ready)}]"
            elif reason == "ContainersNotInitialized":
                cond["message"] = "containers with incomplete status: init containers"
        out.append(cond)
    return new_prev, out


def pod_status(*, phase: str, conditions: list[dict], containers: list[ContainerView],
               init_containers: list[ContainerView] = (), host_ip: str = "127.0.0.1",
               pod_ip: str | None = None, start_time: float | None = None,
               reason: str | None = None, message: str | None = None) -> dict:
    st = {"phase": phase, "conditions": conditions, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
          "containerStatuses": [container_status(c) for c in containers]}
    if init_containers:
        st["initContainerStatuses"] = [container_status(c) for c in init_containers]
    if pod_ip:
        st["podIP"] = pod_ip
        st["podIPs"] = [{"ip": pod_ip}]
    if start_time is not None:
        st["startTime"] = rfc3339(start_time)
    if reason:
        st["reason"] = reason
    if message:
        st["message"] = message
    return st


def status_patch(uid: str, status: dict) -> dict:
    """Strategic-merge patch body: conditions merge by type (others' conditions such as
    PodScheduled/DisruptionTarget survive), containerStatuses are replaced whole, and the uid
    makes the patch fail instead of touching a recreated pod of the same name."""
    return {"metadata": {"uid": uid}, "status": status}
