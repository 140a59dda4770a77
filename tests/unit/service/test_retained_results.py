"""spec.cleanup.results: Retain. What the operator writes (no ownerReference, the retained label,
the head naming its shards' digests) and what a reader makes of it once the batch is gone
(sdk.retained): the rows, and nothing a neighbour edited into a shard."""
import copy
import dataclasses
import json

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.results import SHARD_DIGESTS, decode_results
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import NotFound
from rolloutbatch.sdk import ResultsNotReady, ops, retained
from rolloutbatch.sdk.client import run
from tests.unit.core.factories import REF, result
from tests.unit.service.test_results_store import ConfigMaps, _store, _write


class Api:
    """The SDK's view of the same ConfigMaps: get by path, list by label, delete; and the
    RolloutBatches that exist now (``batches``, by name)."""

    url = "https://fake"

    def __init__(self, cms: ConfigMaps, batches: dict | None = None) -> None:
        self.cms = cms
        self.batches = dict(batches or {})
        self.deleted: list[str] = []

    def get(self, path: str, what: str, **params):
        name = path.rsplit("/", 1)[1]
        if path.endswith("/configmaps"):
            return {"items": copy.deepcopy(self.cms._matching(params["labelSelector"])), "metadata": {}}
        if "/rolloutbatches/" in path:
            if name not in self.batches:
                raise NotFound(what, status=404, reason="NotFound")
            return copy.deepcopy(self.batches[name])
        if "/configmaps/" not in path:
            return {}   # API discovery: the CRD is installed
        if name not in self.cms.objects:
            raise NotFound(what, status=404, reason="NotFound")
        return copy.deepcopy(self.cms.objects[name])

    def delete(self, path: str, what: str, body=None):
        name = path.rsplit("/", 1)[1]
        assert body["preconditions"]["uid"] == self.cms.objects[name]["metadata"].get("uid")
        self.deleted.append(name)
        del self.cms.objects[name]
        return {}


def _retained_batch(cms: ConfigMaps, episodes: int = 6, rows_per_shard: int = 2):
    store, tracker, spec = _store(cms, episodes, rows_per_shard)
    spec = dataclasses.replace(spec, cleanup_results="Retain")
    store.configure(spec)
    for i in range(episodes):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    for cm in cms.objects.values():    # the API server gives each object its uid
        cm["metadata"]["uid"] = f"uid-{cm['metadata']['name']}"
    return store


def test_retained_results_are_unowned_labelled_and_their_head_names_the_shards_digests():
    cms = ConfigMaps()
    store = _retained_batch(cms)
    head_name = naming.results_configmap_name(REF)
    assert len(cms.objects) == 4   # the head and three shards
    for cm in cms.objects.values():
        meta = cm["metadata"]
        assert "ownerReferences" not in meta          # deleting the batch leaves them
        assert meta["labels"][naming.LABEL_RESULTS_RETAINED] == naming.RESULTS_RETAINED
        assert meta["labels"][naming.LABEL_BATCH_UID] == REF.uid
        assert meta["labels"][naming.LABEL_BATCH_NAME] == REF.name
    head = decode_results(cms.objects[head_name])
    shards = {n: d for n, d in store.digests.items() if n != head_name}
    assert head[SHARD_DIGESTS] == shards and len(shards) == 3


def test_a_batch_that_deletes_its_results_writes_no_digests_in_its_head():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, 6, 2)
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    head = decode_results(cms.objects[naming.results_configmap_name(REF)])
    assert SHARD_DIGESTS not in head
    assert all(naming.LABEL_RESULTS_RETAINED not in cm["metadata"]["labels"] for cm in cms.objects.values())


def test_the_retained_rows_read_without_the_batch():
    cms = ConfigMaps()
    _retained_batch(cms)
    document = run(Api(cms), retained.retained_document(REF.name, REF.namespace))
    assert [row["index"] for row in document["pods"]] == list(range(6))
    assert document["retained"] == {"uid": REF.uid, "verified_by": retained.RETAINED_VERIFIED_BY}
    assert not document["missing_shards"]
    assert len(ops.rows(document, retained.retained_batch(document, REF.name, REF.namespace))) == 6


def test_a_shard_edited_since_is_left_out_and_named():
    cms = ConfigMaps()
    _retained_batch(cms)
    shard = naming.results_configmap_name(REF) + "-1"
    forged = decode_results(cms.objects[shard])
    forged["pods"][0]["reward"] = 1e6
    cms.objects[shard]["data"] = {"results.json": json.dumps(forged)}
    document = run(Api(cms), retained.retained_document(REF.name, REF.namespace))
    assert document["unverified_shards"] == [shard] and document["missing_shards"] == [shard]
    assert all(row["reward"] != 1e6 for row in document["pods"]) and len(document["pods"]) == 4
    with pytest.raises(ResultsNotReady):      # ResultsIncomplete: never a silently partial list
        ops.rows(document, retained.retained_batch(document, REF.name, REF.namespace))


@pytest.mark.parametrize("spoil", ["absent", "unlabelled", "other uid"])
def test_no_retained_results_without_the_retained_head(spoil):
    cms = ConfigMaps()
    _retained_batch(cms)
    head = cms.objects[naming.results_configmap_name(REF)]
    if spoil == "absent":
        del cms.objects[naming.results_configmap_name(REF)]
    elif spoil == "unlabelled":
        del head["metadata"]["labels"][naming.LABEL_RESULTS_RETAINED]
    else:
        head["metadata"]["labels"][naming.LABEL_BATCH_UID] = "another-uid"
    with pytest.raises(ResultsNotReady):
        run(Api(cms), retained.retained_document(REF.name, REF.namespace))


