"""Talking to the real devcluster from tests: clients, polling, throwaway namespaces.

Everything here goes to the real API server named by KUBECONFIG (default
`.devcluster/kubeconfig`); nothing is mocked. Typical use in a test::

    def test_x(core, kube_namespace):            # fixtures from tests/conftest.py
        core.create_namespaced_config_map(kube_namespace, {...})
        wait_for(lambda: core.read_namespaced_config_map("x", kube_namespace).data,
                 timeout=30, what="configmap x has data")

`wait_for` returns the predicate's first truthy value, so it doubles as "wait and fetch".
"""
from __future__ import annotations

import os
import pathlib
import time
import uuid
from typing import Callable, Iterator, TypeVar

from kubernetes import client, config
from kubernetes.client.rest import ApiException

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_KUBECONFIG = ROOT / ".devcluster" / "kubeconfig"

T = TypeVar("T")

#: Every namespace this test process created (create_namespace and the `namespace` fixture). Under
#: pytest-xdist the wedge guard looks only at batches in these: another worker's batches are not
#: this test's to delete.
OWN_NAMESPACES: set[str] = set()


class WaitTimeout(AssertionError):
    """`wait_for` gave up; an AssertionError so pytest shows it as a test failure."""


def kubeconfig_path() -> pathlib.Path:
    """The kubeconfig tests use: $KUBECONFIG (first entry) or the devcluster's own."""
    env = os.environ.get("KUBECONFIG")
    return pathlib.Path(env.split(os.pathsep)[0]) if env else DEFAULT_KUBECONFIG


def api_client(path: pathlib.Path | None = None) -> client.ApiClient:
    """A kubernetes.client.ApiClient for the kubeconfig (raises FileNotFoundError if missing)."""
    path = path or kubeconfig_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"kubeconfig {path} not found: start the devcluster (`make cluster`, or "
            f"`python -m devcluster.cluster up`) or set KUBECONFIG"
        )
    api = config.new_client_from_config(config_file=str(path))
    # parallel tests and watches: a bigger pool than the default 4 connections
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 32
    return api


def raw_get(api: client.ApiClient, path: str) -> tuple[int, str]:
    """GET an arbitrary API path (e.g. /readyz, /api/v1/.../pods/x/log) as (status, text),
    with the client's TLS and credentials; no exception on HTTP errors."""
    response = api.rest_client.request("GET", api.configuration.host + path,
                                       headers={"Accept": "*/*"})
    response.read()
    return response.status, response.data.decode(errors="replace")


def wait_for(predicate: Callable[[], T], timeout: float = 60, interval: float = 0.5,
             what: str | None = None, ignore: tuple[type[BaseException], ...] = (ApiException,)) -> T:
    """Poll `predicate` until it returns something truthy; return that value.

    Exceptions listed in `ignore` (API errors by default, e.g. a 404 before an object exists)
    count as "not yet". On timeout raises WaitTimeout naming `what` and the last value/error.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except ignore as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout}s waiting for "
                              f"{what or getattr(predicate, '__name__', 'condition')}; last: {last!r}"[:2000])
        time.sleep(interval)


def unique_name(prefix: str) -> str:
    """A DNS-1123 name unlikely to collide across tests and runs."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def gone(read: Callable[[], object]) -> bool:
    """True once `read()` raises 404 (for use with wait_for)."""
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def create_namespace(api: client.ApiClient, prefix: str = "t", labels: dict | None = None) -> str:
    """Create a uniquely named namespace and wait until pods can be created in it (its `default`
    ServiceAccount exists: ServiceAccount admission rejects pods before that)."""
    core = client.CoreV1Api(api)
    name = unique_name(prefix)
    core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
    OWN_NAMESPACES.add(name)
    wait_for(lambda: core.read_namespaced_service_account("default", name), timeout=60,
             what=f"serviceaccount {name}/default")
    return name


def delete_namespace(api: client.ApiClient, name: str, wait: bool = False, timeout: float = 120) -> None:
    """Delete a namespace (ignore 404); with wait=True, until the object is gone."""
    core = client.CoreV1Api(api)
    try:
        core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
    if wait:
        wait_for(lambda: gone(lambda: core.read_namespace(name)), timeout=timeout,
                 what=f"namespace {name} deleted")


def namespace_fixture(api: client.ApiClient, prefix: str = "t", labels: dict | None = None) -> Iterator[str]:
    """Generator body for a pytest fixture: yields a fresh namespace and deletes it afterwards
    (without waiting, so teardown stays fast; the namespace controller finishes it)."""
    name = create_namespace(api, prefix, labels)
    try:
        yield name
    finally:
        delete_namespace(api, name)


def pod_phase(core: client.CoreV1Api, name: str, namespace: str) -> str | None:
    return core.read_namespaced_pod(name, namespace).status.phase


def wait_pod_finished(core: client.CoreV1Api, name: str, namespace: str, timeout: float = 120):
    """Wait until the pod is Succeeded or Failed; return the pod."""
    def finished():
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None
    return wait_for(finished, timeout=timeout, what=f"pod {namespace}/{name} finished")


def simple_pod(name: str, script: str, image: str = "python:3.12-alpine", **spec) -> dict:
    """A one-container pod running `python -c script` (restartPolicy Never)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": image, "command": ["python", "-c", script]}],
        },
    }
    body["spec"].update(spec)
    return body
