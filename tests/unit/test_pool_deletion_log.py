"""A pool's deletion waiting for the batches on its pods is logged at INFO, not ERROR.

kopf logs each TemporaryError of a handler at ERROR and posts it as a Warning Event
(nolar/kopf#981); the pool's deletion handler raises one every few seconds while batches run on
its pods, which is normal (handlers.pools.DeletionWaitIsNoError).
"""

from __future__ import annotations

import inspect
import logging

import kopf
from kopf._core.actions import execution

from rolloutbatch.handlers import pools as pool_handlers


def _handler(handler_id: str):
    return next(h for h in kopf.get_default_registry()._changing.get_all_handlers() if h.id == handler_id)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _logged(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    records = _Records()
    logger = logging.getLogger("kopf.objects")
    logger.addHandler(records)
    try:
        logger.log(level, message)
    finally:
        logger.removeHandler(records)
    return records.records[-1]


def test_kopf_still_says_a_temporary_failure_as_the_filter_reads_it() -> None:
    assert 'f"{handler} failed temporarily: {str(e) or repr(e)}"' in inspect.getsource(execution)
    assert str(_handler(pool_handlers.DELETE_POOL_HANDLER)) == "Handler 'delete_pool'"


def test_the_deletion_wait_is_logged_at_info() -> None:
    handler = _handler(pool_handlers.DELETE_POOL_HANDLER)
    record = _logged(f"{handler} failed temporarily: waiting for 1 batch(es) that run on its pods: team/b")
    assert (record.levelno, record.levelname) == (logging.INFO, "INFO")


def test_every_other_error_keeps_its_level() -> None:
    handler = _handler(pool_handlers.DELETE_POOL_HANDLER)
    assert _logged(f"{handler} failed with an exception. Will retry.").levelno == logging.ERROR
    assert _logged("Handler 'run_batch' failed temporarily: the API").levelno == logging.ERROR
    assert _logged(f"{handler} failed temporarily but will time out after 60 seconds: x").levelno == logging.ERROR
    assert _logged(f"{handler} failed temporarily: x", logging.WARNING).levelno == logging.WARNING
