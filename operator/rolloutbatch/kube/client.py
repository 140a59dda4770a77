"""One pooled HTTP client for the whole operator, configured from KUBECONFIG or in-cluster."""

from __future__ import annotations

import os
from typing import Any

import pykube
import requests
import pykube.http

from rolloutbatch.kube.errors import Unavailable, raise_for

USER_AGENT = "rolloutbatch-operator"


def load_config(kubeconfig: str | None = None) -> pykube.KubeConfig:
    """In-cluster service account when running in a pod, else the kubeconfig file."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"):
        return pykube.KubeConfig.from_service_account()
    return pykube.KubeConfig.from_file(path.split(os.pathsep)[0] if path else None)


class Api:
    """Raw JSON access to the API: ``get/list/create/patch/delete`` by path, dicts in and out.

    Paths are API paths (``/api/v1/namespaces/x/pods``); the callers in ``kube.resources`` know
    them. The connection pool is sized for the operator's bounded log-read concurrency.
    """

    def __init__(self, config: pykube.KubeConfig, *, pool: int = 64, timeout: float = 30) -> None:
        # pykube's adapter injects the kubeconfig's TLS and credentials at send time.
        adapter = pykube.http.KubernetesHTTPAdapter(config, pool_connections=4, pool_maxsize=pool)
        self._http = pykube.HTTPClient(config, timeout=timeout, http_adapter=adapter)
        self._http.session.headers["User-Agent"] = USER_AGENT
        self.url = self._http.url

    def request(self, method: str, path: str, what: str, **kwargs: Any) -> requests.Response:
        try:
            response = self._http.session.request(method, self.url + path, timeout=kwargs.pop("timeout", self._http.timeout), **kwargs)
        except requests.RequestException as exc:
            raise Unavailable(f"{what}: {exc}") from exc
        return raise_for(response, what)

    def get(self, path: str, what: str, **params: Any) -> dict:
        return self.request("GET", path, what, params=params or None).json()

    def create(self, path: str, body: dict, what: str) -> dict:
        return self.request("POST", path, what, json=body).json()

    def merge_patch(self, path: str, patch: dict, what: str) -> dict:
        headers = {"Content-Type": "application/merge-patch+json"}
        return self.request("PATCH", path, what, json=patch, headers=headers).json()

    def replace(self, path: str, body: dict, what: str) -> dict:
        return self.request("PUT", path, what, json=body).json()

    def delete(self, path: str, what: str, body: dict | None = None) -> dict:
        return self.request("DELETE", path, what, json=body).json()

    def raw(self, path: str, what: str, *, timeout: Any = None, **params: Any) -> requests.Response:
        """A streamed GET (logs, watches); ``timeout`` overrides the client's default."""
        return self.request("GET", path, what, params=params, stream=True, timeout=timeout or self._http.timeout)
