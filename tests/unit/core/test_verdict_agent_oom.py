"""A verified Job episode whose agent init container the runtime reported OOMKilled (one of the
agent's own processes was killed for its memory; the launcher, PID 1, exited 0 after its record).
The kubelet counts such an init container as failed (kuberuntime isInitContainerFailed: reason
OOMKilled) and, restartPolicy Never, kills the pod: its verifier never starts, the pod stays Pending
until its deadline. Seen on the devcluster under runc (tests/security/test_pid_exhaustion.py,
test_a_job_agent_cannot_make_its_attempt_lost_by_getting_a_child_oom_killed[runc]). The agent
caused it: it must be the agent's counted failure, not VerifierNotStarted (lost, re-rolled)."""
from __future__ import annotations

import json

from rolloutbatch.core.pod_reading import pod_facts
from tests.unit.core.test_verdict import CREATED, READY, judge_pod


def oom_agent_pod() -> dict:
    agent_msg = json.dumps(READY) + '\n{"event":"agent_exit","exit_code":0,"timed_out":false}\n'
    status = {"phase": "Failed", "reason": "DeadlineExceeded",
              "message": "Pod was active on the node longer than the specified deadline",
              "initContainerStatuses": [{"name": "agent", "state": {"terminated": {
                  "exitCode": 0, "reason": "OOMKilled", "message": agent_msg, "startedAt": CREATED,
                  "finishedAt": "2026-11-29T07:00:02Z"}}}],
              "containerStatuses": [{"name": "verifier", "restartCount": 0,
                                     "state": {"waiting": {"reason": "PodInitializing"}}}]}
    return {"metadata": {"name": "rb-1-3-abc", "namespace": "rb-1", "uid": "u1", "creationTimestamp": CREATED,
                         "annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
            "spec": {"nodeName": "devnode-1"}, "status": status}


def test_an_agent_whose_own_process_was_oom_killed_cannot_make_its_episode_lost():
    r = judge_pod(oom_agent_pod())
    assert pod_facts(oom_agent_pod()).agent.exit_code == 0
    assert r.outcome == "failed" and r.valid, (r.outcome, r.reason, r.message)


def test_such_a_pod_is_judged_failed_while_the_api_still_says_pending():
    """Seen Pending until the pod's deadline: the verdict is known at the OOM kill, not then."""
    pod = oom_agent_pod()
    pod["status"] = {**pod["status"], "phase": "Pending"}
    pod["status"].pop("reason"); pod["status"].pop("message")
    pod["spec"] = {**pod["spec"], "restartPolicy": "Never", "containers": [{"name": "verifier"}],
                   "initContainers": [{"name": "agent"}]}
    assert pod_facts(pod).phase == "Failed"
    r = judge_pod(pod)
    assert (r.outcome, r.reason, r.valid) == ("failed", "NonZeroExit", True), (r.outcome, r.reason, r.message)
    assert "OOMKilled" in r.message


def test_an_agent_init_container_that_ended_otherwise_keeps_the_apis_phase():
    pod = oom_agent_pod()
    pod["status"] = {**pod["status"], "phase": "Pending"}
    pod["spec"] = {**pod["spec"], "restartPolicy": "Never", "containers": [{"name": "verifier"}]}
    pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] = "Completed"
    assert pod_facts(pod).phase == "Pending"
    pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] = "OOMKilled"
    pod["metadata"]["deletionTimestamp"] = CREATED   # being deleted: the kubelet's phase, as for any
    assert pod_facts(pod).phase == "Pending"


def test_a_pooled_agents_oom_kill_leaves_its_verifier_to_grade():
    """A pool's agent is a container beside its verifier: the kubelet runs the verifier anyway."""
    pod = oom_agent_pod()
    pod["metadata"]["annotations"]["rl.agentruntime.io/pooled"] = "true"
    pod["status"]["containerStatuses"] = [
        {"name": "agent", "state": pod["status"].pop("initContainerStatuses")[0]["state"]},
        {"name": "verifier", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]
    pod["status"] = {**pod["status"], "phase": "Running"}
    pod["spec"] = {**pod["spec"], "restartPolicy": "Never",
                   "containers": [{"name": "agent"}, {"name": "verifier"}]}
    facts = pod_facts(pod)
    assert facts.pooled and facts.agent.state == "terminated" and not facts.agent_oom_killed
    assert facts.phase == "Running"   # not settled Failed: its verifier runs next
