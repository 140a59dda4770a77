"""devcluster.nodeagent.termination: terminationMessagePath/Policy as the kubelet applies them."""
from __future__ import annotations

import os

from devcluster.nodeagent import termination as T
from devcluster.nodeagent.logstore import format_line


def _log(path, lines):
    with open(path, "wb") as f:
        for i, text in enumerate(lines):
            f.write(format_line(1000.0 + i, "stdout" if i % 2 else "stderr", text.encode(), False))
    return str(path)


def test_defaults_match_the_api():
    assert T.path_of({}) == "/dev/termination-log" and T.policy_of({}) == "File"
    assert T.path_of({"terminationMessagePath": "/tmp/m"}) == "/tmp/m"


def test_prepare_truncates_and_hands_the_file_to_the_user(tmp_path):
    path = str(tmp_path / "t" / "c")
    T.prepare(path, os.getuid(), os.getgid())
    with open(path, "w") as f:
        f.write("old")
    T.prepare(path, os.getuid(), os.getgid())
    assert os.path.getsize(path) == 0 and os.stat(path).st_uid == os.getuid()


def test_file_policy_reports_the_file_only(tmp_path):
    msg, log = tmp_path / "m", _log(tmp_path / "log", ["boom"])
    msg.write_text("done\n")
    assert T.message(str(msg), T.FILE, 1, log) == "done\n"
    msg.write_text("")
    assert T.message(str(msg), T.FILE, 1, log) == ""      # File: never the log


def test_an_oversize_message_keeps_its_last_4096_bytes(tmp_path):
    msg = tmp_path / "m"
    msg.write_bytes(b"a" * 5000 + b"END")
    text = T.message(str(msg), T.FILE, 0, None)
    assert len(text) == T.MAX_MESSAGE_BYTES and text.endswith("END") and text.startswith("a")


def test_fallback_to_logs_only_on_error_with_an_empty_file(tmp_path):
    msg = tmp_path / "m"
    msg.write_text("")
    log = _log(tmp_path / "log", [f"line {i}" for i in range(200)])
    fallback = T.message(str(msg), T.FALLBACK_TO_LOGS, 2, log)
    # the last 80 lines (120..199) of both streams, cut at 2048 bytes
    assert fallback.startswith("line 120\nline 121\n") and len(fallback.encode()) <= T.FALLBACK_LOG_BYTES
    assert "line 119\n" not in fallback
    assert T.message(str(msg), T.FALLBACK_TO_LOGS, 0, log) == ""   # success: no fallback
    msg.write_text("mine")
    assert T.message(str(msg), T.FALLBACK_TO_LOGS, 2, log) == "mine"
    short = _log(tmp_path / "short", ["x" * 100] * 5)
    msg.write_text("")
    assert T.message(str(msg), T.FALLBACK_TO_LOGS, 1, short) == ("x" * 100 + "\n") * 5


def test_fallback_reads_only_the_end_of_a_huge_log(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "FALLBACK_WINDOW_BYTES", 4096)   # ~90 CRI lines of this log
    log = _log(tmp_path / "log", [str(i) for i in range(2000)])
    assert T.log_tail(log) == "".join(f"{i}\n" for i in range(1920, 2000)).encode()


def test_missing_or_special_files_give_no_message(tmp_path):
    assert T.message(str(tmp_path / "absent"), T.FALLBACK_TO_LOGS, 1, None) == ""
    os.symlink("/etc/passwd", tmp_path / "link")
    assert T.read_tail(str(tmp_path / "link")) == b""      # never followed
    assert T.message(None, T.FILE, 0, None) == ""


def test_invalid_utf8_is_replaced(tmp_path):
    msg = tmp_path / "m"
    msg.write_bytes(b"ok \xff\xfe")
    assert T.message(str(msg), T.FILE, 0, None) == "ok \ufffd\ufffd"
