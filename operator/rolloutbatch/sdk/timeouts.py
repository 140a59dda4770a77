"""The one check of a timeout a trainer gives the SDK (every verb of both clients that takes one).

A timeout that is no finite number never fires: ``now >= start + nan`` is never true, and
``min(nan, 0.5)`` is NaN, so a wait on it blocks (or spins) for good. It is refused with a
ValueError before any API call. A poll's ``interval`` is checked alike: a NaN one makes
``time.sleep`` raise mid-wait, a negative one makes the asyncio client's wait spin.
"""

from __future__ import annotations

import math
from typing import Any


def checked_timeout(timeout: Any, *, zero_ok: bool = False, none_ok: bool = False, name: str = "timeout") -> Any:
    """``timeout`` when it is a finite number of seconds above 0; 0 too when ``zero_ok`` (a wait
    that looks once), None when ``none_ok`` (the verb's default). ValueError otherwise, naming the
    argument ``name`` (a poll's ``interval`` is checked alike); a bool is no number of seconds."""
    if timeout is None and none_ok:
        return None
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not _finite(timeout)
            or timeout < 0 or (timeout == 0 and not zero_ok)):
        wanted = "0 or more" if zero_ok else "above 0"
        default = ", or None: the default" if none_ok else ""
        raise ValueError(f"{name} must be a finite number of seconds, {wanted}{default}; got {timeout!r}")
    return timeout


def _finite(number: int | float) -> bool:
    """math.isfinite, False for an int too large for a float (10**400 raised OverflowError)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False
