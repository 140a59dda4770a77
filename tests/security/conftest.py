"""The hostile-episode suite proves its claims against the sandbox a user would deploy: every
batch it creates runs under the `cube` RuntimeClass (gVisor on the devcluster's real nodes)
unless it names one, or RB_TEST_RUNTIME_CLASS names another."""
from __future__ import annotations

import pytest

from tests.support import batches

SANDBOX_RUNTIME_CLASS = "cube"


@pytest.fixture(autouse=True)
def _episodes_under_the_sandbox_runtime(monkeypatch):
    monkeypatch.setattr(batches, "TEST_RUNTIME_CLASS", batches.TEST_RUNTIME_CLASS or SANDBOX_RUNTIME_CLASS)
