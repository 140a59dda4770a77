"""kube.transport, as both clients use it: a user's ``tokenFile`` (and the in-cluster account's
token) read at each request, an exec plugin that fails as ConfigError (the CLI's one-line error),
and the proxy (the cluster's ``proxy-url``, else the environment's, read once), against a local
HTTP server recording what it was sent."""
from __future__ import annotations

import asyncio
import base64
import http.server
import ipaddress
import json
import socket
import threading

import pykube
import pytest
import requests
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.kube import client as kube_client
from rolloutbatch.kube import transport
from rolloutbatch.kube.client import Api, load_config
from rolloutbatch.sdk import AsyncClient, Client, ConfigError

_BATCH = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
          "metadata": {"name": "b", "namespace": "rl", "uid": "u1"}, "spec": {"episodes": 1}, "status": {}}


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with the batch; keeps (method, request target, headers)."""
    seen: list[tuple[str, str, dict]] = []

    def _answer(self) -> None:
        type(self).seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        body = json.dumps(_BATCH).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(autouse=True)
def _no_env_proxy(monkeypatch):
    """The process's proxy settings never send these tests' requests elsewhere."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture()
def server():
    _Recorder.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    srv.server_close()


def _kubeconfig(tmp_path, cluster: dict, user: dict) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "rl"}}],
    }))
    return str(path)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_sync(config: str) -> None:
    Client(config).get("b")


def _get_async(config: str) -> None:
    async def main() -> None:
        async with AsyncClient(config) as client:
            await client.get("b")
    asyncio.run(main())


BOTH = pytest.mark.parametrize("get", [_get_sync, _get_async], ids=["Client", "AsyncClient"])


def _bearer(n: int = -1) -> str | None:
    return _Recorder.seen[n][2].get("authorization")


@BOTH
def test_a_token_file_is_sent_and_read_again_at_each_request(tmp_path, server, get):
    token = tmp_path / "token"
    token.write_text("first-token\n")
    config = _kubeconfig(tmp_path, {"server": server}, {"tokenFile": str(token)})
    get(config)
    assert _bearer() == "Bearer first-token"
    token.write_text("rotated-token\n")   # a projected token, rewritten by the kubelet
    get(config)
    assert _bearer() == "Bearer rotated-token"


def test_the_blocking_api_reads_a_rotated_token_file_without_a_new_client(tmp_path, server):
    token = tmp_path / "token"
    token.write_text("first-token")
    api = Api(load_config(_kubeconfig(tmp_path, {"server": server}, {"tokenFile": str(token)})))
    api.get("/api/v1/namespaces", "list")
    token.write_text("rotated-token")
    api.get("/api/v1/namespaces", "list")
    assert [seen[2].get("authorization") for seen in _Recorder.seen] == ["Bearer first-token", "Bearer rotated-token"]


@BOTH
def test_a_token_file_that_is_gone_is_a_config_error_naming_it(tmp_path, server, get):
    config = _kubeconfig(tmp_path, {"server": server}, {"tokenFile": str(tmp_path / "gone")})
    with pytest.raises(ConfigError, match=r"cannot read the kubeconfig's token file .*gone: No such file"):
        get(config)
    assert _Recorder.seen == []


