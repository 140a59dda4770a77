"""The service tests' API in memory: the ``team`` namespace made (memory_pool.NS). A test module
that needs another (test_leadership) defines its own ``api``."""
from __future__ import annotations

import pytest

from tests.support.memory_api import MemoryApi
from tests.unit.service.memory_pool import NS


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api
