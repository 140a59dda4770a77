"""Termination messages, as the kubelet makes them (terminationMessagePath/Policy).

Each container start gets an empty host file bind-mounted at its ``terminationMessagePath``
(default /dev/termination-log), owned by the container's user so the program can write it. After
the container exits the agent reads at most the last 4096 bytes of it (the kubelet's
``tail.ReadAtMost``: an oversize file keeps its end). With ``FallbackToLogsOnError``, an empty file
and a non-zero exit give the container's log instead: its last 80 lines, of which the first
2048 bytes (the kubelet applies tailLines, then limitBytes). The text goes to
``state.terminated.message``.
"""
from __future__ import annotations

import os

from .logstore import parse_line, render

DEFAULT_PATH = "/dev/termination-log"
FILE, FALLBACK_TO_LOGS = "File", "FallbackToLogsOnError"
MAX_MESSAGE_BYTES = 4096          # kubecontainer.MaxContainerTerminationMessageLength
FALLBACK_LOG_LINES = 80           # MaxContainerTerminationMessageLogLines
FALLBACK_LOG_BYTES = 2048         # MaxContainerTerminationMessageLogLength
FALLBACK_WINDOW_BYTES = 1 << 20   # how much of the log file's end is parsed for the fallback


def path_of(container: dict) -> str:
    return container.get("terminationMessagePath") or DEFAULT_PATH


def policy_of(container: dict) -> str:
    return container.get("terminationMessagePolicy") or FILE


def prepare(host_path: str, uid: int, gid: int) -> None:
    """An empty file for one container start (a restart starts with an empty message)."""
    os.makedirs(os.path.dirname(host_path), exist_ok=True)
    fd = os.open(host_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def read_tail(path: str, limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """The last ``limit`` bytes of ``path`` (b"" when it is missing or not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000):
            return b""
        if st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def log_tail(log_path: str | None) -> bytes:
    """The fallback text: the last FALLBACK_LOG_LINES lines of the log, cut at FALLBACK_LOG_BYTES."""
    if not log_path:
        return b""
    # Only the end of the file: a hostile log may be huge. 80 lines fit unless they are very
    # long, and then the 2048 bytes kept come from the window anyway.
    data = read_tail(log_path, FALLBACK_WINDOW_BYTES)
    lines = data.split(b"\n")
    if len(data) == FALLBACK_WINDOW_BYTES:
        lines = lines[1:]            # the first line of the window may be cut
    entries = [parse_line(line + b"\n") for line in lines if line]
    return render(entries, tail=FALLBACK_LOG_LINES)[:FALLBACK_LOG_BYTES]


def message(host_path: str | None, policy: str, exit_code: int, log_path: str | None) -> str:
    """``state.terminated.message`` of a container that exited with ``exit_code``."""
    data = read_tail(host_path) if host_path else b""
    if not data and policy == FALLBACK_TO_LOGS and exit_code != 0:
        data = log_tail(log_path)
    return data.decode("utf-8", errors="replace")
