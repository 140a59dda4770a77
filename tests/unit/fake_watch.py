"""A fake API for the SDK's watches: scripted list answers and watch sessions per path."""
from __future__ import annotations

import json
import threading
import time

from rolloutbatch.kube.errors import Gone, NotFound


class Response:
    def __init__(self, lines, on_close=None):
        self.lines, self.closed = lines, threading.Event()

    def iter_lines(self, chunk_size=None):
        for line in self.lines:
            if self.closed.is_set():
                return
            if isinstance(line, BaseException):
                raise line
            if isinstance(line, (int, float)):
                time.sleep(line)
                continue
            yield line

    def close(self):
        self.closed.set()


def event(kind, obj):
    return json.dumps({"type": kind, "object": obj}).encode()


class FakeApi:
    """``lists[path]``: successive list answers (the last repeats); ``watches[path]``: successive
    watch sessions, each a list of lines (bytes), pauses (seconds) or exceptions; once they run
    out, each watch is a quiet 50 ms."""

    url = "https://fake"

    def __init__(self, lists=None, watches=None, objects=None):
        self.lists = {k: list(v) for k, v in (lists or {}).items()}
        self.watches = {k: list(v) for k, v in (watches or {}).items()}
        self.objects = dict(objects or {})
        self.calls: list[tuple] = []
        self.lock = threading.Lock()

    def get(self, path, what, **params):
        with self.lock:
            self.calls.append(("get", path, params))
            if path in self.lists:
                answers = self.lists[path]
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                if isinstance(answer, BaseException):
                    raise answer
                return answer
            if path in self.objects:
                return self.objects[path]
        raise NotFound(what, status=404)

    def raw(self, path, what, timeout=None, **params):
        with self.lock:
            self.calls.append(("watch", path, params))
            sessions = self.watches.get(path) or []
            session = sessions.pop(0) if sessions else [0.05]
        if isinstance(session, BaseException):
            raise session
        return Response(session)


def gone():
    return Gone("too old", status=410)
