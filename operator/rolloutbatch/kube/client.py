"""One pooled HTTP client for the whole operator, configured from KUBECONFIG (a list of files,
merged as kubectl merges them), ~/.kube/config, or in-cluster.

Every create, replace and patch asks for strict field validation (``fieldValidation=Strict``):
the API server refuses an unknown or duplicate field, as ``kubectl`` does, instead of dropping
it (a typo like ``paralellism`` would otherwise pass silently). It refuses with 400, mapped to
``errors.Invalid`` with the fields in ``unknown_fields``.
"""

from __future__ import annotations

import os
from typing import Any

import pykube
import pykube.exceptions
import pykube.http
import requests
import yaml

from rolloutbatch.kube.errors import BadRequest, ConfigError, Unavailable, check_path, raise_for

USER_AGENT = "rolloutbatch-operator"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
STRICT = {"fieldValidation": "Strict"}
# What pykube raises for a kubeconfig it cannot use (missing or relative files, a context that
# names no cluster, bad base64, a document that is not a mapping).
_CONFIG_ERRORS = (pykube.exceptions.PyKubeError, OSError, KeyError, IndexError, TypeError, ValueError,
                  AttributeError, NotImplementedError, yaml.YAMLError)


def load_config(kubeconfig: str | None = None) -> pykube.KubeConfig:
    """The kubeconfig as kubectl finds it: ``kubeconfig`` (one file, as kubectl's
    ``--kubeconfig``), else ``$KUBECONFIG``, a list of files merged as kubectl merges them
    (:func:`_merged`), else ``~/.kube/config``; when none of these exists, the in-cluster service
    account if running in a pod (client-go's DeferredLoadingClientConfig: in-cluster only when
    the loading rules found no kubeconfig, so a kubeconfig in a pod is the user's choice).

    Raises ``ConfigError`` (naming the file) when there is none or it cannot be used; the file's
    current context, its cluster and its user are read here, so a broken file fails now and not
    at the first request.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if kubeconfig or not path:
        files = [kubeconfig or "~/.kube/config"]
    else:   # kubectl skips empty entries, repeated ones and files that do not exist
        files = [f for f in dict.fromkeys(path.split(os.pathsep))
                 if f and os.path.isfile(os.path.expanduser(f))] or [path]
    filename = files[0] if len(files) == 1 else path
    if len(files) == 1 and not os.path.isfile(os.path.expanduser(filename)):
        if not kubeconfig and _in_cluster():   # an explicit file must exist, as kubectl's flag
            try:
                return pykube.KubeConfig.from_service_account(SERVICE_ACCOUNT)
            except _CONFIG_ERRORS as exc:
                raise ConfigError(f"cannot load the in-cluster service account ({SERVICE_ACCOUNT}): "
                                  f"{_describe(exc)}") from None
        hint = "" if path else " (set $KUBECONFIG or pass --kubeconfig; not running in a pod)"
        raise ConfigError(f"cannot load the kubeconfig {filename}: no such file{hint}")
    try:
        config = pykube.KubeConfig.from_file(filename) if len(files) == 1 else _merged(files)
        if not isinstance(config.doc, dict):
            raise TypeError("not a kubeconfig document (a YAML mapping)")
        if len(files) == 1:   # as a merge's: a relative path is the file's own, not the working directory's
            _resolve_paths(config.doc, os.path.dirname(os.path.abspath(os.path.expanduser(filename))))
        config.cluster["server"], config.user, config.namespace  # noqa: B018  (read to validate)
    except _CONFIG_ERRORS as exc:
        raise ConfigError(f"cannot load the kubeconfig {filename}: {_describe(exc)}") from None
    return config


def _in_cluster() -> bool:
    """Running in a pod, as client-go's inClusterClientConfig.Possible says: the service's host
    and port in the environment (the kubelet sets them) and the service account's token a file."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")) \
        and os.path.isfile(os.path.join(SERVICE_ACCOUNT, "token"))


_NAMED = ("clusters", "users", "contexts")
# The file paths kubectl reads relative to the kubeconfig that names them (client-go's
# clientcmd.ResolveLocalPaths; an exec command only when it holds a path separator), with
# pykube's idp-certificate-authority: (section, entry key, path to the field in it).
_FILE_FIELDS = (("clusters", "cluster", ("certificate-authority",)),
                ("users", "user", ("client-certificate",)), ("users", "user", ("client-key",)),
                ("users", "user", ("tokenFile",)), ("users", "user", ("exec", "command")),
                ("users", "user", ("auth-provider", "config", "idp-certificate-authority")))


