"""The service's error policy: transient errors are retried with a cap, everything else stalls."""
from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.errors import Conflict, Forbidden, Invalid, KubeError, NotOurs, Unavailable
from rolloutbatch.service.policy import BACKOFF, Retry, is_transient, stall_for


def test_transient_errors():
    assert is_transient(Unavailable("down", status=503)) and is_transient(Conflict("modified", status=409))
    for exc in (Forbidden("no", status=403), Invalid("bad", status=422), NotOurs("theirs"), KubeError("x", status=400),
                TypeError("bug"), ValueError("Out of range float values are not JSON compliant")):
        assert not is_transient(exc), exc


def test_stall_reasons_are_camelcase_and_known():
    cases = {NotOurs("ConfigMap x exists"): v.STALL_NAME_CONFLICT, Invalid("bad", status=422): v.STALL_API_REFUSED,
             Unavailable("down", status=503): v.STALL_API_UNAVAILABLE, TypeError("unsupported operand"): v.STALL_INTERNAL}
    for exc, reason in cases.items():
        got, message = stall_for(exc)
        assert got == reason and got in v.STALL_REASONS and message
    assert "unsupported operand" in stall_for(TypeError("unsupported operand"))[1]


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
