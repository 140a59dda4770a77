"""kube.errors (HTTP answers -> error types) and kube.client (strict field validation on every
write, kubeconfig problems as ConfigError), against a local HTTP server standing in for the API."""
from __future__ import annotations

import http.server
import json
import os
import threading
import urllib.parse

import pytest
import requests
import yaml

from rolloutbatch.kube import client, errors
from rolloutbatch.kube.client import Api, load_config
from rolloutbatch.kube.errors import (BadRequest, ConfigError, Conflict, Forbidden, Gone, Invalid, KubeError,
                                      NotFound, TooLarge, Unavailable)


@pytest.fixture(autouse=True)
def _no_env_proxy(monkeypatch):
    """The process's proxy settings never send these tests' requests elsewhere, nor change the
    proxy a test expects (an empty NO_PROXY falls back to no_proxy, as in Go)."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)

STRICT_400 = ('RolloutBatch in version "v1alpha1" cannot be handled as a RolloutBatch: strict decoding error: '
              'unknown field "spec.paralellism", unknown field "spec.task.mountpath", duplicate field "image"')


@pytest.mark.parametrize("status, message, cls", [
    (400, STRICT_400, Invalid),
    (400, "the selector is invalid", BadRequest),
    (401, "Unauthorized", errors.Unauthorized),
    (403, "forbidden", Forbidden),
    (404, "not found", NotFound),
    (409, "already exists", Conflict),
    (410, "too old resource version", Gone),
    (413, "Request entity too large: limit is 3145728", TooLarge),
    (500, "etcdserver: request is too large", TooLarge),
    (422, "spec.episodes: Invalid value: 0", Invalid),
    (429, "too many requests", errors.TooManyRequests),   # an Unavailable: retried later
    (500, "internal error", Unavailable),
    (503, "unavailable", Unavailable),
    (418, "teapot", KubeError),
    (None, "no status", KubeError),
])
def test_classify(status, message, cls):
    exc = errors.classify(status, message, "Reason", "create x")
    assert type(exc) is cls and exc.status == status and exc.reason == "Reason"
    assert str(exc) == f"create x: {message}"


def test_too_large_is_not_retryable():
    assert not isinstance(errors.classify(500, "etcdserver: request is too large"), Unavailable)
    assert not isinstance(errors.classify(413, "x"), Unavailable)


def test_strict_errors_name_the_unknown_fields():
    exc = errors.classify(400, STRICT_400)
    assert exc.unknown_fields == ("spec.paralellism", "spec.task.mountpath")
    assert errors.classify(422, "x").unknown_fields == ()


def _response(status: int, body) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response._content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return response


def test_from_response_keeps_the_apis_message():
    exc = errors.from_response(_response(400, {"kind": "Status", "reason": "BadRequest", "message": STRICT_400}),
                               "create RolloutBatch ns/x")
    assert isinstance(exc, Invalid) and exc.reason == "BadRequest"
    assert str(exc) == f"create RolloutBatch ns/x: {STRICT_400}"
    exc = errors.from_response(_response(502, b"<html>bad gateway</html>"), "get x")
    assert isinstance(exc, Unavailable) and "bad gateway" in str(exc)
    exc = errors.from_response(_response(400, [1, 2]), "get x")
    assert isinstance(exc, BadRequest)


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict]] = []

    def _answer(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append((self.command, url.path, query))
        if url.path.endswith("/typo"):
            status, body = 400, {"kind": "Status", "reason": "BadRequest", "message": STRICT_400}
        elif url.path.endswith("/huge"):
            status, body = 500, {"kind": "Status", "message": "etcdserver: request is too large"}
        elif "login" in url.path.split("/"):   # a proxy's login page, answered 200
            status, body = 200, b"<html>proxy login</html>"
        else:
            status, body = 200, {"kind": "Thing"}
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html" if isinstance(body, bytes) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def api(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.seen = []
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    yield Api(load_config(str(path)))
    server.shutdown()
    server.server_close()


def test_every_write_asks_for_strict_field_validation(api):
    api.create("/api/v1/namespaces/n/configmaps", {"a": 1}, "create")
    api.replace("/api/v1/namespaces/n/configmaps/c", {"a": 1}, "replace")
    api.merge_patch("/apis/g/v1/namespaces/n/things/t/status", {"status": {}}, "patch")
    api.get("/api/v1/namespaces/n/configmaps/c", "get", labelSelector="x=y")
    api.delete("/api/v1/namespaces/n/configmaps/c", "delete")
    strict = {method: query.get("fieldValidation") for method, _, query in _Recorder.seen}
    assert strict == {"POST": ["Strict"], "PUT": ["Strict"], "PATCH": ["Strict"], "GET": None, "DELETE": None}
    assert _Recorder.seen[3][2] == {"labelSelector": ["x=y"]}
    assert "dryRun" not in _Recorder.seen[0][2]
    api.create("/api/v1/namespaces/n/configmaps", {"a": 1}, "create", dry_run=True)
    assert _Recorder.seen[-1][2] == {"fieldValidation": ["Strict"], "dryRun": ["All"]}


def test_refusals_map_to_their_types(api):
    with pytest.raises(Invalid) as info:
        api.create("/apis/g/v1/namespaces/n/typo", {"spec": {"paralellism": 2}}, "create RolloutBatch n/x")
    assert info.value.unknown_fields == ("spec.paralellism", "spec.task.mountpath")
    with pytest.raises(TooLarge):
        api.replace("/api/v1/namespaces/n/configmaps/huge", {}, "replace")


def test_a_success_answer_that_is_not_json_is_unavailable_from_every_call(api):
    """The blocking client parsed a 2xx answer outside its error mapping: a body that is not JSON
    (a proxy's login page) escaped as requests' JSONDecodeError, not a KubeError, which the
    reconciler's policy takes for a bug (StalledInternal, the batch Failed) and which escapes every
    ``except KubeError``. The event loop's calls (async_session.send_json) say Unavailable."""
    path = "/api/v1/namespaces/n/configmaps/login"
    calls = [lambda: api.get(path, "get"), lambda: api.create(path, {}, "create"),
             lambda: api.merge_patch(path, {}, "patch"), lambda: api.json_patch(path, [], "json patch"),
             lambda: api.replace(path, {}, "replace"), lambda: api.delete(path, "delete")]
    for call in calls:
        with pytest.raises(Unavailable, match="not a JSON object.*proxy login"):
            call()


def test_a_paged_metadata_list_that_is_not_json_is_unavailable(api):
    from rolloutbatch.kube import resources
    with pytest.raises(Unavailable, match="not a JSON object"):
        resources.configmap_versions(api, "login", "a=b")


@pytest.mark.parametrize("body", [b"null", b'"ok"', b"[]", b"42"])
def test_a_success_answer_that_is_json_but_no_object_is_unavailable(body):
    """JSON that is no object passed the check above and its caller read it as one
    (AttributeError: 'NoneType' object has no attribute 'get'): StalledInternal again."""
    from rolloutbatch.kube.errors import json_answer
    with pytest.raises(Unavailable, match="not a JSON object"):
        json_answer(body, "get")
    assert json_answer(b"", "delete") == {} and json_answer(b'{"kind": "Status"}', "delete") == {"kind": "Status"}


def test_a_body_json_cannot_carry_is_not_retried(api):
    with pytest.raises(BadRequest, match="not valid JSON"):
        api.merge_patch("/apis/g/v1/namespaces/n/things/t/status", {"status": {"rewardSum": float("inf")}},
                        "patch status")
    assert _Recorder.seen == []


def _kubeconfig(tmp_path, doc) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)


