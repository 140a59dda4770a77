"""kube.pod_exec's channel protocol, without a server: frames, stdin, output bounds, the status."""
from __future__ import annotations

import json

import pytest

from rolloutbatch.kube import pod_exec as pe

FAILURE_3 = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
             "message": "command terminated with non-zero exit code: command terminated with exit code 3",
             "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
# What the devcluster answers for a command the runtime cannot start (no exit code: it never ran).
NOT_STARTED = {"metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
               "message": 'Internal error occurred: error executing command in container: ... exec: "nope": '
                          "executable file not found in $PATH",
               "details": {"causes": [{"message": "executable file not found in $PATH"}]}}


def test_a_frame_is_its_channel_byte_then_its_data():
    assert pe.frame(pe.STDIN, b"abc") == b"\x00abc"
    assert pe.frame(pe.CLOSE, b"\x00") == b"\xff\x00"
    assert pe.split_frame(b"\x01hello") == (pe.STDOUT, b"hello")
    assert pe.split_frame(b"\x02") == (pe.STDERR, b"")   # a channel's empty message: nothing for it
    assert pe.split_frame(b"") is None


def test_stdin_goes_in_chunks_and_only_v5_closes_it():
    data = bytes(range(256)) * 300   # 76,800 bytes
    v5 = pe.stdin_frames(data, "v5.channel.k8s.io", chunk=32 * 1024)
    assert [len(f) for f in v5] == [1 + 32768, 1 + 32768, 1 + 11264, 2]
    assert all(f[0] == pe.STDIN for f in v5[:-1]) and v5[-1] == b"\xff\x00"
    assert b"".join(f[1:] for f in v5[:-1]) == data
    v4 = pe.stdin_frames(data, "v4.channel.k8s.io", chunk=32 * 1024)
    assert v4 == v5[:-1]   # v4 cannot say end of file
    assert pe.stdin_frames(b"", "v5.channel.k8s.io") == [b"\xff\x00"]


@pytest.mark.parametrize("status, code", [
    ({"metadata": {}, "status": "Success"}, 0),
    (FAILURE_3, 3),
    ({**FAILURE_3, "details": {"causes": [{"reason": "ExitCode", "message": "255"}]}}, 255),
    ({**FAILURE_3, "details": {"causes": [{"reason": "Other", "message": "x"}, {"reason": "ExitCode",
                                                                              "message": " 7 "}]}}, 7),
    ({**FAILURE_3, "details": {"causes": [{"reason": "ExitCode", "message": "seven"}]}}, None),
    ({**FAILURE_3, "details": {}}, None),
    (NOT_STARTED, None),
    ({}, None),
    ({"status": "Failure", "reason": "NonZeroExitCode", "details": {"causes": ["not a mapping"]}}, None),
])
def test_the_exit_code_comes_from_the_final_status(status, code):
    assert pe.exit_code(status) == code


def test_a_status_that_is_not_a_json_object_is_a_failure_quoting_it():
    assert pe.parse_status(json.dumps(FAILURE_3).encode()) == FAILURE_3
    for body in (b"not json", b"[1, 2]", b"\xff\xfe"):
        status = pe.parse_status(body)
        assert status["status"] == "Failure" and status["message"].startswith("the status channel held no JSON")
        assert pe.exit_code(status) is None


def test_output_is_kept_per_channel_up_to_the_limit_and_the_status_at_the_end():
    out = pe._Output(limit=10)
    for message in (b"\x01hello ", b"\x02oops", b"", b"\x01world, and more", b"\x09ignored",
                    b"\x03" + json.dumps(FAILURE_3).encode()[:20], b"\x03" + json.dumps(FAILURE_3).encode()[20:]):
        out.feed(message)
    result = out.result("v5.channel.k8s.io")
    assert result.stdout == b"hello worl" and result.stdout_truncated
    assert result.stderr == b"oops" and not result.stderr_truncated
    assert result.exit_code == 3 and result.status == FAILURE_3   # a status split over two messages
    assert "exit code 3" in result.message and result.protocol == "v5.channel.k8s.io"


def test_output_exactly_at_the_limit_is_not_truncated():
    out = pe._Output(limit=4)
    out.feed(b"\x01ab")
    out.feed(b"\x01cd")
    out.feed(b'\x03{"status": "Success"}')
    result = out.result("v4.channel.k8s.io")
    assert (result.stdout, result.stdout_truncated, result.exit_code, result.message) == (b"abcd", False, 0, "")


def test_output_is_heard_frame_by_frame_all_of_it_past_the_limit_too():
    heard = []
    out = pe._Output(limit=4, on_output=lambda stream, data: heard.append((stream, data)))
    for message in (b"\x01ab", b"\x02err", b"\x01", b"\x01cdef", b'\x03{"status": "Success"}'):
        out.feed(message)
    assert heard == [("stdout", b"ab"), ("stderr", b"err"), ("stdout", b"cdef")]
    assert out.result(pe.V5).stdout == b"abcd"          # the result keeps its limit


def test_a_status_without_end_is_bounded():
    out = pe._Output(limit=4)
    for _ in range(100):
        out.feed(b"\x03" + b"x" * 4096)
    assert len(out.status_data) == pe.MAX_STATUS


def test_the_query_names_each_word_and_asks_for_stdin_only_with_some():
    assert pe.exec_query(["sh", "-c", "echo a b"], "main", True) == [
        ("command", "sh"), ("command", "-c"), ("command", "echo a b"), ("container", "main"),
        ("stdout", "true"), ("stderr", "true"), ("stdin", "true")]
    assert pe.exec_query(["true"], None, False) == [("command", "true"), ("stdout", "true"), ("stderr", "true")]
    assert pe.exec_path("ns", "pod-1") == "/api/v1/namespaces/ns/pods/pod-1/exec"
