"""What the pytest-xdist workers of one run share: a directory (set by the run's controller
before the workers start, so they inherit it) and file locks in it. See tests/conftest.py."""
from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
from typing import Iterator

#: The environment variable naming the run's shared directory.
SHARED_DIR_ENV = "ROLLOUTBATCH_TESTS_SHARED_DIR"


def shared_dir() -> pathlib.Path:
    return pathlib.Path(os.environ[SHARED_DIR_ENV])


def is_worker() -> bool:
    """This process is an xdist worker (another may be running tests against the cluster now)."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


@contextlib.contextmanager
def held(name: str, directory: pathlib.Path | None = None) -> Iterator[None]:
    """Held by one process of the run at a time: an exclusive lock on ``<directory>/<name>.lock``,
    released when the file closes (also when its holder dies)."""
    directory = directory or shared_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