def _merged(files: list[str]) -> pykube.KubeConfig:
    """One kubeconfig of several, by the rules of kubectl (kubernetes.io, "Organizing Cluster Access
    Using kubeconfig Files"): the first file to set a value (``current-context``) or a name (a
    cluster, user or context, taken whole) wins; relative paths are read from each file's own
    directory. A file that cannot be read raises ConfigError naming it. The result has no file, so
    pykube writes no refreshed token into one of them."""
    merged: dict[str, Any] = {}
    for filename in files:
        try:
            with open(os.path.expanduser(filename)) as handle:
                doc = yaml.safe_load(handle) or {}
            if not isinstance(doc, dict):
                raise TypeError("not a kubeconfig document (a YAML mapping)")
            _resolve_paths(doc, os.path.dirname(os.path.abspath(os.path.expanduser(filename))))
            for key, value in doc.items():   # in the try: a malformed entry names its file
                if key in _NAMED:
                    names = {entry.get("name") for entry in merged.setdefault(key, [])}
                    merged[key] += [entry for entry in value or () if entry.get("name") not in names]
                elif key not in merged and value not in (None, "", {}, []):
                    merged[key] = value
        except _CONFIG_ERRORS as exc:
            raise ConfigError(f"cannot load the kubeconfig {filename}: {_describe(exc)}") from None
    return pykube.KubeConfig(merged)


def _resolve_paths(doc: dict, base: str) -> None:
    """Make the relative file paths of ``doc`` (_FILE_FIELDS) absolute, from ``base``."""
    for section, key, fields in _FILE_FIELDS:
        for entry in doc.get(section) or ():
            holder = entry.get(key)
            for field in fields[:-1]:
                holder = holder.get(field) if isinstance(holder, dict) else None
            value = holder.get(fields[-1]) if isinstance(holder, dict) else None
            if isinstance(value, str) and value and not os.path.isabs(value) and \
                    (fields[-1] != "command" or os.sep in value):
                holder[fields[-1]] = os.path.join(base, value)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    return " ".join(str(exc).split()) or type(exc).__name__