GOOD = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}


@pytest.mark.parametrize("doc, needle", [
    ("- just\n- a list\n", "not a kubeconfig"),
    ("{unclosed: [", "kubeconfig"),
    ({**GOOD, "current-context": "nope"}, "nope"),
    ({**GOOD, "current-context": ""}, "current context"),
    ({**GOOD, "clusters": [{"name": "k", "cluster": {"server": "https://x", "certificate-authority": "/no/ca.crt"}}]},
     "does not exist"),
    ({**GOOD, "users": [{"name": "u", "user": {"client-certificate": "gone.crt", "client-key": "gone.key"}}]},
     "does not exist"),
    ({**GOOD, "contexts": [{"name": "c", "context": {"cluster": "elsewhere", "user": "u"}}]}, "elsewhere"),
])
def test_unusable_kubeconfig_is_a_config_error(tmp_path, doc, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        Api(load_config(_kubeconfig(tmp_path, doc)))
    assert "cannot load the kubeconfig" in str(info.value)


@pytest.mark.parametrize("doc, message", [
    ("", "invalid configuration: no configuration has been provided"),
    ("# only a comment\n", "invalid configuration: no configuration has been provided"),
    ("clusters: null\n", "invalid configuration: no configuration has been provided"),
    ({**GOOD, "current-context": "zzz"}, 'context "zzz" does not exist'),
    ({**GOOD, "contexts": None}, 'context "c" does not exist'),
    ({**GOOD, "contexts": [{"name": "c", "context": {"cluster": "zzz", "user": "u"}}]},
     'cluster "zzz" of context "c" does not exist'),
    ({**GOOD, "clusters": None}, 'cluster "k" of context "c" does not exist'),
    ({**GOOD, "contexts": [{"name": "c", "context": {"cluster": "k", "user": "zzz"}}]},
     'user "zzz" of context "c" does not exist'),
    ({**GOOD, "users": None}, 'user "u" of context "c" does not exist'),
    ({**GOOD, "users": [{"name": "u", "user": {"auth-provider": {"name": "azure", "config": {}}}}]},
     'the auth-provider "azure" of user "u" is not supported'),
])
def test_a_kubeconfig_that_names_nothing_usable_says_what_in_a_users_words(tmp_path, doc, message):
    """An empty kubeconfig said "argument of type 'NoneType' is not iterable"; a context, cluster
    or user it does not hold said "missing 'zzz'", and a user it does not hold was no error at all
    (pykube sends such requests anonymously), nor an auth-provider pykube does not implement."""
    with pytest.raises(ConfigError) as info:
        Api(load_config(_kubeconfig(tmp_path, doc)))
    assert str(info.value).startswith(f"cannot load the kubeconfig {tmp_path / 'kubeconfig'}: {message}")


def test_an_empty_kubeconfig_in_a_list_is_skipped_and_an_empty_list_says_so(tmp_path, monkeypatch):
    """kubectl merges an empty file as nothing; all of them empty is no configuration."""
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("KUBECONFIG", f"{empty}{os.pathsep}{_write(tmp_path / 'good', GOOD)}")
    assert load_config().cluster["server"] == "https://127.0.0.1:1"
    monkeypatch.setenv("KUBECONFIG", f"{empty}{os.pathsep}{empty}.2")
    (tmp_path / "empty.2").write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no configuration has been provided"):
        load_config()


def test_missing_kubeconfig_is_a_config_error(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(str(tmp_path / "nope"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=r"\.kube/config: no such file \(set \$KUBECONFIG"):
        load_config()


@pytest.fixture
def in_a_pod(tmp_path, monkeypatch):
    """A pod's service account (token, namespace, CA) and the service's env, a HOME without a
    kubeconfig and no $KUBECONFIG."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    for name, text in (("token", "sa-token"), ("namespace", "ops"), ("ca.crt", "")):
        (account / name).write_text(text)
    monkeypatch.setattr(client, "SERVICE_ACCOUNT", str(account))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path / "home"


def test_a_kubeconfig_found_wins_over_the_service_account_as_in_kubectl(in_a_pod):
    """client-go's loading rules take the in-cluster account only when they found no kubeconfig;
    the service account was taken before ~/.kube/config whenever $KUBECONFIG was unset."""
    assert load_config().cluster["server"] == "https://10.96.0.1:443"   # nothing else: in-cluster
    (in_a_pod / ".kube").mkdir(parents=True)
    _write(in_a_pod / ".kube" / "config", GOOD)
    assert load_config().cluster["server"] == "https://127.0.0.1:1"


def test_in_cluster_only_when_no_listed_kubeconfig_exists_and_the_pod_env_says_so(in_a_pod, tmp_path, monkeypatch):
    """As client-go: a $KUBECONFIG whose files are all missing falls back to the service account
    (it said "no such file"); an explicit file must exist; a token without the service's env is
    no pod (it failed on pykube's KeyError, not on the missing kubeconfig)."""
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'gone'}:{tmp_path / 'also-gone'}")
    assert load_config().cluster["server"] == "https://10.96.0.1:443"
    with pytest.raises(ConfigError, match="gone: no such file"):
        load_config(str(tmp_path / "gone"))
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT")
    with pytest.raises(ConfigError, match=r"\.kube/config: no such file \(set \$KUBECONFIG"):
        load_config()


def test_a_usable_kubeconfig_loads(tmp_path):
    config = load_config(_kubeconfig(tmp_path, GOOD))
    assert Api(config).url == "https://127.0.0.1:1"


@pytest.mark.parametrize("server, no_proxy, proxied", [
    ("https://10.0.0.1:6443", "", True), ("https://10.0.0.1:6443", "10.0.0.1", False),
    ("https://127.0.0.1:1", "", False),   # kubectl never proxies a loopback server
])
def test_the_environments_proxy_is_read_once_for_the_server(tmp_path, monkeypatch, server, no_proxy, proxied):
    """As kubectl: HTTPS_PROXY unless NO_PROXY names the server, read when the client is made and
    not again at each request (requests re-reads the whole environment per call otherwise).
    No request is made: the server need not exist."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    doc = {**GOOD, "clusters": [{"name": "k", "cluster": {"server": server}}]}
    api = Api(load_config(_kubeconfig(tmp_path, doc)))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")   # later changes are not read
    session = api._http.session
    assert not session.trust_env
    assert session.proxies.get("https") == ("http://127.0.0.1:3128" if proxied else None)


def test_the_environments_ca_bundle_is_still_taken_where_the_kubeconfig_names_none(tmp_path, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    assert Api(load_config(_kubeconfig(tmp_path, GOOD)))._http.session.verify == "/etc/ssl/certs/ca-certificates.crt"


def test_a_refused_patch_does_not_quote_the_whole_object():
    # What the API server answers for a strict merge patch: the patched object, then the error.
    obj = json.dumps({"data": {"results.json": "x" * 900_000}})
    message = f' "" is invalid: patch: Invalid value: "{obj}": strict decoding error: unknown field "status.bogus"'
    exc = errors.classify(422, message, "Invalid", "patch status")
    assert isinstance(exc, Invalid) and exc.unknown_fields == ("status.bogus",)
    assert len(str(exc)) < 400 and str(exc).endswith('strict decoding error: unknown field "status.bogus"')
    assert str(exc).startswith('patch status:  "" is invalid:')
    long = errors.classify(422, "y" * 10_000)
    assert len(str(long)) == errors.MAX_MESSAGE


# --- $KUBECONFIG as a list of files, merged as kubectl merges them ------------------------------
# (kubernetes.io, "Organizing Cluster Access Using kubeconfig Files": missing files are skipped,
# the first file to set a value or a name wins, relative paths are the file's own.)
_SPLIT_USER = {"apiVersion": "v1", "kind": "Config", "users": [{"name": "u", "user": {"token": "t"}}],
               "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
               "current-context": "x"}
_SPLIT_CLUSTER = {"apiVersion": "v1", "kind": "Config",
                  "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}]}


def _write(path, doc) -> str:
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_kubeconfig_list_skips_a_missing_first_file(tmp_path, monkeypatch):
    real = _write(tmp_path / "real", GOOD)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}::{real}")
    config = load_config(None)
    assert config.cluster["server"] == "https://127.0.0.1:1" and config.user == {"token": "t"}


def test_kubeconfig_list_merges_context_and_cluster_from_two_files(tmp_path, monkeypatch):
    """The common split: contexts/users in one file, the cluster in another."""
    monkeypatch.setenv("KUBECONFIG", f"{_write(tmp_path / 'a', _SPLIT_USER)}:{_write(tmp_path / 'b', _SPLIT_CLUSTER)}")
    config = load_config(None)
    assert config.cluster["server"] == "https://127.0.0.1:1" and config.user == {"token": "t"}
    assert config.namespace == "team-a"


def test_kubeconfig_list_the_first_file_to_set_a_value_or_a_name_wins(tmp_path, monkeypatch):
    first = {"clusters": [{"name": "c", "cluster": {"server": "https://first:1"}}],
             "users": [{"name": "u", "user": {"token": "first"}}]}
    second = {**_SPLIT_USER, "current-context": "y",
              "clusters": [{"name": "c", "cluster": {"server": "https://second:1", "insecure-skip-tls-verify": True}}],
              "users": [{"name": "u", "user": {"token": "second", "username": "not-merged-in"}}],
              "contexts": [{"name": "y", "context": {"cluster": "c", "user": "u"}}]}
    third = {**_SPLIT_USER, "current-context": "x"}
    monkeypatch.setenv("KUBECONFIG", ":".join(_write(tmp_path / n, d) for n, d in
                                              (("1", first), ("2", second), ("3", third))))
    config = load_config(None)
    assert config.current_context == "y"                                   # the second file set it first
    assert config.cluster == {"server": "https://first:1"}                  # a name's entry is taken whole
    assert config.user == {"token": "first"}
    assert set(config.contexts) == {"x", "y"}


def test_kubeconfig_list_reads_relative_paths_from_each_files_own_directory(tmp_path, monkeypatch):
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_text("ca")
    cluster = {"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                                      "certificate-authority": "ca.crt"}}]}
    user = {**_SPLIT_USER, "users": [{"name": "u", "user": {"tokenFile": "token"}}]}
    (tmp_path / "token").write_text("t")
    files = _write(tmp_path / "user", user), _write(tmp_path / "certs" / "cluster", cluster)
    monkeypatch.setenv("KUBECONFIG", ":".join(files))
    monkeypatch.chdir("/")
    config = load_config(None)
    assert config.cluster["certificate-authority"].filename() == str(tmp_path / "certs" / "ca.crt")
    assert config.user["tokenFile"] == str(tmp_path / "token")


@pytest.mark.parametrize("listed", ["{missing}:{real}", "{real}", "--kubeconfig"])
def test_one_kubeconfig_file_reads_relative_paths_from_its_own_directory(tmp_path, monkeypatch, listed):
    """As a merge does: the same file works whether the list's other entry exists or not."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "token").write_text("t")
    user = {**_SPLIT_USER, "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"tokenFile": "token",
                                            "exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                     "command": "./bin/get-token"}}}]}
    real = _write(tmp_path / "conf" / "config", user)
    monkeypatch.chdir("/")
    if listed == "--kubeconfig":
        monkeypatch.delenv("KUBECONFIG", raising=False)
        config = load_config(real)
    else:
        monkeypatch.setenv("KUBECONFIG", listed.format(missing=tmp_path / "missing", real=real))
        config = load_config(None)
    assert config.user["tokenFile"] == str(tmp_path / "conf" / "token")
    assert os.path.normpath(config.user["exec"]["command"]) == str(tmp_path / "conf" / "bin" / "get-token")


def test_kubeconfig_list_errors_name_the_file(tmp_path, monkeypatch):
    good = _write(tmp_path / "good", GOOD)
    (tmp_path / "broken").write_text("{unclosed: [")
    monkeypatch.setenv("KUBECONFIG", f"{good}:{tmp_path / 'broken'}")
    with pytest.raises(ConfigError, match=f"cannot load the kubeconfig {tmp_path / 'broken'}: "):
        load_config(None)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'gone'}:{tmp_path / 'also-gone'}")
    with pytest.raises(ConfigError, match="no such file"):
        load_config(None)
    for entries in ("contexts: 5\n", "contexts: [5]\n"):   # read, then refused while merged
        (tmp_path / "odd").write_text(entries)
        monkeypatch.setenv("KUBECONFIG", f"{good}:{tmp_path / 'odd'}")
        with pytest.raises(ConfigError, match=f"cannot load the kubeconfig {tmp_path / 'odd'}: "):
            load_config(None)


def test_an_explicit_kubeconfig_is_one_file_as_kubectls_flag(tmp_path, monkeypatch):
    good = _write(tmp_path / "good", GOOD)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'gone'}:{good}")
    with pytest.raises(ConfigError, match="no such file"):
        load_config(f"{tmp_path / 'gone'}:{good}")
    assert load_config(good).cluster["server"] == "https://127.0.0.1:1"
