"""A namespace that names no namespace is refused wherever the SDK and the CLI build a path from it
(kube.resources, core.k8s_rules.InvalidName): a hostile review found three that were not."""
from __future__ import annotations

import pytest

from rolloutbatch.sdk import Client, InvalidName
from tests.support.memory_api import MemoryApi
from tests.unit.test_sdk_cli_refusals import NS, _run, api  # noqa: F401  (the fixture)


def _paths(api: MemoryApi, monkeypatch) -> list[str]:
    """Every path a GET was sent to (MemoryApi asserts on a path it does not serve, before it records it)."""
    sent: list[str] = []
    real = api.get

    def get(path, what, **params):
        sent.append(path)
        return real(path, what, **params)
    monkeypatch.setattr(api, "get", get)
    return sent


@pytest.mark.parametrize("namespace", ["../x", "a/b", ".."])
def test_namespace_exists_refuses_a_name_that_names_no_namespace(api, monkeypatch, namespace):  # noqa: F811
    # Client.namespace_exists built object_path("Namespace", name) unchecked, so
    # GET /api/v1/namespaces/../x (the server cleans it to /api/v1/x) went out
    sent = _paths(api, monkeypatch)
    client = Client(api=api, namespace=NS)
    with pytest.raises(InvalidName, match="is not a namespace name"):
        client.namespace_exists(namespace)
    assert sent == [], f"sent {sent} for namespace {namespace!r}"


def test_the_cli_export_sends_no_path_built_from_a_status_sandbox_namespace_unchecked(api, monkeypatch,  # noqa: F811
                                                                                          tmp_path):
    # status.sandboxNamespace is whatever the status says (anyone with rolloutbatches/status may write it)
    api.put({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
             "metadata": {"name": "b", "namespace": NS, "uid": "u1"},
             "spec": {"episodes": 1, "task": {"files": {"episode.py": "print(1)"}}},
             "status": {"phase": "Running", "sandboxNamespace": "../y"}})
    from rolloutbatch.cli import export
    monkeypatch.setattr(export, "make_client", lambda args: Client(api=api, namespace=args.namespace or NS))
    sent = _paths(api, monkeypatch)
    try:
        code, out, err = _run("results", "b", "-O", str(tmp_path / "out"))
    except AssertionError as exc:   # the MemoryApi's "does not serve": the request was made
        code, out, err = None, "", str(exc)
    assert not [p for p in sent if ".." in p], (sent, code, out, err)
    assert "Traceback" not in err and "AssertionError" not in err, err
    assert code == 1 and "'../y' is not a namespace name" in err and len(err.splitlines()) == 1, (code, err)


def test_an_empty_namespace_is_refused_not_taken_for_the_clients(api):  # noqa: F811
    # the brief: '' where a namespace is needed is refused before any call; `namespace or self.namespace`
    # takes '' (a script's unset $NS) for "not given" and acts on the client's namespace instead
    api.put({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutPool",
             "metadata": {"name": "warm", "namespace": NS, "uid": "p1"}, "spec": {"size": 1}})
    client = Client(api=api, namespace=NS)
    calls = list(api.calls)
    with pytest.raises(InvalidName):
        client.scale_pool("warm", 3, "")
    assert api.calls == calls, api.calls[len(calls):]


@pytest.mark.parametrize("namespace", ["", "a/b", "..", "Team", "x" * 64])
def test_a_client_made_for_a_namespace_that_names_none_is_refused(api, namespace):  # noqa: F811
    """Client(namespace=os.environ.get("NS", "")): the "" of an unset variable was taken for "not
    given" and every call went to the kubeconfig's namespace without a word. Both clients refuse
    it, as every call refuses such a namespace."""
    from rolloutbatch.sdk import AsyncClient
    calls = list(api.calls)
    for make in (Client, AsyncClient):
        with pytest.raises(InvalidName, match="is not a namespace name"):
            make(api=api, namespace=namespace)
    assert api.calls == calls


def test_a_client_given_no_namespace_takes_the_default_and_one_given_keeps_it(api):  # noqa: F811
    from rolloutbatch.sdk import AsyncClient
    for make in (Client, AsyncClient):
        assert make(api=api).namespace == "default"
        assert make(api=api, namespace="team-a").namespace == "team-a"


_KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
clusters: [{{name: k, cluster: {{server: "https://127.0.0.1:1"}}}}]
users: [{{name: u, user: {{token: abc}}}}]
contexts: [{{name: c, context: {{cluster: k, user: u, namespace: {ns}}}}}]
"""


@pytest.mark.parametrize("written", ['""', "null", "~"])
def test_a_kubeconfig_context_with_an_empty_namespace_is_the_default_one_as_for_kubectl(tmp_path, written):
    """client-go reads an empty context namespace as "default"; taken as written, every call was
    refused for a namespace '' (or None) the user never gave."""
    from rolloutbatch.sdk import AsyncClient
    path = tmp_path / "config"
    path.write_text(_KUBECONFIG.format(ns=written))
    for make in (Client, AsyncClient):
        assert make(str(path)).namespace == "default"
