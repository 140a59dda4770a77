"""Per-container log files and their reading (kubectl logs semantics).

One file per container start (`<state>/pods/<uid>/logs/<container>/<restart>.log`), lines in the
CRI format: `<RFC3339Nano time> <stdout|stderr> <F|P> <content>` (P = partial line, no newline).
Kept until the pod is deleted; `previous=true` reads the file of the restart before the current.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import os
import time


def ts_nano(t: float) -> str:
    d = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int((t % 1) * 1e9):09d}Z"


def parse_ts(s: str) -> float:
    """RFC3339 (optionally with fractional seconds, Z or offset) -> epoch seconds."""
    s = s.strip()
    frac = 0.0
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    if "." in s:
        head, rest = s.split(".", 1)
        digits = ""
        i = 0
        while i < len(rest) and rest[i].isdigit():
            digits += rest[i]
            i += 1
        frac = float("0." + digits) if digits else 0.0
        s = head + rest[i:]
    return _dt.datetime.fromisoformat(s).timestamp() + frac


def format_line(t: float, stream: str, content: bytes, partial: bool) -> bytes:
    return f"{ts_nano(t)} {stream} {'P' if partial else 'F'} ".encode() + content + b"\n"


def parse_line(line: bytes) -> tuple[str, str, bool, bytes] | None:
    """-> (timestamp, stream, partial, content without newline)."""
    parts = line.rstrip(b"\n").split(b" ", 3)
    if len(parts) < 3:
        return None
    content = parts[3] if len(parts) == 4 else b""
    return parts[0].decode(), parts[1].decode(), parts[2] == b"P", content


def render(entries, *, timestamps: bool = False, since: float | None = None,
           tail: int | None = None) -> bytes:
    """entries: parsed lines -> the bytes kubectl logs prints."""
    items = [e for e in entries if e is not None]
    if since is not None:
        items = [e for e in items if parse_ts(e[0]) >= since]
    if tail is not None:
        groups, cur = [], []          # a line = a run of partial entries ended by a full one
        for e in items:
            cur.append(e)
            if not e[2]:
                groups.append(cur)
                cur = []
        if cur:
            groups.append(cur)
        items = [e for g in (groups[-tail:] if tail > 0 else []) for e in g]
    out = []
    for t, _stream, partial, content in items:
        if timestamps:
            out.append(t.encode() + b" ")
        out.append(content)
        if not partial:
            out.append(b"\n")
    return b"".join(out)


class ContainerLog:
    """The log files of one container of one pod (all its restarts)."""

    def __init__(self, directory: str):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.attempts: list[str] = []
        self._fh = None
        self.active = False
        self._changed = asyncio.Event()

    def start(self, restart: int) -> None:
        self.close()
        path = os.path.join(self.dir, f"{restart}.log")
        self.attempts.append(path)
        self._fh = open(path, "ab", buffering=0)
        self.active = True
        self._notify()

    def write(self, stream: str, content: bytes, partial: bool = False) -> None:
        if self._fh is not None:
            self._fh.write(format_line(time.time(), stream, content, partial))
            self._notify()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self.active = False
        self._notify()

    def _notify(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    def path(self, previous: bool = False) -> str | None:
        if previous:
            return self.attempts[-2] if len(self.attempts) >= 2 else None
        return self.attempts[-1] if self.attempts else None

    @property
    def changed(self) -> asyncio.Event:
        return self._changed


class LogStore:
    """(namespace, pod name) -> {container: ContainerLog}; consulted by the log server."""

    def __init__(self):
        self._pods: dict[tuple[str, str], tuple[str, dict[str, ContainerLog]]] = {}

    def register(self, ns: str, name: str, uid: str, base_dir: str, containers: list[str]) -> dict[str, ContainerLog]:
        logs = {c: ContainerLog(os.path.join(base_dir, c)) for c in containers}
        self._pods[(ns, name)] = (uid, logs)
        return logs

    def unregister(self, ns: str, name: str, uid: str) -> None:
        cur = self._pods.get((ns, name))
        if cur and cur[0] == uid:
            for cl in cur[1].values():
                cl.close()
            del self._pods[(ns, name)]

    def lookup(self, ns: str, name: str, container: str) -> ContainerLog | None:
        cur = self._pods.get((ns, name))
        return None if cur is None else cur[1].get(container)

    def containers(self, ns: str, name: str) -> list[str] | None:
        cur = self._pods.get((ns, name))
        return None if cur is None else list(cur[1])
