"""End-to-end fixtures: one real operator process for the session, a fresh namespace per test."""
from __future__ import annotations

import pytest

from tests.support.batches import unique, wait_gone
from tests.support.operator import OperatorProcess, install_crd, kubectl


@pytest.fixture(scope="session")
def operator_process():
    install_crd()
    operator = OperatorProcess("operator-e2e")
    operator.start()
    yield operator
    operator.stop()


@pytest.fixture
def namespace():
    name = unique("e2e")
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "rolloutbatches", "--all", "-n", name, "--wait=false", check=False)
    kubectl("delete", "namespace", name, "--wait=false", check=False)
