"""The pool's launcher run by a real /bin/sh, for the unit tests of core.pool_delivery: each in a
process group of its own, every group killed when its test ends (a launcher left waiting on its
FIFO, and the `read` child it waits for, would outlive the test run)."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from rolloutbatch.core import pool_delivery

_STARTED: list[subprocess.Popen] = []


def start_launcher(tmp_path, prepare: list[str] | None = None, **popen) -> subprocess.Popen:
    script = pool_delivery.launcher(str(tmp_path), 5).replace("$$", "$")
    proc = subprocess.Popen(["/bin/sh", "-c", script, "warm", *(prepare or [])], cwd=tmp_path,
                            start_new_session=True, **popen)
    _STARTED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def reap_launchers():
    yield
    while _STARTED:
        proc = _STARTED.pop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
