"""The service's error policy: transient errors are retried with a cap, everything else stalls."""
import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube import errors
from rolloutbatch.kube.errors import (BadRequest, ConfigError, Conflict, Forbidden, Gone, Invalid, KubeError, NotOurs,
                                      TimedOut, Unavailable, Unconfirmed)
from rolloutbatch.service.policy import BACKOFF, Retry, is_transient, stall_for


def test_transient_errors():
    assert is_transient(Unavailable("down", status=503)) and is_transient(Conflict("modified", status=409))
    for exc in (Forbidden("no", status=403), Invalid("bad", status=422), NotOurs("theirs"), KubeError("x", status=400),
                TypeError("bug"), ValueError("Out of range float values are not JSON compliant")):
        assert not is_transient(exc), exc


def test_an_expired_list_continuation_is_transient_not_a_refusal():
    """A paged list whose continue token expired (410) failed the batch ApiRequestRefused ("the API
    server refused a request (HTTP 410)"), though listing again from the start, as the retried
    round does, fixes it."""
    exc = errors.classify(410, "The provided continue parameter is too old to display a consistent list result. "
                               "You can start a new list without the continue parameter.", "Expired", "list Pods")
    assert isinstance(exc, Gone) and is_transient(exc)


def test_stall_reasons_are_camelcase_and_known():
    cases = {NotOurs("ConfigMap x exists"): v.STALL_NAME_CONFLICT, Invalid("bad", status=422): v.STALL_API_REFUSED,
             Unavailable("down", status=503): v.STALL_API_UNAVAILABLE, TypeError("unsupported operand"): v.STALL_INTERNAL}
    for exc, reason in cases.items():
        got, message = stall_for(exc)
        assert got == reason and got in v.STALL_REASONS and message
    assert "unsupported operand" in stall_for(TypeError("unsupported operand"))[1]


@pytest.mark.parametrize("exc, says", [
    (BadRequest("patch status of RolloutBatch ns/b: the request body is not valid JSON: NaN"),
     "a request could not be made"),
    (BadRequest("delete RolloutPool ns/: '/apis/x/rolloutpools/' has an empty or dot segment"),
     "a request could not be made"),
    (ConfigError("get Pod ns/p: the kubeconfig's credentials are unusable: no such file"),
     "the operator's credentials are unusable"),
    (TimedOut("exec in ns/p: no exit status within 30s"), "did not finish in its time"),
    (Unconfirmed("attach to ns/p: the container did not confirm its input within 10s"), "never confirmed"),
])
def test_a_stall_for_an_error_no_api_server_answered_does_not_blame_the_api_server(exc, says):
    """An error raised before anything was sent, or with no answer to carry a status (a body JSON
    cannot carry, an empty name in a path, unusable credentials, a call into a pod that timed out
    or was never confirmed) stalled the batch with 'the API server refused a request (HTTP None)'."""
    reason, message = stall_for(exc)
    assert reason == v.STALL_API_REFUSED and says in message and str(exc) in message, message
    assert "HTTP None" not in message and "API server refused" not in message, message


def test_a_stall_for_a_refusal_names_its_http_status():
    reason, message = stall_for(Forbidden("create Job ns/j: forbidden", status=403))
    assert reason == v.STALL_API_REFUSED and message == "the API server refused a request (HTTP 403): create Job ns/j: forbidden"


def test_retry_backs_off_with_a_cap_then_gives_up():
    retry = Retry(give_up_after=100.0)
    delays = [retry.failed(now=float(i)) for i in range(10)]
    assert delays[:len(BACKOFF)] == list(BACKOFF) and max(delays) == BACKOFF[-1]
    assert retry.failed(now=200.0) is None
    retry.succeeded()
    assert retry.failed(now=300.0) == BACKOFF[0]


def test_a_stall_is_recorded_bare_and_never_retried_forever_when_refused():
    from rolloutbatch.service.policy import FULL_STALL_TRIES, keep_recording_stall
    refused, down = Forbidden("no", status=403), Unavailable("down", status=503)
    assert all(keep_recording_stall(a, refused) for a in range(FULL_STALL_TRIES))   # then the bare verdict
    assert not keep_recording_stall(FULL_STALL_TRIES, refused)                    # refused bare: stop
    assert keep_recording_stall(FULL_STALL_TRIES + 50, down)                      # the API is down: keep trying
