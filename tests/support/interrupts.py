"""A trainer's Ctrl-C in a test: SIGINT to the test's own process after a delay, as the terminal
sends it, so the code under test meets it where a real one lands (asyncio.run, which the
blocking SDK client runs each exec on, cancels what it runs and raises KeyboardInterrupt)."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def ctrl_c_in(seconds: float) -> Iterator[None]:
    """SIGINT to this process ``seconds`` into the block, never after it. Skips a test not on the
    main thread, which SIGINT does not reach."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT reaches only the main thread")
    # Python's own handler, as a trainer's script at a terminal has it. A test run started in the
    # background by a non-interactive shell (CI's) inherits SIGINT ignored (POSIX: `&` without job
    # control), Python keeps it so, and asyncio.run turns SIGINT into a cancellation only over the
    # default handler: the interrupt never came (seen on CI; `trap "" INT` reproduces it).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
