"""Session-wide fixtures for every suite that talks to the devcluster.

The cluster is started ONCE per test run by hack/run-tests.sh (or by hand with `make cluster`);
these fixtures only connect to it through KUBECONFIG. A missing cluster is a test FAILURE with a
clear message, never a skip: a skipped cluster suite would look green while testing nothing.
Unit tests (tests/unit) don't request these fixtures and need no cluster.

`make test` runs the cluster suites in two steps (hack/run-tests.sh): every test not marked
``exclusive`` on several pytest-xdist workers sharing one operator, then the ``exclusive`` ones
(they stop or restart the operator, fill the nodes, fault a node, read operator-wide figures)
one at a time. A test that uses ``solo_operator`` is exclusive without saying so. Tests that use
one fixed-name object (the model's ``models`` namespace) take a lock across the workers
(``models_lock``): xdist's own grouping (``xdist_group``) does not group on pytest 9.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import tempfile

import pytest
from kubernetes import client

from tests.support import kube, workers


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


EXCLUSIVE_FIXTURES = {"solo_operator"}


def pytest_configure(config):
    if not workers.is_worker():   # the workers inherit the environment: set before they start
        os.environ[workers.SHARED_DIR_ENV] = tempfile.mkdtemp(prefix="rolloutbatch-tests-")


def pytest_unconfigure(config):
    shared = os.environ.get(workers.SHARED_DIR_ENV)
    if shared and not workers.is_worker():
        from tests.support.operator import stop_shared_operator
        stop_shared_operator(pathlib.Path(shared))
        shutil.rmtree(shared, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if EXCLUSIVE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.exclusive)
    # The tests that share the session's operator first, then those that pause it (stable: file
    # order within each): the operator is stopped once and not started again between solo tests.
    items.sort(key=lambda item: bool(EXCLUSIVE_FIXTURES & set(item.fixturenames)))


def pytest_runtest_setup(item):
    if workers.is_worker() and item.get_closest_marker("exclusive"):
        pytest.fail("this test needs the cluster to itself: run it without -n "
                    "(make test runs the `exclusive` tests after the others)", pytrace=False)


@pytest.fixture(scope="session")
def operator_process():
    """The real operator (`rolloutbatch operator`), one per test run, with the CRD installed.

    Chaos tests may stop it and must start it again (see tests/chaos). Under xdist it is the
    workers' shared one, which no test may stop.
    """
    from tests.support.operator import OperatorProcess, install_crd, shared_operator

    if workers.is_worker():
        yield shared_operator(workers.shared_dir())
        return
    install_crd()
    operator = OperatorProcess("operator-tests")
    operator.start()
    yield operator
    operator.stop()


@pytest.fixture
def solo_operator(operator_process):
    """A test that runs an operator of its own (other flags, fault injection) needs the cluster
    to itself: pause the shared operator. It is started again when a test needs it (the wedge
    guard: before a test that uses it, or to delete what a test left), not after every solo test:
    the exclusive step runs them one after another, and each restart cost seconds."""
    operator_process.stop()
    yield


@pytest.fixture
def namespace():
    """A fresh namespace for one test's RolloutBatches, deleted (with them) afterwards."""
    from tests.support.batches import unique
    from tests.support.operator import kubectl

    name = unique("e2e")
    kubectl("create", "namespace", name)
    kube.OWN_NAMESPACES.add(name)
    yield name
    kubectl("delete", "rolloutbatches", "--all", "-n", name, "--wait=false", check=False)
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def models_lock():
    """The `models` namespace (examples/policy-server.yaml's fixed name) for this test alone:
    served by ``policy_server`` or, for a test of an unreachable model, absent."""
    with workers.held("models"):
        yield


@pytest.fixture
def policy_server(models_lock):
    """The model example's scripted policy server (examples/policy-server.yaml), serving; its
    namespace is yielded and deleted afterwards."""
    from tests.support.operator import ROOT, kubectl

    kubectl("apply", "-f", str(ROOT / "examples" / "policy-server.yaml"))
    kubectl("rollout", "status", "deployment/policy-server", "-n", "models", "--timeout=120s", timeout=150)
    yield "models"
    # waited for: the next test applying it must not meet a terminating namespace
    kubectl("delete", "namespace", "models", "--timeout=120s", check=False, timeout=150)


# -- the wedge guard: every batch a test leaves must still be deletable ------------------------
WEDGE_DELETE_SECONDS = 120


def _rolloutbatches() -> dict[str, dict]:
    """Every RolloutBatch in the cluster by UID ({} when the CRD is not installed yet)."""
    from kubernetes.client.rest import ApiException
    try:
        items = client.CustomObjectsApi(_guard_api()).list_cluster_custom_object(
            "rl.agentruntime.io", "v1alpha1", "rolloutbatches")["items"]
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return {b["metadata"]["uid"]: b for b in items}


_GUARD_API = []


def _guard_api() -> client.ApiClient:
    if not _GUARD_API:
        _GUARD_API.append(kube.api_client())
    return _GUARD_API[0]


@pytest.fixture(autouse=True)
def wedge_guard(request):
    """Every RolloutBatch a cluster test creates must be deletable within a bound.

    After the test (and its other fixtures) the batches it left are deleted; a batch still
    present after WEDGE_DELETE_SECONDS fails the test, naming the batch and its last status.
    """
    if "tests/unit" in str(request.path) or "tests/devcluster" in str(request.path):
        yield
        return
    operator = request.getfixturevalue("operator_process")  # deletion needs an operator to release finalizers
    if operator.shared and not operator.readyz():
        pytest.fail(f"the workers' shared operator does not answer (it exited?): {operator.log_tail()}", pytrace=False)
    if not operator.shared and not operator.running() and "solo_operator" not in request.fixturenames:
        operator.start()   # paused by an earlier solo test
    before = set(_rolloutbatches())
    yield
    import time
    from kubernetes.client.rest import ApiException
    api = client.CustomObjectsApi(_guard_api())
    left = {uid: b for uid, b in _rolloutbatches().items() if uid not in before}
    if workers.is_worker():   # other workers' batches are theirs to guard
        left = {uid: b for uid, b in left.items() if b["metadata"]["namespace"] in kube.OWN_NAMESPACES}
    if left and not operator.shared and not operator.running():
        operator.start()   # a solo test paused it: its batches' finalizers need it
    for batch in left.values():
        meta = batch["metadata"]
        try:
            api.delete_namespaced_custom_object("rl.agentruntime.io", "v1alpha1", meta["namespace"],
                                                "rolloutbatches", meta["name"])
        except ApiException as exc:
            if exc.status != 404:
                raise
    deadline = time.monotonic() + WEDGE_DELETE_SECONDS
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        live = _rolloutbatches()
        left = {uid: live[uid] for uid in left if uid in live}
    if left:
        import json
        described = "\n".join(f"{b['metadata']['namespace']}/{b['metadata']['name']}: "
                              f"{json.dumps(b.get('status') or {})[:800]}" for b in left.values())
        pytest.fail(f"wedged: these RolloutBatches were not gone {WEDGE_DELETE_SECONDS}s after their deletion:\n"
                    f"{described}", pytrace=False)
