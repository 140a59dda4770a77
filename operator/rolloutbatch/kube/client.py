"""One pooled HTTP client for the whole operator, configured from KUBECONFIG (a list of files,
merged as kubectl merges them), ~/.kube/config, or in-cluster.

pykube applies the kubeconfig's TLS settings and its auth-provider credentials at send time, and
an exec plugin's (``kube.exec_plugin``: every apiVersion kubectl takes, v1 too, which pykube
refuses); a token or token file (the in-cluster account's too) is ``kube.transport``'s header, read at
each request, as is the proxy (the cluster's ``proxy-url``, else the environment's), for this
client and those on the event loop alike.

Every create, replace and patch asks for strict field validation (``fieldValidation=Strict``):
the API server refuses an unknown or duplicate field, as ``kubectl`` does, instead of dropping
it (a typo like ``paralellism`` would otherwise pass silently). It refuses with 400, mapped to
``errors.Invalid`` with the fields in ``unknown_fields``.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import tempfile
from typing import Any

import pykube
import pykube.exceptions
import pykube.http
import requests
import yaml

from rolloutbatch.kube import exec_plugin, transport
from rolloutbatch.kube.errors import BadRequest, ConfigError, Unavailable, check_path, json_answer, raise_for

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
                config = pykube.KubeConfig.from_service_account(SERVICE_ACCOUNT)
            except _CONFIG_ERRORS as exc:
                raise ConfigError(f"cannot load the in-cluster service account ({SERVICE_ACCOUNT}): "
                                  f"{_describe(exc)}") from None
            # pykube keeps the token it read; the kubelet rewrites it (a projected token expires):
            # the file is read at each request instead, as a kubeconfig's tokenFile.
            config.doc["users"][0]["user"] = {"tokenFile": os.path.join(SERVICE_ACCOUNT, "token")}
            config.reload()
            return config
        hint = "" if path else " (set $KUBECONFIG or pass --kubeconfig; not running in a pod)"
        raise ConfigError(f"cannot load the kubeconfig {filename}: no such file{hint}")
    try:
        if len(files) == 1:
            config = pykube.KubeConfig(_read(filename))
            config.filepath = pathlib.Path(filename).expanduser()   # as from_file: a refreshed token is kept there
        else:
            config = _merged(files)
        _check_usable(config)
        config.cluster["server"], config.user, config.namespace  # noqa: B018  (read to validate)
    except _CONFIG_ERRORS as exc:
        raise ConfigError(f"cannot load the kubeconfig {filename}: {_describe(exc)}") from None
    return config


# The auth providers pykube implements (kube.client's adapter); with another one it sends no credential.
_AUTH_PROVIDERS = ("gcp", "oidc")


def _check_usable(config: pykube.KubeConfig) -> None:
    """What kubectl checks before its first request (client-go's clientcmd ``ConfirmUsable``: the
    context, its cluster and user exist, the cluster has a server), on the document as written,
    since pykube fills in what is missing: a cluster without a server is ``http://localhost``,
    where every client (``Api``, ``sdk.aio.AsyncApi``, the CLI's) would send the user's token in
    clear, and a user it does not hold is an anonymous one. Raises ValueError saying what is wrong
    in kubectl's words (load_config names the file)."""
    doc = config.doc
    if not any(doc.get(key) for key in (*_NAMED, "current-context")):
        raise ValueError("invalid configuration: no configuration has been provided")
    name = doc.get("current-context")
    if not name:
        raise ValueError("no current context is set (current-context)")
    context = _entry(doc, "contexts", name)
    if context is None:
        raise ValueError(f'context "{name}" does not exist')
    cluster_name = context.get("cluster")
    if not cluster_name:
        raise ValueError(f'context "{name}" names no cluster')
    cluster = _entry(doc, "clusters", cluster_name)
    if cluster is None:
        raise ValueError(f'cluster "{cluster_name}" of context "{name}" does not exist')
    if not cluster.get("server"):
        raise ValueError(f'no server found for cluster "{cluster_name}"')
    user_name = context.get("user")
    if user_name:
        user = _entry(doc, "users", user_name)
        if user is None:
            raise ValueError(f'user "{user_name}" of context "{name}" does not exist')
        if "auth-provider" in user and (user["auth-provider"] or {}).get("name") not in _AUTH_PROVIDERS:
            provider = (user["auth-provider"] or {}).get("name")
            raise ValueError(f'the auth-provider "{provider}" of user "{user_name}" is not supported (only '
                             f'{" and ".join(_AUTH_PROVIDERS)}): use an exec plugin, as kubectl since 1.26')


def _entry(doc: dict, section: str, name: str) -> dict | None:
    """The body of the entry ``name`` of a section (``{}`` when it is null), None when there is
    none; of two with that name the last, as pykube takes it."""
    key = section[:-1]   # clusters: cluster
    for entry in reversed(doc.get(section) or ()):
        if entry.get("name") == name:
            return entry.get(key) or {}
    return None


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
            doc = _read(filename)
            for key, value in doc.items():   # in the try: a malformed entry names its file
                if key in _NAMED:
                    names = {entry.get("name") for entry in merged.setdefault(key, [])}
                    merged[key] += [entry for entry in value or () if entry.get("name") not in names]
                elif key not in merged and value not in (None, "", {}, []):
                    merged[key] = value
        except _CONFIG_ERRORS as exc:
            raise ConfigError(f"cannot load the kubeconfig {filename}: {_describe(exc)}") from None
    return pykube.KubeConfig(merged)


def _read(filename: str) -> dict:
    """One kubeconfig file's document, its relative paths made its own directory's (as kubectl
    reads them, not from the working directory). An empty file (or only comments) is an empty
    document, and a null list (``users:``) an empty one, as kubectl reads them: pykube iterates them."""
    with open(os.path.expanduser(filename)) as handle:
        doc = yaml.safe_load(handle)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise TypeError("not a kubeconfig document (a YAML mapping)")
    for key in _NAMED:
        if key in doc and doc[key] is None:
            doc[key] = []
    _resolve_paths(doc, os.path.dirname(os.path.abspath(os.path.expanduser(filename))))
    return doc


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


class _Adapter(pykube.http.KubernetesHTTPAdapter):
    """pykube's adapter with the exec plugin run by ``kube.exec_plugin`` (pykube's refuses
    ``client.authentication.k8s.io/v1``), raising a PyKubeError that says why when it cannot get
    a credential (``Api.request`` makes it a ConfigError), not a traceback for a CLI user."""

    def _setup_request_auth(self, config: pykube.KubeConfig, request: Any, kwargs: Any) -> Any:
        user = config.user
        # pykube's order: a header already set (transport's token), then a token, then exec.
        if "exec" in user and "Authorization" not in request.headers and not user.get("token"):
            got = exec_plugin.credential(user["exec"] or {}, config.cluster)
            if got.token:
                request.headers["Authorization"] = f"Bearer {got.token}"
            else:   # as pykube's: files for requests' cert=, read by _setup_request_certificates
                self.cert, self.key = _pem_file(got.client_certificate), _pem_file(got.client_key)
            return None
        try:
            return super()._setup_request_auth(config, request, kwargs)
        except (subprocess.SubprocessError, ValueError, KeyError, TypeError, AttributeError, ImportError) as exc:
            # an auth-provider's (gcp's cmd-path, a token that is no JWT)
            raise pykube.exceptions.PyKubeError(_describe(exc)) from None


def _pem_file(text: str | None) -> Any:
    handle = tempfile.NamedTemporaryFile(mode="w")   # 0600, removed when let go of
    handle.write(text or "")
    handle.flush()
    return handle


class Api:
    """Raw JSON access to the API: ``get/list/create/patch/delete`` by path, dicts in and out.

    Paths are API paths (``/api/v1/namespaces/x/pods``); the callers in ``kube.resources`` know
    them. The connection pool is sized for the operator's bounded log-read concurrency.
    """

    def __init__(self, config: pykube.KubeConfig, *, pool: int = 64, timeout: float = 30) -> None:
        # pykube's adapter injects the kubeconfig's TLS and credentials at send time.
        adapter = _Adapter(config, pool_connections=4, pool_maxsize=pool)
        try:
            self._http = pykube.HTTPClient(config, timeout=timeout, http_adapter=adapter)
        except _CONFIG_ERRORS as exc:
            raise ConfigError(f"cannot load the kubeconfig: {_describe(exc)}") from None
        self._http.session.headers["User-Agent"] = USER_AGENT
        self.url = self._http.url
        # The environment's settings, read once for this server, as client-go reads them once
        # (net/http.ProxyFromEnvironment): requests re-read every variable of the environment at
        # each request (Session.merge_environment_settings), a tenth of a millisecond of the
        # operator's CPU per call. The proxy (transport.proxy: the cluster's proxy-url, else the
        # environment's, NO_PROXY too), and the CA bundle requests would take from the
        # environment where the kubeconfig names none (pykube's adapter sets the kubeconfig's).
        session = self._http.session
        proxy = transport.proxy(config)
        if proxy:
            session.proxies[self.url.split(":", 1)[0]] = proxy
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle and session.verify is True:
            session.verify = bundle
        session.trust_env = False
        self.config = config
        self._exec: Any = None   # kube.pod_exec.PodExec, made at the first exec

    def request(self, method: str, path: str, what: str, **kwargs: Any) -> requests.Response:
        check_path(path, what)
        # A token (file) is sent as transport says, read now; with it set, pykube adds no other.
        headers = {**transport.auth_headers(self.config), **(kwargs.pop("headers", None) or {})}
        try:
            response = self._http.session.request(method, self.url + path, headers=headers,
                                                  timeout=kwargs.pop("timeout", self._http.timeout), **kwargs)
        except requests.exceptions.InvalidJSONError as exc:
            # A body JSON cannot carry (NaN, Infinity): sending it again cannot help.
            raise BadRequest(f"{what}: the request body is not valid JSON: {exc}") from exc
        except requests.RequestException as exc:
            raise Unavailable(f"{what}: {exc}") from exc
        except (pykube.exceptions.PyKubeError, OSError, NotImplementedError) as exc:
            # Credentials are read at send time (pykube's adapter): a client certificate or CA
            # file named by the kubeconfig that went missing, an auth provider pykube lacks, an
            # exec plugin that failed (_Adapter).
            raise ConfigError(f"{what}: the kubeconfig's credentials are unusable: {_describe(exc)}") from None
        return raise_for(response, what)

    def request_json(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        """:meth:`request`'s answer as JSON; one that is not JSON ``Unavailable`` (errors.json_answer),
        as the event loop's calls say (async_session.send_json), never requests' own error."""
        return json_answer(self.request(method, path, what, **kwargs).content, what)

    def get(self, path: str, what: str, **params: Any) -> dict:
        return self.request_json("GET", path, what, params=params or None)

    def create(self, path: str, body: dict, what: str, *, dry_run: bool = False) -> dict:
        """POST; ``dry_run`` lets the server run every check (schema, admission) and store nothing."""
        params = {**STRICT, "dryRun": "All"} if dry_run else STRICT
        return self.request_json("POST", path, what, json=body, params=params)

    def merge_patch(self, path: str, patch: dict, what: str) -> dict:
        headers = {"Content-Type": "application/merge-patch+json"}
        return self.request_json("PATCH", path, what, json=patch, headers=headers, params=STRICT)

    def json_patch(self, path: str, ops: list, what: str) -> dict:
        """A JSON patch (RFC 6902): its ``test`` operations are preconditions the server checks."""
        headers = {"Content-Type": "application/json-patch+json"}
        return self.request_json("PATCH", path, what, json=ops, headers=headers, params=STRICT)

    def replace(self, path: str, body: dict, what: str) -> dict:
        return self.request_json("PUT", path, what, json=body, params=STRICT)

    def delete(self, path: str, what: str, body: dict | None = None) -> dict:
        return self.request_json("DELETE", path, what, json=body)

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
