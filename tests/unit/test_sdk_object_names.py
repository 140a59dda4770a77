"""An object's name as the SDK and CLI take it: one object or none, never its collection.

`Client.delete_pool(name)` / `rolloutbatch pool delete NAME` build the object's path as
``.../rolloutpools/{name}`` without checking the name. An empty name (a script's unset variable:
``rolloutbatch pool delete "$POOL"``) makes that path the *collection* with a trailing slash,
which the real API server serves as the collection: the GET returns a ``RolloutPoolList`` (no
404), and the DELETE is a deletecollection that removes every RolloutPool of the namespace
(the "uid precondition" is taken from the list's metadata, which has none, so it is null): seen on
the devcluster, ``rolloutbatch pool delete "" --no-wait`` deleted both pools of a namespace. Names
are checked before any call (sdk.ops.object_name), and the client refuses a path with an empty or
dot segment whoever built it (kube.errors.check_path).

The fake API below answers as the real API server does for a path that ends in the collection
and a slash (the only difference from MemoryApi, which refuses such paths outright).
"""
from __future__ import annotations

import re

import pytest

from rolloutbatch import GROUP, POOL_KIND, VERSION, sdk
from rolloutbatch.cli.main import main as cli_main
from rolloutbatch.kube.errors import BadRequest, NotFound, check_path

NS = "rl"
COLLECTION = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools"


class CollectionServingApi:
    """Pools by name, served as kube-apiserver serves them: ``COLLECTION`` and ``COLLECTION/``
    are the collection (GET lists, DELETE deletes every one: deletecollection), ``COLLECTION/x``
    the object ``x``."""

    def __init__(self, *names: str) -> None:
        self.pools = {n: {"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND,
                          "metadata": {"name": n, "namespace": NS, "uid": f"uid-{n}"}, "spec": {"size": 0}}
                      for n in names}
        self.calls: list[tuple[str, str]] = []
        self.url = "https://127.0.0.1:6443"   # what the CLI reports as the server

    def _name(self, path: str) -> str | None:
        match = re.fullmatch(re.escape(COLLECTION) + r"(?:/([^/]*))?", path)
        assert match, path
        return match.group(1) or None   # '' (a trailing slash) is the collection, as on the real server

    def get(self, path: str, what: str, **params):
        self.calls.append(("GET", path))
        name = self._name(path)
        if name is None:
            return {"apiVersion": f"{GROUP}/{VERSION}", "kind": f"{POOL_KIND}List",
                    "metadata": {"resourceVersion": "7"}, "items": list(self.pools.values())}
        if name not in self.pools:
            raise NotFound(f'rolloutpools "{name}" not found', status=404, reason="NotFound")
        return self.pools[name]

    def delete(self, path: str, what: str, body=None):
        self.calls.append(("DELETE", path))
        name = self._name(path)
        uid = ((body or {}).get("preconditions") or {}).get("uid")
        if name is None:   # deletecollection: a null uid precondition is no precondition
            self.pools.clear()
            return {"kind": "Status", "status": "Success"}
        if name not in self.pools:
            raise NotFound(f'rolloutpools "{name}" not found', status=404, reason="NotFound")
        assert uid in (None, self.pools[name]["metadata"]["uid"])
        del self.pools[name]
        return {"kind": "Status", "status": "Success"}


def test_deleting_a_pool_by_an_empty_name_deletes_no_other_pool() -> None:
    """``delete_pool(name)`` must delete that one pool or none. With ``""`` it deletes every pool
    of the namespace: the GET of
    ``rolloutpools/`` returns the list instead of a 404, its metadata has no uid, and the DELETE of
    ``rolloutpools/`` is a deletecollection without a precondition. Expected: a ValueError (not a
    DNS subdomain) before any call, as build_pool and create_pool already refuse such a name, or at
    the least a NotFound, and the two pools still there."""
    name = ""
    api = CollectionServingApi("keep-a", "keep-b")
    client = sdk.Client(api=api, namespace=NS)
    try:
        client.delete_pool(name, wait=False)
    except (ValueError, NotFound):
        pass
    assert sorted(api.pools) == ["keep-a", "keep-b"], (
        f"delete_pool({name!r}) deleted {sorted({'keep-a', 'keep-b'} - set(api.pools))}; calls: {api.calls}")
    assert ("DELETE", COLLECTION + "/") not in api.calls


def test_getting_a_pool_by_an_empty_name_is_not_the_namespaces_list() -> None:
    """``get_pool("")`` (``rolloutbatch pool get ""``) returns the namespace's RolloutPoolList as if
    it were a pool: what the caller reads as one pool's spec and status is a list. Expected: a
    ValueError (not a RolloutPool name) or NotFound."""
    api = CollectionServingApi("keep-a")
    client = sdk.Client(api=api, namespace=NS)
    try:
        got = client.get_pool("")
    except (ValueError, NotFound):
        return
    assert got.get("kind") == POOL_KIND, f"get_pool('') returned a {got.get('kind')}, not a pool"


@pytest.mark.parametrize("name", ["", "..", ".", "a/b", "Keep-A", None, "x" * 254])
def test_every_pool_and_batch_call_refuses_what_names_no_object_before_any_call(name) -> None:
    api = CollectionServingApi("keep-a")
    client = sdk.Client(api=api, namespace=NS)
    calls = [lambda: client.get_pool(name), lambda: client.scale_pool(name, 1),
             lambda: client.delete_pool(name, wait=False), lambda: client.get(name)]
    for call in calls:
        with pytest.raises(sdk.InvalidName, match="is not a"):
            call()
    assert api.calls == [] and sorted(api.pools) == ["keep-a"]


@pytest.mark.parametrize("path", ["/apis/g/v1/namespaces/n/things/", "/apis/g/v1/namespaces/n/things/..",
                                  "/apis/g/v1/namespaces//things/x", "/apis/g/v1/namespaces/n/things/./x"])
def test_the_client_sends_no_path_with_an_empty_or_dot_segment(path) -> None:
    with pytest.raises(BadRequest, match="empty or dot segment"):
        check_path(path, "delete thing")
    check_path("/apis/g/v1/namespaces/n/things/x/status", "patch")   # a whole path passes


def test_the_cli_says_so_and_deletes_nothing(capsys, monkeypatch) -> None:
    api = CollectionServingApi("keep-a", "keep-b")
    monkeypatch.setattr(sdk, "Client", lambda *a, **k: sdk.client.Client(api=api, namespace=NS))
    code = cli_main(["pool", "delete", "", "-n", NS, "--no-wait"])
    assert code != 0 and "is not a RolloutPool name" in capsys.readouterr().err
    assert sorted(api.pools) == ["keep-a", "keep-b"] and api.calls == []
