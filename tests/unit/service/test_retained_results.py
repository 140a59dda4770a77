"""spec.cleanup.results: Retain. What the operator writes (no ownerReference, the retained label,
the head naming its shards' digests) and what a reader makes of it once the batch is gone
(sdk.retained): the rows, and nothing a neighbour edited into a shard. One API server in memory
holds it all: the store writes there, the batch is deleted there (its garbage collector keeps
the retained set and takes an owned one), and the SDK and CLI read and delete there."""
import dataclasses
import json

import pytest

from rolloutbatch import GROUP, KIND, VERSION
from rolloutbatch.core import naming
from rolloutbatch.core.results import SHARD_DIGESTS, decode_results
from rolloutbatch.kube import resources
from rolloutbatch.sdk import ResultsNotReady, result_ops, retained
from rolloutbatch.sdk.client import run
from tests.unit.core.factories import REF, result
from tests.unit.service.test_results_store import ConfigMaps, _store, _write


def _retained_batch(cms: ConfigMaps, episodes: int = 6, rows_per_shard: int = 2):
    """A batch that retained its results, ended and was deleted."""
    store, tracker, spec = _store(cms, episodes, rows_per_shard)
    spec = dataclasses.replace(spec, cleanup_results="Retain")
    store.configure(spec)
    for i in range(episodes):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    cms.delete_batch()
    return store


def test_retained_results_are_unowned_labelled_and_their_head_names_the_shards_digests():
    cms = ConfigMaps()
    store = _retained_batch(cms)
    head_name = naming.results_configmap_name(REF)
    assert len(cms.objects) == 4   # the head and three shards, left by the garbage collector
    for cm in cms.objects.values():
        meta = cm["metadata"]
        assert "ownerReferences" not in meta          # deleting the batch leaves them
        assert meta["labels"][naming.LABEL_RESULTS_RETAINED] == naming.RESULTS_RETAINED
        assert meta["labels"][naming.LABEL_BATCH_UID] == REF.uid
        assert meta["labels"][naming.LABEL_BATCH_NAME] == REF.name
    head = decode_results(cms.get(head_name))
    shards = {n: d for n, d in store.digests.items() if n != head_name}
    assert head[SHARD_DIGESTS] == shards and len(shards) == 3


def test_a_batch_that_deletes_its_results_writes_no_digests_in_its_head():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, 6, 2)
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    head = decode_results(cms.get(naming.results_configmap_name(REF)))
    assert SHARD_DIGESTS not in head
    assert all(naming.LABEL_RESULTS_RETAINED not in cm["metadata"]["labels"] for cm in cms.objects.values())
    cms.delete_batch()
    assert cms.objects == {}          # owned by the batch: gone with it


def test_the_retained_rows_read_without_the_batch():
    cms = ConfigMaps()
    _retained_batch(cms)
    document = run(cms.api, retained.retained_document(REF.name, REF.namespace))
    assert [row["index"] for row in document["pods"]] == list(range(6))
    assert document["retained"] == {"uid": REF.uid, "verified_by": retained.RETAINED_VERIFIED_BY}
    assert not document["missing_shards"]
    assert len(result_ops.rows(document, retained.retained_batch(document, REF.name, REF.namespace))) == 6


def test_a_shard_edited_since_is_left_out_and_named():
    cms = ConfigMaps()
    _retained_batch(cms)
    shard = naming.results_configmap_name(REF) + "-1"
    forged = decode_results(cms.get(shard))
    forged["pods"][0]["reward"] = 1e6
    cms.edit(shard, lambda cm: cm.update(data={"results.json": json.dumps(forged)}))
    document = run(cms.api, retained.retained_document(REF.name, REF.namespace))
    assert document["unverified_shards"] == [shard] and document["missing_shards"] == [shard]
    assert all(row["reward"] != 1e6 for row in document["pods"]) and len(document["pods"]) == 4
    with pytest.raises(ResultsNotReady):      # ResultsIncomplete: never a silently partial list
        result_ops.rows(document, retained.retained_batch(document, REF.name, REF.namespace))


def test_a_retained_head_edited_to_hold_nan_is_no_results(tmp_path):
    """NaN and Infinity are not JSON, but Python reads them: a head edited to hold one reached the
    trainer as a number no JSON has, and ``results --retained`` wrote it into results.json."""
    from rolloutbatch.cli import export

    cms = ConfigMaps()
    _retained_batch(cms)
    head = naming.results_configmap_name(REF)
    spoilt = dict(decode_results(cms.get(head)), reward_mean=float("inf"))
    cms.edit(head, lambda cm: (cm.pop("binaryData", None), cm.update(data={"results.json": json.dumps(spoilt)})))
    with pytest.raises(ResultsNotReady):
        run(cms.api, retained.retained_document(REF.name, REF.namespace))
    with pytest.raises(ValueError):           # what the CLI writes is strict JSON, or nothing
        export._write(tmp_path / "results.json", spoilt)


@pytest.mark.parametrize("spoil", ["absent", "unlabelled", "other uid"])
def test_no_retained_results_without_the_retained_head(spoil):
    cms = ConfigMaps()
    _retained_batch(cms)
    head = naming.results_configmap_name(REF)
    if spoil == "absent":
        cms.api.delete(cms.path(head), "kubectl delete")
    elif spoil == "unlabelled":
        cms.edit(head, lambda cm: cm["metadata"]["labels"].pop(naming.LABEL_RESULTS_RETAINED))
    else:
        cms.edit(head, lambda cm: cm["metadata"]["labels"].update({naming.LABEL_BATCH_UID: "another-uid"}))
    with pytest.raises(ResultsNotReady):
        run(cms.api, retained.retained_document(REF.name, REF.namespace))


