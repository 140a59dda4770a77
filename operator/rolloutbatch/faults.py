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
# With ROLLOUTBATCH_FAIL_AT=<point> the point raises instead: a stand-in for any bug there, so a
# test can check the error policy ends the batch with a reason (InternalError) instead of hanging.
FAIL_ENV = "ROLLOUTBATCH_FAIL_AT"


class InjectedFault(RuntimeError):
    """Raised at the point named by ROLLOUTBATCH_FAIL_AT."""


def crash_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(FAIL_ENV) == name:
        raise InjectedFault(f"fault injected at {name}")
