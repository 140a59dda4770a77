"""kopf's settings as handlers.lifecycle.configure makes them (what kopf does with each: the
comments there)."""
from __future__ import annotations

import types

import kopf

from rolloutbatch.core.leadership import DAEMON_CANCELLATION
from rolloutbatch.handlers.lifecycle import configure
from rolloutbatch.service.context import Settings


def test_a_cancelled_daemon_is_waited_for_in_real_time_not_for_its_whole_cancellation_timeout():
    """A deleted pool's or batch's daemon ends within a few loop cycles too many for kopf's
    default (10 zero-time cycles), and kopf then looked again only DAEMON_CANCELLATION (10 s) on:
    every deletion took 10 s more (measured on the devcluster: a pool of 1, 10.25 s; 0.42 s with
    the bound)."""
    settings = kopf.OperatorSettings()
    configure(settings=settings, memo=types.SimpleNamespace(ctx=types.SimpleNamespace(settings=Settings())))
    bound = settings.background.instant_exit_timeout
    assert bound is not None and 0 < bound <= 1.0 < DAEMON_CANCELLATION
