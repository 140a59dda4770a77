"""Fault injection for the chaos tests: crash the operator exactly at a named point.

Off by default. With ``ROLLOUTBATCH_CRASH_AT=<point>`` in the environment the process SIGKILLs
itself the first time it reaches ``<point>`` (e.g. ``provision:Job``), so a test can check that
a restarted operator ends with the same results as an undisturbed one. The names of the points
are the ``crash_point(...)`` calls in the service layer.
"""

from __future__ import annotations

import os
import signal

ENV = "ROLLOUTBATCH_CRASH_AT"


def crash_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
