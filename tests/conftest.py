"""Session-wide fixtures for every suite that talks to the devcluster.

The cluster is started ONCE per test run by hack/run-tests.sh (or by hand with `make cluster`);
these fixtures only connect to it through KUBECONFIG. A missing cluster is a test FAILURE with a
clear message, never a skip: a skipped cluster suite would look green while testing nothing.
Unit tests (tests/unit) don't request these fixtures and need no cluster.
"""
from __future__ import annotations

import re

import pytest
from kubernetes import client

from tests.support import kube


@pytest.fixture(scope="session")
def kube_api() -> client.ApiClient:
    """ApiClient for the running devcluster (admin identity)."""
    try:
        api = kube.api_client()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        client.VersionApi(api).get_code()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no cluster"
        pytest.fail(f"devcluster at {kube.kubeconfig_path()} does not answer: {exc}", pytrace=False)
    yield api
    api.close()


@pytest.fixture(scope="session")
def core(kube_api) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


@pytest.fixture(scope="session")
def batch(kube_api) -> client.BatchV1Api:
    return client.BatchV1Api(kube_api)


@pytest.fixture
def kube_namespace(kube_api, request) -> str:
    """A fresh namespace for one test (ready for pods), deleted after it."""
    prefix = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:20].strip("-") or "t"
    yield from kube.namespace_fixture(kube_api, prefix=prefix)


@pytest.fixture(scope="session")
def operator_process():
    """The real operator (`rolloutbatch operator`), one per test run, with the CRD installed.

    Chaos tests may stop it and must start it again (see tests/chaos).
    """
    from tests.support.operator import OperatorProcess, install_crd

    install_crd()
    operator = OperatorProcess("operator-tests")
    operator.start()
    yield operator
    operator.stop()


@pytest.fixture
def namespace():
    """A fresh namespace for one test's RolloutBatches, deleted (with them) afterwards."""
    from tests.support.batches import unique
    from tests.support.operator import kubectl

    name = unique("e2e")
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "rolloutbatches", "--all", "-n", name, "--wait=false", check=False)
    kubectl("delete", "namespace", name, "--wait=false", check=False)