class Api:
    """Raw JSON access to the API: ``get/list/create/patch/delete`` by path, dicts in and out.

    Paths are API paths (``/api/v1/namespaces/x/pods``); the callers in ``kube.resources`` know
    them. The connection pool is sized for the operator's bounded log-read concurrency.
    """

    def __init__(self, config: pykube.KubeConfig, *, pool: int = 64, timeout: float = 30) -> None:
        # pykube's adapter injects the kubeconfig's TLS and credentials at send time.
        adapter = pykube.http.KubernetesHTTPAdapter(config, pool_connections=4, pool_maxsize=pool)
        try:
            self._http = pykube.HTTPClient(config, timeout=timeout, http_adapter=adapter)
        except _CONFIG_ERRORS as exc:
            raise ConfigError(f"cannot load the kubeconfig: {_describe(exc)}") from None
        self._http.session.headers["User-Agent"] = USER_AGENT
        self.url = self._http.url
        # The environment's settings, read once for this server, as client-go reads them once
        # (net/http.ProxyFromEnvironment): requests re-read every variable of the environment at
        # each request (Session.merge_environment_settings), a tenth of a millisecond of the
        # operator's CPU per call. Its proxies (NO_PROXY too), and the CA bundle requests would
        # take from it where the kubeconfig names none (pykube's adapter sets the kubeconfig's).
        session = self._http.session
        session.proxies.update(requests.utils.get_environ_proxies(self.url))
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle and session.verify is True:
            session.verify = bundle
        session.trust_env = False
        self.config = config
        self._exec: Any = None   # kube.pod_exec.PodExec, made at the first exec

    def request(self, method: str, path: str, what: str, **kwargs: Any) -> requests.Response:
        check_path(path, what)
        try:
            response = self._http.session.request(method, self.url + path, timeout=kwargs.pop("timeout", self._http.timeout), **kwargs)
        except requests.exceptions.InvalidJSONError as exc:
            # A body JSON cannot carry (NaN, Infinity): sending it again cannot help.
            raise BadRequest(f"{what}: the request body is not valid JSON: {exc}") from exc
        except requests.RequestException as exc:
            raise Unavailable(f"{what}: {exc}") from exc
        except (pykube.exceptions.PyKubeError, OSError, NotImplementedError) as exc:
            # Credentials are read at send time (pykube's adapter): a client certificate or CA
            # file named by the kubeconfig that went missing, an auth provider pykube lacks.
            raise ConfigError(f"{what}: the kubeconfig's credentials are unusable: {_describe(exc)}") from None
        return raise_for(response, what)

    def get(self, path: str, what: str, **params: Any) -> dict:
        return self.request("GET", path, what, params=params or None).json()

    def create(self, path: str, body: dict, what: str, *, dry_run: bool = False) -> dict:
        """POST; ``dry_run`` lets the server run every check (schema, admission) and store nothing."""
        params = {**STRICT, "dryRun": "All"} if dry_run else STRICT
        return self.request("POST", path, what, json=body, params=params).json()

    def merge_patch(self, path: str, patch: dict, what: str) -> dict:
        headers = {"Content-Type": "application/merge-patch+json"}
        return self.request("PATCH", path, what, json=patch, headers=headers, params=STRICT).json()

    def json_patch(self, path: str, ops: list, what: str) -> dict:
        """A JSON patch (RFC 6902): its ``test`` operations are preconditions the server checks."""
        headers = {"Content-Type": "application/json-patch+json"}
        return self.request("PATCH", path, what, json=ops, headers=headers, params=STRICT).json()

    def replace(self, path: str, body: dict, what: str) -> dict:
        return self.request("PUT", path, what, json=body, params=STRICT).json()

    def delete(self, path: str, what: str, body: dict | None = None) -> dict:
        return self.request("DELETE", path, what, json=body).json()

    async def exec_in_pod(self, namespace: str, pod: str, container: str | None, command: list[str], *,
                          stdin: bytes = b"", timeout: float, limit_bytes: int | None = None,
                          on_output: Any = None) -> Any:
        """Run ``command`` in a pod's container (pods/exec); a ``kube.pod_exec.ExecResult``;
        ``on_output(stream, data)`` hears the output as it comes.

        A coroutine, unlike the rest of this class: exec is a WebSocket carried by aiohttp on
        the caller's event loop (``kube.pod_exec``), with this client's kubeconfig."""
        from rolloutbatch.kube import pod_exec   # deferred: only the operator execs
        if self._exec is None:
            self._exec = pod_exec.PodExec(self.config, user_agent=USER_AGENT)
        return await self._exec.run(namespace, pod, container, command, stdin=stdin, timeout=timeout,
                                    limit_bytes=pod_exec.LIMIT_BYTES if limit_bytes is None else limit_bytes,
                                    on_output=on_output)

    async def attach_to_pod(self, namespace: str, pod: str, container: str, data: bytes, *, ack: bytes,
                            timeout: float, hello: tuple[bytes, bytes] | None = None) -> None:
        """Write ``data`` to a container's stdin and wait for ``ack`` on its stdout (pods/attach,
        ``kube.pod_attach``); a coroutine, as exec_in_pod."""
        from rolloutbatch.kube import pod_attach, pod_exec   # deferred: only the operator attaches
        if self._exec is None:
            self._exec = pod_exec.PodExec(self.config, user_agent=USER_AGENT)
        await pod_attach.deliver(self._exec, namespace, pod, container, data, ack=ack, timeout=timeout, hello=hello)

    async def open_attach(self, namespace: str, pod: str, container: str, *, ack: bytes, timeout: float,
                          hello: tuple[bytes, bytes] | None = None, keepalive: float | None = None) -> Any:
        """An attach kept open to deliver one input later (``kube.pod_attach.AttachChannel``)."""
        from rolloutbatch.kube import pod_attach, pod_exec   # deferred: only the operator attaches
        if self._exec is None:
            self._exec = pod_exec.PodExec(self.config, user_agent=USER_AGENT)
        return await pod_attach.open_channel(self._exec, namespace, pod, container, ack=ack, timeout=timeout,
                                             hello=hello, keepalive=keepalive)

    def raw(self, path: str, what: str, *, timeout: Any = None, **params: Any) -> requests.Response:
        """A streamed GET (logs, watches); ``timeout`` overrides the client's default."""
        return self.request("GET", path, what, params=params, stream=True, timeout=timeout or self._http.timeout)
