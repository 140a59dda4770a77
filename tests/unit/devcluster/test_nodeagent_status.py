"""devcluster.nodeagent.status: pod/container status builders and phase rules."""
from __future__ import annotations

from devcluster.nodeagent import status as S
from devcluster.nodeagent.status import ContainerView

T0 = 1_800_000_000.0


def _view(state, restarts=0):
    return ContainerView(name="main", image="python:3.12", image_id="id", container_id="bwrap://x",
                         state=state, restart_count=restarts)


def test_rfc3339():
    assert S.rfc3339(T0 + 0.9) == "2027-01-15T08:00:00Z"
    assert S.rfc3339_micro(T0 + 0.25).endswith(".250000Z")


def test_terminated_reason_and_signal():
    t = S.terminated(0, T0, T0 + 1, "bwrap://x")["terminated"]
    assert t["reason"] == "Completed" and t["exitCode"] == 0 and t["containerID"] == "bwrap://x"
    assert "signal" not in t
    t = S.terminated(137, T0, T0 + 1)["terminated"]
    assert t["reason"] == "Error" and t["signal"] == 9
    assert S.terminated(1, None, T0)["terminated"].get("startedAt") is None


def test_phase_never():
    ok, bad = _view(S.terminated(0, T0, T0)), _view(S.terminated(2, T0, T0))
    assert S.pod_phase("Never", [ok]) == "Succeeded"
    assert S.pod_phase("Never", [ok, bad]) == "Failed"
    assert S.pod_phase("Never", [_view(S.running(T0))]) == "Running"
    assert S.pod_phase("Never", [_view(S.waiting("ContainerCreating"))]) == "Pending"


def test_phase_onfailure_and_always():
    assert S.pod_phase("OnFailure", [_view(S.terminated(0, T0, T0))]) == "Succeeded"
    assert S.pod_phase("OnFailure", [_view(S.terminated(1, T0, T0))]) == "Running"
    assert S.pod_phase("Always", [_view(S.terminated(0, T0, T0))]) == "Running"
    # terminal (deletion/deadline): no more restarts
    assert S.pod_phase("Always", [_view(S.terminated(0, T0, T0))], terminal=True) == "Succeeded"
    assert S.pod_phase("Always", [_view(S.running(T0))], terminal=True) == "Failed"


def test_container_status_running_is_ready_and_started():
    d = S.container_status(_view(S.running(T0), restarts=2))
    assert d["ready"] is True and d["started"] is True and d["restartCount"] == 2
    assert d["state"] == {"running": {"startedAt": S.rfc3339(T0)}}
    d = S.container_status(_view(S.terminated(0, T0, T0)))
    assert d["ready"] is False and d["started"] is False


def test_conditions_keep_transition_time_until_status_changes():
    running = [_view(S.running(T0))]
    prev, conds = S.merge_conditions({}, S.desired_conditions("Running", running, True, True), T0, running)
    assert [c["type"] for c in conds] == list(S.OWN_CONDITIONS)
    assert all(c["status"] == "True" for c in conds)
    done = [_view(S.terminated(0, T0, T0 + 5))]
    prev2, conds2 = S.merge_conditions(prev, S.desired_conditions("Succeeded", done, True, True), T0 + 100, done)
    by = {c["type"]: c for c in conds2}
    assert by["Ready"]["status"] == "False" and by["Ready"]["reason"] == "PodCompleted"
    assert by["Ready"]["lastTransitionTime"] == S.rfc3339(T0 + 100)
    assert by["Initialized"]["lastTransitionTime"] == S.rfc3339(T0)


def test_not_ready_message_names_containers():
    waiting = [_view(S.waiting("CreateContainerConfigError", "x"))]
    _, conds = S.merge_conditions({}, S.desired_conditions("Pending", waiting, False, True), T0, waiting)
    ready = {c["type"]: c for c in conds}["Ready"]
    assert ready["reason"] == "ContainersNotReady" and "[main]" in ready["message"]


def test_pod_status_and_patch():
    st = S.pod_status(phase="Failed", conditions=[], containers=[_view(S.terminated(1, T0, T0))],
                      pod_ip="10.244.1.2", start_time=T0, reason="DeadlineExceeded", message="m")
    assert st["hostIP"] == "127.0.0.1" and st["hostIPs"] == [{"ip": "127.0.0.1"}]
    assert st["podIPs"] == [{"ip": "10.244.1.2"}] and st["startTime"] == S.rfc3339(T0)
    assert st["reason"] == "DeadlineExceeded" and len(st["containerStatuses"]) == 1
    assert "initContainerStatuses" not in st
    assert S.status_patch("u1", st) == {"metadata": {"uid": "u1"}, "status": st}