def test_cleanup_deletes_every_retained_configmap_of_the_name_and_nothing_else():
    cms = ConfigMaps()
    _retained_batch(cms)
    cms.api.put({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "other", "namespace": REF.namespace, "labels": {"app": "mine"}}})
    deleted = run(cms.api, retained.delete_retained(REF.name, REF.namespace))
    assert len(deleted) == 4 and list(cms.objects) == ["other"]
    assert run(cms.api, retained.delete_retained(REF.name, REF.namespace)) == []


def test_a_retained_configmap_replaced_since_the_list_is_not_deleted():
    # deleted by its uid: a namesake made between the list and the delete stays
    cms = ConfigMaps()
    _retained_batch(cms)
    head = naming.results_configmap_name(REF)

    def replace_head():
        live = cms.get(head)
        cms.api.delete(cms.path(head), "someone")
        cms.api.put({**live, "metadata": {k: val for k, val in live["metadata"].items() if k != "uid"}})
    cms.api.meanwhile("DELETE", "ConfigMap", replace_head, when=lambda path: path.endswith(f"/{head}"))
    deleted = run(cms.api, retained.delete_retained(REF.name, REF.namespace))
    assert head not in deleted and len(deleted) == 3 and list(cms.objects) == [head]


NEW_UID = "uid-of-the-new-batch"


def _namesake(cms: ConfigMaps, uid: str = NEW_UID) -> None:
    """A new batch of the same name, created since (the earlier one is gone)."""
    cms.api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                 "metadata": {"name": REF.name, "namespace": REF.namespace, "uid": uid}, "spec": {}})


def _newer_set(cms: ConfigMaps, uid: str = NEW_UID) -> list[str]:
    """Results ConfigMaps a newer batch of the same name retains (names its shards skipped)."""
    names = [naming.results_configmap_name(REF) + f"-{n}" for n in (7, 8)]
    for name in names:
        cms.api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": name, "namespace": REF.namespace, "labels": {
                naming.LABEL_BATCH_NAME: REF.name, naming.LABEL_BATCH_UID: uid,
                naming.LABEL_RESULTS_RETAINED: naming.RESULTS_RETAINED}}, "data": {}})
    return names


def test_deleting_by_uid_removes_that_batchs_set_only():
    cms = ConfigMaps()
    _retained_batch(cms)
    newer = _newer_set(cms)
    deleted = run(cms.api, retained.delete_retained(REF.name, REF.namespace, REF.uid))
    assert len(deleted) == 4 and sorted(cms.objects) == newer
    assert run(cms.api, retained.retained_uids(REF.name, REF.namespace)) == [NEW_UID]


def test_deleting_by_name_leaves_the_results_of_the_batch_of_that_name_that_exists():
    # The race: a batch deleted, a new one of its name created and writing its results before
    # the retained ones are removed by name. The new batch's stay; the gone one's go.
    cms = ConfigMaps()
    _retained_batch(cms)
    newer = _newer_set(cms)
    _namesake(cms)
    assert len(run(cms.api, retained.delete_retained(REF.name, REF.namespace))) == 4
    assert sorted(cms.objects) == newer
    cms.delete_batch()           # once that batch is gone too, its results are a gone batch's
    assert run(cms.api, retained.delete_retained(REF.name, REF.namespace)) == newer and not cms.objects


def test_the_set_of_the_batch_that_exists_is_neither_removed_by_its_uid_nor_read_as_retained():
    # A Retain batch labels its results retained from its first write, so retained_uids lists it:
    # cleaning every listed set must leave the results of the batch that still exists.
    from rolloutbatch.sdk import Client

    cms = ConfigMaps()
    store, tracker, spec = _store(cms, 6, 2)
    spec = dataclasses.replace(spec, cleanup_results="Retain")
    store.configure(spec)
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)      # the batch finished; it still exists
    client = Client(api=cms.api, namespace=REF.namespace)
    handle = client.handle(REF.name)
    before = sorted(cms.objects)
    assert client.retained_uids(REF.name) == [REF.uid]

    for uid in client.retained_uids(REF.name):
        assert client.delete_retained(REF.name, uid=uid) == []
    assert sorted(cms.objects) == before and len(handle.results()) == 6
    for uid in (None, REF.uid):
        with pytest.raises(ResultsNotReady, match="still exists"):
            client.retained_results(REF.name, uid=uid)
    cms.delete_batch()                                     # gone: now they are retained ones
    assert len(client.retained_results(REF.name)) == 6
    assert len(client.delete_retained(REF.name, uid=REF.uid)) == 4 and not cms.objects


def test_a_new_batch_of_the_name_is_told_how_to_read_and_free_them():
    from rolloutbatch.service.results_store import conflict_message

    cms = ConfigMaps()
    _retained_batch(cms)
    found = cms.get(naming.results_configmap_name(REF))
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
    _namesake(cms)
    client = Client(api=cms.api, namespace=REF.namespace)
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
    cms.delete_batch()
    _namesake(cms, REF.uid)
    assert main(["results", REF.name, "--retained-uid", REF.uid, "--output", str(tmp_path / "y")]) == 1
    assert "still exists" in capsys.readouterr().err


def test_a_retained_configmap_is_the_batchs_by_its_label_alone():
    # no ownerReference: its batch-uid label is what restore and the writes go by
    assert resources.owned_by({"metadata": {"labels": {naming.LABEL_BATCH_UID: REF.uid}}}, REF.uid)
