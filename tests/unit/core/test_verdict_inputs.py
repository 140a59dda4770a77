"""The inputs init container (Job mode with inputs) failing, or the pod ending in it: the agent
never started, so the episode is lost (never the agent's failure), and its reason says why."""
import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.verdict import is_infrastructure_failure, judge_episode
from rolloutbatch.core.verdict_verified import judge_verified
from rolloutbatch.core.pod_reading import pod_facts

MESSAGE = "rolloutbatch: episode 3: its input input-1.json could not be copied from the inputs ConfigMaps"
WAITING = {"waiting": {"reason": "PodInitializing"}}


def _pod(inputs_state, verifier, phase="Failed", reason=None):
    inits = [{"name": "inputs", "state": inputs_state}]
    if verifier:
        inits.append({"name": "agent", "state": WAITING})
    status = {"phase": phase, "initContainerStatuses": inits,
              "containerStatuses": [{"name": "verifier" if verifier else "episode", "state": WAITING}]}
    if reason:
        status["reason"] = reason
    return {"metadata": {"name": "rb-x-3-abcde", "uid": "u", "creationTimestamp": "2024-01-01T00:00:00Z",
                         "annotations": {v.COMPLETION_INDEX_KEY: "3"}},
            "spec": {"nodeName": "n1"}, "status": status}


def _judge(pod, verifier):
    facts = pod_facts(pod)
    return judge_verified(facts, None, None) if verifier else judge_episode(facts, None)


@pytest.mark.parametrize("verifier", [False, True])
def test_a_failed_copy_loses_the_episode_with_its_message(verifier):
    pod = _pod({"terminated": {"exitCode": 1, "reason": "Error", "message": MESSAGE}}, verifier)
    facts = pod_facts(pod)
    assert facts.inputs_error and MESSAGE in facts.inputs_error and "exited with code 1" in facts.inputs_error
    assert not is_infrastructure_failure(facts)   # podFailurePolicy FailIndex: judged once, not retried
    result = _judge(pod, verifier)
    assert (result.outcome, result.reason) == (v.OUTCOME_LOST, v.EP_INFRASTRUCTURE)
    assert MESSAGE in result.message and "inputs init container" in result.message


@pytest.mark.parametrize("verifier", [False, True])
def test_an_image_without_a_shell_is_lost_not_a_crash(verifier):
    pod = _pod({"terminated": {"exitCode": 128, "reason": "StartError",
                               "message": 'exec: "/bin/sh": stat /bin/sh: no such file or directory'}}, verifier)
    result = _judge(pod, verifier)
    assert (result.outcome, result.reason) == (v.OUTCOME_LOST, v.EP_INFRASTRUCTURE)
    assert "StartError" in result.message and "/bin/sh" in result.message


@pytest.mark.parametrize("verifier", [False, True])
def test_a_pod_that_ended_waiting_in_the_inputs_container_is_lost(verifier):
    pod = _pod({"running": {"startedAt": "2024-01-01T00:00:01Z"}}, verifier, reason="DeadlineExceeded")
    result = _judge(pod, verifier)
    assert (result.outcome, result.reason) == (v.OUTCOME_LOST, v.EP_INFRASTRUCTURE)   # not the agent's Timeout
    assert "before its inputs init container copied" in result.message


@pytest.mark.parametrize("verifier", [False, True])
def test_an_unpullable_image_stays_image_pull_failed(verifier):
    pod = _pod({"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}, verifier)
    result = _judge(pod, verifier)
    assert (result.outcome, result.reason) == (v.OUTCOME_LOST, v.EP_IMAGE_PULL)


@pytest.mark.parametrize("verifier", [False, True])
def test_a_copy_that_succeeded_changes_nothing(verifier):
    done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    pod = _pod(done, verifier)
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 3, "reason": "Error"}}
    if verifier:
        pod["status"]["initContainerStatuses"][1]["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    facts = pod_facts(pod)
    assert facts.inputs_error is None
    assert _judge(pod, verifier).outcome == v.OUTCOME_FAILED   # the agent's own failure, as before
    running = _pod(done, verifier, phase="Running")
    assert pod_facts(running).inputs_error is None


def test_pods_without_an_inputs_container_have_no_inputs_error():
    pod = _pod({"running": {}}, False)
    pod["status"]["initContainerStatuses"] = []
    assert pod_facts(pod).inputs_error is None