def test_a_token_file_that_is_gone_is_one_line_and_exit_1_in_the_cli(tmp_path, server, capsys):
    from rolloutbatch.cli.main import main

    config = _kubeconfig(tmp_path, {"server": server}, {"tokenFile": str(tmp_path / "gone")})
    assert main(["get", "b", "--kubeconfig", config]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rolloutbatch: error:") and len(err.strip().splitlines()) == 1
    assert "token file" in err


@pytest.mark.parametrize("script, needle", [
    ("exit 1", "exited with status 1"),                                       # an expired SSO login
    ("echo not-json", "printed no ExecCredential"),                           # garbage
    ("echo '{\"kind\": \"ExecCredential\"}'", "printed no ExecCredential"),   # no status
])
def test_a_failing_exec_plugin_is_one_line_and_exit_1(tmp_path, server, capsys, script, needle):
    """pykube let CalledProcessError, JSONDecodeError or KeyError out: a traceback."""
    from rolloutbatch.cli.main import main

    plugin = tmp_path / "plugin.sh"
    plugin.write_text(f"#!/bin/sh\n{script}\n")
    plugin.chmod(0o755)
    config = _kubeconfig(tmp_path, {"server": server},
                         {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}})
    with pytest.raises(ConfigError, match=needle):
        Client(config).get("b")
    with pytest.raises(ConfigError, match="not exec"):   # the async client refuses plugins at once
        AsyncClient(config)
    assert main(["get", "b", "--kubeconfig", config]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rolloutbatch: error:") and len(err.strip().splitlines()) == 1
    assert str(plugin) in err and needle in err
    assert _Recorder.seen == []


def _plugin(tmp_path, credential: dict) -> str:
    """A plugin that prints ``credential`` and keeps the KUBERNETES_EXEC_INFO it was given."""
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(f"#!/bin/sh\nprintf '%s' \"$KUBERNETES_EXEC_INFO\" > {tmp_path / 'exec-info'}\n"
                      f"cat <<'EOF'\n{json.dumps(credential)}\nEOF\n")
    plugin.chmod(0o755)
    return str(plugin)


V1 = "client.authentication.k8s.io/v1"


@pytest.mark.parametrize("version", [V1, "client.authentication.k8s.io/v1beta1"])
def test_an_exec_plugin_of_the_ga_version_authenticates_the_client_and_the_cli(tmp_path, server, capsys, version):
    """pykube runs only v1alpha1 and v1beta1 plugins: a v1 one (kubectl's since 1.22) was
    "ConfigError: auth exec api version client.authentication.k8s.io/v1 not implemented"."""
    from rolloutbatch.cli.main import main

    plugin = _plugin(tmp_path, {"apiVersion": version, "kind": "ExecCredential", "status": {"token": "from-plugin"}})
    config = _kubeconfig(tmp_path, {"server": server},
                         {"exec": {"apiVersion": version, "command": plugin, "interactiveMode": "Never"}})
    Client(config).get("b")
    assert _bearer() == "Bearer from-plugin"
    assert json.loads((tmp_path / "exec-info").read_text()) == {
        "apiVersion": version, "kind": "ExecCredential", "spec": {"interactive": False}}
    assert main(["get", "b", "--kubeconfig", config]) == 0, capsys.readouterr().err
    assert _bearer() == "Bearer from-plugin"


def test_an_exec_plugin_may_be_given_the_cluster(tmp_path, server):
    """provideClusterInfo: spec.cluster carries the server, the CA and the plugin's extension."""
    plugin = _plugin(tmp_path, {"apiVersion": V1, "kind": "ExecCredential", "status": {"token": "t"}})
    ca = base64.b64encode(b"not checked: an http server").decode()
    config = _kubeconfig(
        tmp_path, {"server": server, "certificate-authority-data": ca,
                   "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "a"}}]},
        {"exec": {"apiVersion": V1, "command": plugin, "interactiveMode": "IfAvailable", "provideClusterInfo": True}})
    Client(config).get("b")
    assert json.loads((tmp_path / "exec-info").read_text())["spec"]["cluster"] == {
        "server": server, "certificate-authority-data": ca, "config": {"audience": "a"}}


def test_an_exec_plugins_client_certificate_is_sent(tmp_path):
    """status.clientCertificateData and clientKeyData become the request's client certificate."""
    plugin = _plugin(tmp_path, {"apiVersion": V1, "kind": "ExecCredential",
                                "status": {"clientCertificateData": "CERT PEM", "clientKeyData": "KEY PEM"}})
    config = load_config(_kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"},
                                     {"exec": {"apiVersion": V1, "command": plugin, "interactiveMode": "Never"}}))
    adapter = kube_client._Adapter(config)
    request, kwargs = requests.Request("GET", "https://127.0.0.1:1/api").prepare(), {}
    adapter._setup_request_auth(config, request, kwargs)
    adapter._setup_request_certificates(config, request, kwargs)
    cert, key = kwargs["cert"]
    assert "Authorization" not in request.headers
    assert (open(cert).read(), open(key).read()) == ("CERT PEM", "KEY PEM")


@pytest.mark.parametrize("exec_conf, needle", [
    ({"apiVersion": V1}, "interactiveMode must be set"),                          # as client-go: v1 requires it
    ({"apiVersion": V1, "interactiveMode": "Always"}, "needs a terminal"),        # the tests' stdin is none
    ({"apiVersion": V1, "interactiveMode": "Sometimes"}, "interactiveMode 'Sometimes'"),
    ({"apiVersion": "client.authentication.k8s.io/v2"}, "apiVersion 'client.authentication.k8s.io/v2'"),
    ({"apiVersion": V1, "interactiveMode": "Never", "command": "/no/such/plugin", "installHint": "brew install it\n"},
     "was not found: brew install it"),
])
def test_an_exec_plugin_kubectl_would_refuse_is_a_config_error(tmp_path, server, exec_conf, needle):
    plugin = _plugin(tmp_path, {"apiVersion": V1, "kind": "ExecCredential", "status": {"token": "t"}})
    config = _kubeconfig(tmp_path, {"server": server}, {"exec": {"command": plugin, **exec_conf}})
    with pytest.raises(ConfigError, match=needle):
        Client(config).get("b")
    assert _Recorder.seen == []


@pytest.mark.parametrize("cluster", [{}, {"server": ""}, {"server": None}], ids=["none", "empty", "null"])
def test_a_cluster_without_a_server_is_a_config_error_for_every_client(tmp_path, server, capsys, cluster):
    """pykube fills a missing server with http://localhost: each client sent the user's bearer
    token in clear to localhost:80. kubectl refuses the kubeconfig: no server found for cluster."""
    from rolloutbatch.cli.main import main

    config = _kubeconfig(tmp_path, {**cluster, "insecure-skip-tls-verify": True}, {"token": "secret"})
    for get in (_get_sync, _get_async):
        with pytest.raises(ConfigError, match='no server found for cluster "k"'):
            get(config)
    assert main(["get", "b", "--kubeconfig", config]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rolloutbatch: error:") and len(err.strip().splitlines()) == 1
    assert 'no server found for cluster "k"' in err


@BOTH
def test_the_clusters_proxy_url_carries_the_requests(tmp_path, server, get, monkeypatch):
    """kubectl sends a cluster's requests through its proxy-url, over the environment's proxy."""
    port = _closed_port()   # the server itself is not reachable: only the proxy answers
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_closed_port()}")
    config = _kubeconfig(tmp_path, {"server": f"http://127.0.0.1:{port}", "proxy-url": server}, {"token": "t"})
    get(config)
    assert _Recorder.seen[0][1].startswith(f"http://127.0.0.1:{port}/")   # a proxy's absolute target
    assert _bearer(0) == "Bearer t"


@BOTH
def test_both_clients_take_the_environments_proxy(tmp_path, server, get, monkeypatch):
    """As kubectl (Go's ProxyFromEnvironment): HTTP_PROXY for an http server. The async client
    ignored the environment, the blocking one honoured it. The server's name is never resolved:
    the proxy is asked for it (an absolute request target)."""
    target = f"http://kube.rolloutbatch.invalid:{_closed_port()}"
    monkeypatch.setenv("HTTP_PROXY", server)
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8,.svc,localhost")
    get(_kubeconfig(tmp_path, {"server": target}, {"token": "t"}))
    assert _Recorder.seen[0][1].startswith(f"{target}/")


@BOTH
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_both_clients_reach_a_loopback_server_directly_whatever_the_environment(
        tmp_path, server, get, monkeypatch, variable):
    """kubectl never proxies a loopback server (a kind or minikube cluster behind a corporate
    proxy), and never reads ALL_PROXY: the proxy here is a closed port, the server answers."""
    monkeypatch.setenv(variable, f"http://127.0.0.1:{_closed_port()}")
    get(_kubeconfig(tmp_path, {"server": server}, {"token": "t"}))
    assert _Recorder.seen[0][1].startswith("/") and _bearer(0) == "Bearer t"


def test_the_proxy_is_one_answer_for_both_clients(tmp_path, monkeypatch):
    def proxy_of(cluster: dict) -> str | None:
        return transport.proxy(load_config(_kubeconfig(tmp_path, cluster, {"token": "t"})))

    monkeypatch.setenv("HTTPS_PROXY", "proxy.corp:3128")   # no scheme: http, as in Go
    assert proxy_of({"server": "https://10.0.0.1:6443"}) == "http://proxy.corp:3128"
    assert proxy_of({"server": "http://10.0.0.1:8080"}) is None   # HTTP_PROXY is unset
    assert proxy_of({"server": "https://10.0.0.1:6443", "proxy-url": "http://p:1"}) == "http://p:1"
    with pytest.raises(ConfigError, match="only http and https proxies"):
        proxy_of({"server": "https://10.0.0.1:6443", "proxy-url": "socks5://p:1080"})


@pytest.fixture
def in_a_pod(tmp_path, monkeypatch, server):
    """A pod's service account (token, namespace, CA) whose service is the recording server."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    for name, text in (("token", "sa-token-1\n"), ("namespace", "rl"), ("ca.crt", "")):
        (account / name).write_text(text)
    monkeypatch.setattr(kube_client, "SERVICE_ACCOUNT", str(account))
    host, port = server.removeprefix("http://").split(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return account


def test_the_in_cluster_token_is_read_again_at_each_request(in_a_pod):
    """pykube's from_service_account kept the token it read at start; the kubelet rewrites a
    projected token about hourly and the operator runs for days (then: 401 on every call)."""
    config = load_config()
    assert config.user == {"tokenFile": str(in_a_pod / "token")}
    assert transport.auth_headers(config) == {"Authorization": "Bearer sa-token-1"}
    (in_a_pod / "token").write_text("sa-token-2\n")
    assert transport.auth_headers(config) == {"Authorization": "Bearer sa-token-2"}


def test_the_blocking_api_sends_the_rotated_in_cluster_token(in_a_pod):
    config = load_config()
    config.cluster["server"] = config.cluster["server"].replace("https://", "http://")   # the plain recorder
    api = Api(config)
    api.get("/api/v1/namespaces", "list")
    (in_a_pod / "token").write_text("sa-token-2\n")
    api.get("/api/v1/namespaces", "list")
    assert [seen[2].get("authorization") for seen in _Recorder.seen] == ["Bearer sa-token-1", "Bearer sa-token-2"]


def test_the_operators_loop_sessions_take_the_proxy_too(tmp_path, server):
    """Log reads, status writes and exec (kube.async_session.open_session) go where Api's go."""
    from rolloutbatch.kube import async_session

    port = _closed_port()
    config = load_config(_kubeconfig(tmp_path, {"server": f"http://127.0.0.1:{port}", "proxy-url": server},
                                     {"token": "t"}))

    async def main() -> None:
        session = async_session.open_session(config, pool=1, timeout=10, user_agent="test")
        async with session:
            await async_session.send_json(session, "GET", f"http://127.0.0.1:{port}/version", "version",
                                          headers=transport.auth_headers(config))
    asyncio.run(main())
    assert _Recorder.seen[0][1] == f"http://127.0.0.1:{port}/version" and _bearer(0) == "Bearer t"


# --- The environment's proxy by kubectl's (Go's) rules ---------------------------------------------
# The review of 0168350: requests' get_environ_proxies proxied a loopback server, read ALL_PROXY
# and missed an ip:port NO_PROXY entry. The autouse fixture above clears every proxy variable.

def _server_config(server: str) -> pykube.KubeConfig:
    return pykube.KubeConfig({"clusters": [{"name": "c", "cluster": {"server": server}}],
                              "users": [{"name": "u", "user": {}}],
                              "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                              "current-context": "x"})


@pytest.mark.parametrize("server", ["https://127.0.0.1:6443", "https://localhost:6443", "https://[::1]:6443",
                                    "https://127.9.9.9", "https://[::ffff:127.0.0.1]:6443"])
def test_a_loopback_server_is_never_proxied(monkeypatch, server):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.example:3128")
    assert transport.proxy(_server_config(server)) is None


def test_all_proxy_is_not_a_kubectl_variable(monkeypatch):
    monkeypatch.setenv("ALL_PROXY", "http://proxy.corp.example:3128")
    monkeypatch.setenv("all_proxy", "http://proxy.corp.example:3128")
    assert transport.proxy(_server_config("https://10.0.0.5:6443")) is None


def test_a_socks_all_proxy_does_not_stop_every_client(monkeypatch):
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")   # kubectl ignores it
    assert transport.proxy(_server_config("https://10.0.0.5:6443")) is None   # was ConfigError


def test_a_no_proxy_entry_with_the_servers_port_bypasses(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.96.0.1:443")
    assert transport.proxy(_server_config("https://10.96.0.1:443")) is None
    assert transport.proxy(_server_config("https://10.96.0.1")) is None   # 443 by the scheme
    assert transport.proxy(_server_config("https://10.96.0.1:6443")) == "http://proxy.corp.example:3128"


def test_the_variables_kubectl_reads_for_each_scheme():
    proxies = {"HTTPS_PROXY": "http://s:1", "HTTP_PROXY": "http://h:1"}
    assert transport.environ_proxy("https://10.0.0.1:6443", proxies) == "http://s:1"
    assert transport.environ_proxy("http://10.0.0.1:8080", proxies) == "http://h:1"
    # an https server never falls back to HTTP_PROXY (httpproxy's proxyForURL)
    assert transport.environ_proxy("https://10.0.0.1:6443", {"HTTP_PROXY": "http://h:1"}) is None
    # the upper-case name first; an empty one counts as unset
    assert transport.environ_proxy("https://a.b", {"HTTPS_PROXY": "http://u:1", "https_proxy": "http://l:1"}) \
        == "http://u:1"
    assert transport.environ_proxy("https://a.b", {"HTTPS_PROXY": "", "https_proxy": "http://l:1"}) == "http://l:1"
    assert transport.environ_proxy("https://a.b", {"HTTPS_PROXY": "http://u:1", "NO_PROXY": "",
                                                   "no_proxy": "a.b"}) is None


# Go's own table (net/http and x/net/http/httpproxy tests), restated: NO_PROXY as there.
GO_NO_PROXY = "foobar.com, .barbaz.net, *.wildcard.com, 10.0.0.0/8, 192.168.1.1, 172.16.0.1:8080, " \
              "[2001:db8::52:0:1]:443, 2001:db8::52:0:2, example.org:9999"


@pytest.mark.parametrize("host, port, proxied", [
    ("localhost", "80", False), ("127.0.0.1", "443", False), ("127.0.0.2", "443", False), ("::1", "443", False),
    ("::2", "443", True),                      # not a loopback address
    ("barbaz.net", "443", True),               # .barbaz.net: subdomains only
    ("www.barbaz.net", "443", False),
    ("foobar.com", "443", False), ("www.foobar.com", "443", False), ("FOOBAR.com", "443", False),
    ("foofoobar.com", "443", True),            # not a subdomain of foobar.com
    ("baz.com", "443", True), ("xbarbaz.net", "443", True),
    ("wildcard.com", "443", True), ("www.wildcard.com", "443", False),
    ("10.1.2.3", "443", False), ("11.1.2.3", "443", True),
    ("192.168.1.1", "8443", False), ("192.168.1.2", "443", True),
    ("172.16.0.1", "8080", False), ("172.16.0.1", "443", True),
    ("2001:db8::52:0:1", "443", False), ("2001:db8::52:0:1", "6443", True),
    ("2001:db8::52:0:2", "6443", False),
    ("example.org", "9999", False), ("www.example.org", "9999", False), ("example.org", "443", True),
])
def test_go_no_proxy_table(host, port, proxied):
    assert transport.use_proxy(host, port, GO_NO_PROXY) is proxied


def test_localhost_is_compared_as_written():
    """Go compares the host with "localhost" before lower-casing it (useProxy): LOCALHOST is
    proxied unless NO_PROXY (compared lower-cased) names it. So is kubectl; so are we."""
    assert transport.use_proxy("LOCALHOST", "443", GO_NO_PROXY) is True
    assert transport.use_proxy("LOCALHOST", "443", "localhost") is False


@pytest.mark.parametrize("no_proxy, proxied", [
    ("*", False), ("foo.com, *", False), ("*.", True),
    ("[10.96.0.1]:443", False),                # a bracketed IPv4 with its port
    ("[2001:db8::1]", True),                   # brackets without a port: not an address, no match
    ("2001:db8::1", False), ("[2001:db8::1]:443", False), ("[2001:db8::1]:80", True),
    ("10.96.0.0/255.240.0.0", True),           # no netmask form in Go
    ("010.096.0.0/12", False),                 # client-go reads CIDR entries sloppily
    ("10.96.0.0/33", True), (":443", True), ("", True), (" , ,", True),
])
def test_no_proxy_entry_forms(no_proxy, proxied):
    server = "https://[2001:db8::1]" if "2001" in no_proxy else "https://10.96.0.1"
    found = transport.environ_proxy(server, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": no_proxy})
    assert found == ("http://p:1" if proxied else None)


def test_a_name_is_compared_in_idna_form():
    assert transport._server_address("https://bücher.example") == ("https", "xn--bcher-kva.example", "443")
    assert transport.environ_proxy("https://bücher.example", {"HTTPS_PROXY": "http://p:1",
                                                              "NO_PROXY": "xn--bcher-kva.example"}) is None
    assert transport.use_proxy("xn--bcher-kva.example", "443", "BÜCHER.example") is False


# --- Properties of NO_PROXY matching -----------------------------------------------------------------

_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)
_domain = st.builds(lambda labels, tld: ".".join([*labels, tld]),
                    st.lists(_label, min_size=0, max_size=3),
                    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=5))
_port = st.integers(1, 65535).map(str)
_v4 = st.ip_addresses(v=4).filter(lambda ip: not ip.is_loopback)
_v6 = st.ip_addresses(v=6).filter(lambda ip: not ip.is_loopback and ip.ipv4_mapped is None)


def _mixed_case(text: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips + [False] * len(text)))


@given(_domain, _label, _port, st.lists(st.booleans(), max_size=30))
def test_a_domain_matches_itself_and_its_subdomains_whatever_the_case(domain, sub, port, flips):
    entry = _mixed_case(domain, flips)
    assert transport.use_proxy(domain, port, entry) is False
    assert transport.use_proxy(f"{sub}.{domain}", port, entry) is False
    assert transport.use_proxy(_mixed_case(f"{sub}.{domain}", flips[::-1]), port, domain) is False
    assert transport.use_proxy(f"{sub}{domain}", port, entry) is True   # badexample.com, never a suffix


@given(_domain, _label, _port, st.sampled_from([".", "*."]))
def test_a_leading_dot_or_star_matches_subdomains_only(domain, sub, port, prefix):
    assert transport.use_proxy(domain, port, prefix + domain) is True
    assert transport.use_proxy(f"{sub}.{domain}", port, prefix + domain) is False


@given(_domain, _port, _port)
def test_a_domain_entry_with_a_port_matches_that_port_only(domain, port, other):
    assert transport.use_proxy(domain, port, f"{domain}:{port}") is False
    assert transport.use_proxy(domain, other, f"{domain}:{port}") is (other != port)


@given(_v4, _port, _port)
def test_an_ipv4_entry_with_a_port_matches_that_port_only(ip, port, other):
    assert transport.use_proxy(str(ip), other, str(ip)) is False
    assert transport.use_proxy(str(ip), other, f"{ip}:{port}") is (other != port)
    assert transport.use_proxy(str(ip), other, f"[{ip}]:{port}") is (other != port)


@given(_v6, _port, _port)
def test_an_ipv6_entry_is_bare_or_bracketed_with_a_port(ip, port, other):
    assert transport.use_proxy(str(ip), other, str(ip)) is False
    assert transport.use_proxy(str(ip), other, f"[{ip}]:{port}") is (other != port)
    assert transport.use_proxy(str(ip), other, f"[{ip}]") is True   # Go: not an address without a port
    assert transport.use_proxy(str(ip), other, str(ip).upper()) is False
    url = transport._server_address(f"https://[{ip}]:{port}")
    assert url == ("https", str(ip), port)


@given(st.one_of(_v4, _v6), st.integers(0, 128), st.one_of(_v4, _v6), _port)
def test_a_cidr_entry_matches_the_addresses_in_it(base, bits, ip, port):
    bits = min(bits, base.max_prefixlen)
    network = ipaddress.ip_network(f"{base}/{bits}", strict=False)
    entry = f"{base}/{bits}"   # host bits set, as Go's ParseCIDR takes it
    assert transport.use_proxy(str(ip), port, entry) is (ip not in network)
    assert transport.use_proxy(str(base), port, entry) is False


@given(st.sampled_from(["localhost", "127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"]), _port, st.text())
def test_loopback_is_never_proxied_whatever_no_proxy_says(host, port, no_proxy):
    assert transport.use_proxy(host, port, no_proxy) is False


@given(st.lists(st.one_of(_domain, _v4.map(str), st.builds(lambda d, p: f"{d}:{p}", _domain, _port),
                          st.just(""), st.just(" ")), max_size=5),
       st.one_of(_domain, _v4.map(str)), _port)
def test_a_list_bypasses_when_one_of_its_entries_does(entries, host, port):
    joined = transport.use_proxy(host, port, ",".join(f" {entry} " for entry in entries))
    assert joined is all(transport.use_proxy(host, port, entry) for entry in entries)


@given(st.text(), st.text(), st.text(max_size=6))
def test_nothing_in_the_environment_raises(no_proxy, host, port):
    transport.use_proxy(host, port, no_proxy)
    transport._cidr_bypass(host, no_proxy)
    transport.environ_proxy(f"https://{host}:{port}", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": no_proxy})


def test_a_malformed_proxy_is_a_config_error(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://[proxy.corp:3128")
    with pytest.raises(ConfigError, match=r"the proxy http://\[proxy.corp:3128"):
        transport.proxy(_server_config("https://10.0.0.5:6443"))