def test_cleanup_deletes_every_retained_configmap_of_the_name_and_nothing_else():
    cms = ConfigMaps()
    _retained_batch(cms)
    cms.objects["other"] = {"metadata": {"name": "other", "uid": "x", "labels": {"app": "mine"}}}
    api = Api(cms)
    deleted = run(api, retained.delete_retained(REF.name, REF.namespace))
    assert len(deleted) == 4 and list(cms.objects) == ["other"]
    assert run(api, retained.delete_retained(REF.name, REF.namespace)) == []


NEW_UID = "uid-of-the-new-batch"


def _namesake(uid: str = NEW_UID) -> dict:
    return {"metadata": {"name": REF.name, "namespace": REF.namespace, "uid": uid}, "spec": {}, "status": {}}


def _newer_set(cms: ConfigMaps, uid: str = NEW_UID) -> list[str]:
    """Results ConfigMaps a newer batch of the same name retains (names its shards skipped)."""
    names = [naming.results_configmap_name(REF) + f"-{n}" for n in (7, 8)]
    for name in names:
        cms.objects[name] = {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {
            naming.LABEL_BATCH_NAME: REF.name, naming.LABEL_BATCH_UID: uid,
            naming.LABEL_RESULTS_RETAINED: naming.RESULTS_RETAINED}}, "data": {}}
    return names


def test_deleting_by_uid_removes_that_batchs_set_only():
    cms = ConfigMaps()
    _retained_batch(cms)
    newer = _newer_set(cms)
    deleted = run(Api(cms), retained.delete_retained(REF.name, REF.namespace, REF.uid))
    assert len(deleted) == 4 and sorted(cms.objects) == newer
    assert run(Api(cms), retained.retained_uids(REF.name, REF.namespace)) == [NEW_UID]


def test_deleting_by_name_leaves_the_results_of_the_batch_of_that_name_that_exists():
    # The race: a batch deleted, a new one of its name created and writing its results before
    # the retained ones are removed by name. The new batch's stay; the gone one's go.
    cms = ConfigMaps()
    _retained_batch(cms)
    newer = _newer_set(cms)
    api = Api(cms, batches={REF.name: _namesake()})
    assert len(run(api, retained.delete_retained(REF.name, REF.namespace))) == 4
    assert sorted(cms.objects) == newer
    api.batches.clear()          # once that batch is gone too, its results are a gone batch's
    assert run(api, retained.delete_retained(REF.name, REF.namespace)) == newer and not cms.objects


def test_a_new_batch_of_the_name_is_told_how_to_read_and_free_them():
    from rolloutbatch.service.results_store import conflict_message

    cms = ConfigMaps()
    _retained_batch(cms)
    found = cms.objects[naming.results_configmap_name(REF)]
    message = conflict_message(REF, found=found)
    assert f"rolloutbatch results {REF.name} --retained-uid {REF.uid} --output DIR" in message
    assert f"rolloutbatch cleanup {REF.name} deletes this batch and them" in message
    assert "rename or delete it" in conflict_message(REF, found={"metadata": {"labels": {}}})


def test_the_advised_read_is_the_earlier_set_while_the_new_batch_exists(tmp_path, monkeypatch, capsys):
    """What the conflict message says, run: the new batch of the name stands beside the earlier
    results; `results NAME --retained-uid UID` writes the earlier batch's rows, and `--retained`
    alone refuses to read the new batch in their place."""
    from rolloutbatch.cli import export
    from rolloutbatch.cli.main import main
    from rolloutbatch.sdk import Client

    cms = ConfigMaps()
    _retained_batch(cms)
    client = Client(api=Api(cms, batches={REF.name: _namesake()}), namespace=REF.namespace)
    monkeypatch.setattr(export, "make_client", lambda args: client)
    out = tmp_path / "old"
    assert main(["results", REF.name, "--retained-uid", REF.uid, "--output", str(out)]) == 0
    written = json.loads((out / "results.json").read_text())
    assert written["uid"] == REF.uid and [r["index"] for r in written["pods"]] == list(range(6))
    assert json.loads((out / "receipt.json").read_text())["batch_uid"] == REF.uid

    capsys.readouterr()
    assert main(["results", REF.name, "--retained", "--output", str(tmp_path / "new")]) == 1
    err = capsys.readouterr().err
    assert f"--retained-uid {REF.uid}" in err and not (tmp_path / "new").exists()
    assert main(["results", REF.name, "--retained-uid", "another", "--output", str(tmp_path / "x")]) == 1
    assert "with uid another" in capsys.readouterr().err
    # the batch that exists is read as itself, never through the head alone
    client.api.batches[REF.name] = _namesake(REF.uid)
    assert main(["results", REF.name, "--retained-uid", REF.uid, "--output", str(tmp_path / "y")]) == 1
    assert "still exists" in capsys.readouterr().err


def test_a_retained_configmap_is_the_batchs_by_its_label_alone():
    # no ownerReference: its batch-uid label is what restore and the writes go by
    assert resources.owned_by({"metadata": {"labels": {naming.LABEL_BATCH_UID: REF.uid}}}, REF.uid)
