"""service.results_store against the in-memory API server: checkpoints paced by the monotonic
clock, the final write of a sharded batch, what a restart adopts, and writes that race another
writer (a changed resourceVersion is seen, read again, and never costs a row; a ConfigMap not the
batch's under one of its names is refused)."""
import asyncio
import logging
import time

import pytest

from rolloutbatch import GROUP, KIND, VERSION
from rolloutbatch.core import manifests, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.cadence import Cadence
from rolloutbatch.core.model import EpisodeResult
from rolloutbatch.core.result_shards import assemble
from rolloutbatch.core.results import KEY, configmap_digest, decode_results
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Conflict
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import policy, results_store
from rolloutbatch.service.results_store import ResultsStore
from tests.support.memory_api import MemoryApi
from tests.unit.core.factories import MINIMAL, REF, result


class ConfigMaps:
    """The API server (in memory) holding the batch and its results ConfigMaps; the batch's
    status.resultsDigests is patched after each write, as the reconciler does."""

    def __init__(self) -> None:
        self.api = MemoryApi()
        self.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REF.namespace}})
        self.api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                      "metadata": {"name": REF.name, "namespace": REF.namespace, "uid": REF.uid}, "spec": {}})

    @property
    def objects(self) -> dict[str, dict]:
        """The ConfigMaps of the batch's namespace, by name."""
        return {cm["metadata"]["name"]: cm for cm in self.api.list_objects("ConfigMap", REF.namespace)}

    def get(self, name: str) -> dict | None:
        return self.api.get_object("ConfigMap", name, REF.namespace)

    def path(self, name: str) -> str:
        return resources.object_path("ConfigMap", name, REF.namespace)

    @property
    def status(self) -> dict:
        return dict(self.api.get_object(KIND, REF.name, REF.namespace).get("status") or {})

    def record(self, digests: dict[str, str]) -> None:
        resources.patch_batch_status(self.api, REF.namespace, REF.name, {"resultsDigests": dict(digests)})

    def delete_batch(self) -> None:
        """kubectl delete: the garbage collector takes what the batch owns."""
        self.api.delete(resources.object_path(KIND, REF.name, REF.namespace), "kubectl delete")

    def edit(self, name: str, change) -> None:
        """What a user does with kubectl edit: the object read, changed and written back."""
        cm = self.get(name)
        change(cm)
        self.api.replace(self.path(name), cm, "kubectl edit")


def _store(cms: ConfigMaps, episodes: int, rows_per_shard: int, k: int = 1) -> tuple[ResultsStore, BatchTracker, object]:
    raw = {**MINIMAL, "episodes": episodes}
    if k > 1:
        raw |= {"samplesPerInput": k, "inputs": [{"task": g} for g in range(episodes // k)]}
    spec = parse_spec(raw)
    owner = manifests.owner_reference(f"{GROUP}/{VERSION}", KIND, REF.name, REF.uid)   # as the reconciler's
    store = ResultsStore(Storage(cms.api), REF, owner, logging.getLogger("t"), rows_per_shard)
    store.configure(spec)
    return store, BatchTracker(episodes, 0), spec


def _write(store, tracker, spec, final=False, cms: ConfigMaps | None = None):
    asyncio.run(store.write(tracker, spec, None, {"final": final}, final=final))
    if cms is not None:
        cms.record(store.digests)


def test_a_sharded_batchs_final_write_remembers_what_it_held():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    assert store.sharded
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    # the tracker's version, not a shard's resourceVersion: nothing is written again after the end
    assert store.written_version == tracker.version and store.written_finals == 6
    assert not store.checkpoint_due(tracker, Cadence(0, 0, 1))
    head = naming.results_configmap_name(REF)
    assert set(cms.objects) == {head} | {f"{head}-{n}" for n in range(3)}
    assert all(cms.get(name)["metadata"]["labels"][naming.LABEL_BATCH_UID] == REF.uid for name in cms.objects)

    # a restarted operator adopts every row from the shards
    again, restored, _ = _store(cms, episodes=6, rows_per_shard=2)
    asyncio.run(again.restore(restored, cms.status))
    assert sorted(restored.results) == list(range(6))


def test_checkpoints_follow_the_monotonic_clock_not_the_wall_clock(monkeypatch):
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=100, rows_per_shard=1000)
    cadence = Cadence(min_interval=1, max_interval=10, steps=20)
    tracker.record(result(0), uid="u0")
    assert store.checkpoint_due(tracker, cadence)           # nothing written yet
    _write(store, tracker, spec, cms=cms)
    tracker.record(result(1), uid="u1")
    assert not store.checkpoint_due(tracker, cadence)        # one episode of 100, just written

    wall, tick = time.time(), time.monotonic()
    monkeypatch.setattr(results_store.time, "time", lambda: wall - 3600)   # the clock stepped back an hour
    monkeypatch.setattr(results_store.time, "monotonic", lambda: tick + 11)
    assert store.checkpoint_due(tracker, cadence)             # the longest interval has passed
    _write(store, tracker, spec, cms=cms)
    assert not store.checkpoint_due(tracker, cadence)         # nothing new since


def _restart(cms: ConfigMaps, episodes: int, rows_per_shard: int, k: int = 1):
    store, tracker, spec = _store(cms, episodes, rows_per_shard, k)
    asyncio.run(store.restore(tracker, cms.status))
    return store, tracker, spec


def _edit_shard(cms: ConfigMaps, number: int, change) -> None:
    """What a user does with kubectl edit: the shard's document changed, its ownership kept."""
    name = f"{naming.results_configmap_name(REF)}-{number}"
    document = decode_results(cms.get(name))
    change(document)
    edited = manifests.results_configmap(REF, document, None, shard=number)

    def rewrite(cm):
        cm.pop("binaryData", None)
        cm["data"] = edited["data"]
    cms.edit(name, rewrite)


def _break_row(index: int):
    def change(document):
        next(r for r in document["pods"] if r["index"] == index)["outcome"] = 5   # not a string
    return change


def test_the_final_write_follows_a_checkpoint_that_already_held_every_row():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)                       # a checkpoint: every row, "final": false
    assert store.unwritten(tracker, final=True) and not store.unwritten(tracker, final=False)
    _write(store, tracker, spec, final=True, cms=cms)
    assert not store.unwritten(tracker, final=True)
    assert decode_results(cms.get(naming.results_configmap_name(REF)))["final"] is True
    restarted, restored, _ = _restart(cms, 6, 2)
    assert not restarted.unwritten(restored, final=True)     # read back from the head


def test_a_shard_a_user_edited_is_not_adopted_and_the_rows_judged_again_survive_restarts():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=3)
    for i in range(4):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)                 # shard 0 full: 0 1 2; shard 1 open: 3
    _edit_shard(cms, 0, _break_row(1))
    store, tracker, spec = _restart(cms, 6, 3)
    assert sorted(tracker.results) == [3]                 # shard 0 is not what we wrote: all judged again
    for i in range(3):
        tracker.record(result(i), uid=f"u{i}-again")
    _write(store, tracker, spec, cms=cms)                 # into shard 1 (3 0 1) and shard 2 (2)
    store, tracker, spec = _restart(cms, 6, 3)
    tracker.record(result(4), uid="u4")
    _write(store, tracker, spec, cms=cms)
    store, tracker, spec = _restart(cms, 6, 3)
    assert sorted(tracker.results) == [0, 1, 2, 3, 4]


def test_a_broken_member_of_a_complete_group_is_judged_again_without_error():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=3, k=2)
    for i in range(4):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)                 # group 1 (rows 2, 3) listed in the open shard 1
    _edit_shard(cms, 0, _break_row(2))
    store, tracker, spec = _restart(cms, 6, 3, k=2)
    assert sorted(tracker.results) == [3]
    tracker.record(result(4), uid="u4")
    _write(store, tracker, spec, cms=cms)                 # the open shard again: no KeyError for rows 0-2
    for i in (0, 1, 2, 5):
        tracker.record(result(i), uid=f"u{i}-again")
    _write(store, tracker, spec, final=True, cms=cms)
    again, restored, _ = _restart(cms, 6, 3, k=2)
    assert sorted(restored.results) == list(range(6))
    shards = [decode_results(cm) for name, cm in sorted(cms.objects.items())
              if name[-1].isdigit() and (cms.status.get("resultsDigests") or {}).get(name)]
    assert {g["group"] for d in shards for g in d["groups"]} >= {0, 1, 2}


def test_a_row_outside_the_batch_in_a_shard_is_ignored():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(3):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)                          # the open shard 1 holds row 2
    _edit_shard(cms, 1, lambda d: d["pods"].append({**d["pods"][0], "index": 50}))
    store, tracker, spec = _restart(cms, 6, 2)
    assert sorted(tracker.results) == [0, 1]              # the edited shard 1 is not adopted
    tracker.record(result(3), uid="u3")
    _write(store, tracker, spec, cms=cms)                          # no KeyError for index 50


def test_a_shard_of_the_batch_a_user_made_unreadable_is_written_over_not_a_conflict():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)
    cms.edit(f"{naming.results_configmap_name(REF)}-1", lambda cm: cm.update(data={KEY: "{not json"}))
    store, tracker, spec = _restart(cms, 6, 2)            # no ResultsConfigMapConflict
    assert sorted(tracker.results) == [0, 1, 4, 5]        # shard 1's rows are judged again
    for i in (2, 3):
        tracker.record(result(i), uid=f"u{i}-again")
    _write(store, tracker, spec, final=True, cms=cms)
    assert sorted(_restart(cms, 6, 2)[1].results) == list(range(6))


# -- what a neighbour with ConfigMap rights can write ------------------------------------------
def _forged_shard(cms: ConfigMaps, number: int, rows: list[int], labelled: bool = True) -> str:
    """A ConfigMap a neighbour made by hand: our labels, ownerReference and a well-formed row."""
    name = f"{naming.results_configmap_name(REF)}-{number}"
    doc = {"batch": REF.name, "namespace": REF.namespace, "uid": REF.uid, "shard": number, "full": False,
           "pods": [dict(result(i).to_row(None, 1), reward=1e6) for i in rows], "groups": []}
    cm = manifests.results_configmap(REF, doc, {"uid": REF.uid}, shard=number)
    if not labelled:
        cm["metadata"].pop("labels"); cm["metadata"].pop("ownerReferences", None)
    cms.api.put(cm)
    return name


def test_a_hand_made_shard_is_not_adopted_and_invents_no_shards():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(2):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)
    _forged_shard(cms, 1, [2])
    _forged_shard(cms, 7, [3])
    store, tracker, spec = _restart(cms, 6, 2)
    assert sorted(tracker.results) == [0, 1] and all(r.reward == 1.0 for r in tracker.results.values())
    assert len(store.book.shards) == 1
    for i in range(2, 6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)     # shard 1 (ours by its labels) is written over
    head = decode_results(cms.get(naming.results_configmap_name(REF)))
    assert [s["name"][-1] for s in head["shards"]] == ["0", "1", "2"]
    assert sorted(_restart(cms, 6, 2)[1].results) == list(range(6))


def test_a_foreign_configmap_on_a_future_shard_name_costs_only_that_name():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    events = []
    store.emit = lambda *e: events.append(e)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    taken = _forged_shard(cms, 1, [2], labelled=False)    # mid-run: the next shard's name
    for i in range(1, 4):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)                 # no Stalled: shard 1 is skipped
    assert [e[1] for e in events] == ["ResultsShardNameTaken"]
    _forged_shard(cms, 3, [5], labelled=False)            # and the one after, before a restart
    store, tracker, spec = _restart(cms, 6, 2)
    assert sorted(tracker.results) == [0, 1, 2, 3]
    for i in (4, 5):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    head = decode_results(cms.get(naming.results_configmap_name(REF)))
    assert [bool(s.get("skipped")) for s in head["shards"]] == [False, True, False, True, False]
    assert decode_results(cms.get(taken))["pods"][0]["reward"] == 1e6   # never touched
    assert sorted(_restart(cms, 6, 2)[1].results) == list(range(6))


def _skipped(cms: ConfigMaps) -> list[bool]:
    return [bool(s.get("skipped")) for s in decode_results(cms.get(naming.results_configmap_name(REF)))["shards"]]


def _shard_name_taken() -> tuple[ConfigMaps, str]:
    """Eight episodes in shards of two; the name of shard 1 taken by a neighbour after the first
    write, and skipped by the second (rows 0-3 written)."""
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=8, rows_per_shard=2)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    taken = _forged_shard(cms, 1, [2], labelled=False)
    for i in range(1, 4):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)
    return cms, taken


def test_a_taken_shard_name_stays_skipped_in_the_checkpoints_after_a_restart():
    """Not only in the final write: a checkpoint's head listing the neighbour's name as a shard
    of ours has every streaming reader name it missing until the end."""
    cms, taken = _shard_name_taken()
    assert _skipped(cms) == [False, True, False]
    store, tracker, spec = _restart(cms, 8, 2)
    tracker.record(result(4), uid="u4")
    _write(store, tracker, spec, cms=cms)                 # a checkpoint, not the final write
    assert _skipped(cms) == [False, True, False, False]
    name = naming.results_configmap_name(REF)
    shards = [decode_results(cm) for n, cm in cms.objects.items() if n not in (name, taken)]
    assert assemble(decode_results(cms.get(name)), shards)["missing_shards"] == []


def test_a_skipped_name_whose_holder_left_stays_skipped_after_a_restart():
    """The head says the name was skipped: rebuilt as an ordinary shard it would be listed,
    never written, until the final write."""
    cms, taken = _shard_name_taken()
    cms.api.delete(cms.path(taken), "kubectl delete")     # the neighbour leaves
    store, tracker, spec = _restart(cms, 8, 2)
    assert sorted(tracker.results) == [0, 1, 2, 3]
    tracker.record(result(4), uid="u4")
    _write(store, tracker, spec, cms=cms)
    assert _skipped(cms) == [False, True, False, False] and taken not in cms.objects
    for i in range(5, 8):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    assert taken not in cms.objects
    assert sorted(_restart(cms, 8, 2)[1].results) == list(range(8))


def test_the_number_of_shards_is_bounded_whatever_the_flag_says():
    from rolloutbatch.core.result_shards import MAX_SHARDS
    store, _, _ = _store(ConfigMaps(), episodes=100_000, rows_per_shard=1)
    assert store.sharded and -(-100_000 // store.book.rows_per_shard) <= MAX_SHARDS


def _strip(cm):
    cm["metadata"].pop("labels"); cm["metadata"].pop("ownerReferences", None)


def test_a_head_stripped_of_labels_and_owner_is_still_ours_by_its_content():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=4, rows_per_shard=10)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    cms.edit(head, _strip)
    tracker.record(result(1), uid="u1")
    _write(store, tracker, spec, cms=cms)                 # no NotOurs: written, labels back
    assert naming.LABEL_BATCH_UID in cms.get(head)["metadata"]["labels"]
    cms.edit(head, _strip)
    store, tracker, spec = _restart(cms, 4, 10)           # no ResultsConfigMapConflict either
    assert sorted(tracker.results) == [0, 1]


# -- writes racing another writer (the API's resourceVersion preconditions) ----------------------
def _rows(cm: dict) -> list[int]:
    return sorted(row["index"] for row in decode_results(cm)["pods"])


def _calls_of(cms: ConfigMaps, write) -> list[tuple[str, str]]:
    cms.api.calls.clear()
    write()
    return [(method, path.rsplit("/", 1)[1]) for method, path in cms.api.calls if "/configmaps" in path]


def test_a_head_changed_by_someone_else_between_two_writes_is_read_again_and_loses_no_row():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=4, rows_per_shard=10)
    for i in range(2):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)
    # someone's write drops a row: the stored version is no longer the one the store wrote
    def drop_a_row(cm):
        document = decode_results(cm)
        cm["data"] = manifests.results_configmap(REF, {**document, "pods": document["pods"][:1]}, None)["data"]
    cms.edit(head, drop_a_row)
    assert _rows(cms.get(head)) == [0]
    tracker.record(result(2), uid="u2")
    calls = _calls_of(cms, lambda: _write(store, tracker, spec, cms=cms))
    assert calls == [("PUT", head), ("POST", "configmaps"), ("GET", head), ("PUT", head)]   # 409, then read again
    live = cms.get(head)
    assert _rows(live) == [0, 1, 2]
    assert store.versions[None] == live["metadata"]["resourceVersion"]
    tracker.record(result(3), uid="u3")
    assert _calls_of(cms, lambda: _write(store, tracker, spec, cms=cms)) == [("PUT", head)]   # one PUT again
    assert _rows(cms.get(head)) == [0, 1, 2, 3]
    assert sorted(_restart(cms, 4, 10)[1].results) == [0, 1, 2, 3]


def test_a_second_race_during_the_reread_is_a_conflict_the_policy_retries():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=4, rows_per_shard=10)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    cms.edit(head, lambda cm: cm["metadata"].setdefault("annotations", {}).update(seen="1"))
    # and again between the store's read (after the 409) and its write
    def again():
        cms.edit(head, lambda cm: cm["metadata"]["annotations"].update(seen="2"))
    cms.api.meanwhile("GET", "ConfigMap", lambda: cms.api.meanwhile("PUT", "ConfigMap", again),
                      when=lambda path: path.endswith(f"/{head}"))
    tracker.record(result(1), uid="u1")
    with pytest.raises(Conflict) as err:
        _write(store, tracker, spec, cms=cms)
    assert policy.is_transient(err.value)                 # the reconciler tries the write again
    _write(store, tracker, spec, cms=cms)
    assert _rows(cms.get(head)) == [0, 1]


def test_a_head_deleted_by_someone_is_written_again_whole():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=4, rows_per_shard=10)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    cms.api.delete(cms.path(head), "kubectl delete")
    tracker.record(result(1), uid="u1")
    _write(store, tracker, spec, cms=cms)
    assert _rows(cms.get(head)) == [0, 1]


def test_a_foreign_configmap_put_in_place_of_the_head_is_refused_and_left_as_it_is():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=4, rows_per_shard=10)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    cms.api.delete(cms.path(head), "kubectl delete")
    foreign = cms.api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": head, "namespace": REF.namespace},
                           "data": {"app": "mine"}})
    tracker.record(result(1), uid="u1")
    with pytest.raises(Stalled) as err:
        _write(store, tracker, spec, cms=cms)
    assert err.value.reason == v.STALL_RESULTS_CONFLICT
    assert cms.get(head) == foreign


def test_a_full_shard_someone_changed_is_written_again_by_the_final_write():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)                 # three full shards
    _edit_shard(cms, 0, _break_row(1))                    # its resourceVersion tells, not its content
    calls = _calls_of(cms, lambda: _write(store, tracker, spec, final=True, cms=cms))
    puts = [name for method, name in calls if method == "PUT"]
    assert f"{head}-0" in puts and f"{head}-1" not in puts and f"{head}-2" not in puts   # the others unchanged
    assert _rows(cms.get(f"{head}-0")) == [0, 1]
    assert sorted(_restart(cms, 6, 2)[1].results) == list(range(6))


def test_the_open_shard_taken_by_a_foreign_configmap_between_writes_loses_no_row():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    events = []
    store.emit = lambda *e: events.append(e)
    for i in range(3):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)                 # shard 0 full (0 1), shard 1 open (2)
    cms.api.delete(cms.path(f"{head}-1"), "kubectl delete")
    _forged_shard(cms, 1, [5], labelled=False)
    tracker.record(result(3), uid="u3")
    _write(store, tracker, spec, cms=cms)                 # shard 1 refused: its rows move on
    assert [e[1] for e in events] == ["ResultsShardNameTaken"]
    assert decode_results(cms.get(f"{head}-1"))["pods"][0]["reward"] == 1e6   # never touched
    for i in (4, 5):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    assert sorted(_restart(cms, 6, 2)[1].results) == list(range(6))


def test_a_head_deleted_while_the_store_reads_it_again_is_created_again():
    cms = ConfigMaps()
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=4, rows_per_shard=10)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    cms.edit(head, lambda cm: cm["metadata"].setdefault("annotations", {}).update(seen="1"))
    cms.api.meanwhile("GET", "ConfigMap", lambda: cms.api.delete(cms.path(head), "kubectl delete"),
                      when=lambda path: path.endswith(f"/{head}"))
    tracker.record(result(1), uid="u1")
    _write(store, tracker, spec, final=True, cms=cms)     # returns: the reconciler writes the final status next
    assert cms.get(head) is not None and _rows(cms.get(head)) == [0, 1]


# -- shards stripped of their labels by a neighbour: ours by their content, as the head is --------
def _three_rows_written(cms: ConfigMaps, strip) -> str:
    """Rows 0-2 written (shard 0 full: 0 1; shard 1 open: 2), then shard 0 edited by ``strip``
    (its content untouched, still what the status vouches for); the shard's name."""
    head = naming.results_configmap_name(REF)
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(3):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)
    vouched = cms.status["resultsDigests"][f"{head}-0"]
    cms.edit(f"{head}-0", strip)
    assert configmap_digest(cms.get(f"{head}-0")) == vouched
    return f"{head}-0"


@pytest.mark.parametrize("strip", [_strip, lambda cm: cm["metadata"].pop("labels")],
                         ids=["labels-and-owner", "labels"])
def test_a_shard_stripped_of_its_labels_keeps_its_rows_across_a_restart(strip):
    """A neighbour with ConfigMap rights strips a shard's labels (and owner): restored by the
    names the status vouches for, its rows are the operator's own (episodes 0 and 1, whose pods
    may be gone), and its name is not taken for a squatter's."""
    cms, events = ConfigMaps(), []
    _three_rows_written(cms, strip)
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    store.emit = lambda *e: events.append(e)
    asyncio.run(store.restore(tracker, cms.status))
    assert sorted(tracker.results) == [0, 1, 2] and [e[1] for e in events] == []


def test_the_final_write_keeps_the_rows_of_a_shard_stripped_of_its_labels():
    """After that restart the final write finds the shard without its label and writes it again,
    with its rows, not from an empty book."""
    cms = ConfigMaps()
    _three_rows_written(cms, lambda cm: cm["metadata"].pop("labels"))
    store, tracker, spec = _restart(cms, 6, 2)
    for i in (3, 4, 5):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    head = naming.results_configmap_name(REF)
    held = {row["index"] for name, cm in cms.objects.items() if name != head
            for row in (decode_results(cm) or {}).get("pods", [])}
    assert {0, 1} <= held


def _configmap_bytes(cm: dict) -> int:
    """What the API server counts against a ConfigMap's 1 MiB: keys and values of data and binaryData."""
    import base64
    data = sum(len(k) + len(val.encode()) for k, val in (cm.get("data") or {}).items())
    binary = sum(len(k) + len(base64.b64decode(val)) for k, val in (cm.get("binaryData") or {}).items())
    return data + binary


def _plain_row(i: int, rnd) -> EpisodeResult:
    """A succeeded termination-message episode: no log tail, no extras, no message."""
    created = 1.7e9 + rnd.random() * 1000
    suffix = "".join(rnd.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    return EpisodeResult(index=i, pod=f"shipping-fix-{i}-{suffix}", node=f"node-{rnd.randrange(50)}",
                         image_id="docker.io/library/python@sha256:" + "ab" * 32, outcome="succeeded",
                         reason=None, message="", reward=rnd.random(), pod_created=created,
                         ready_at=created + rnd.random() * 5, reward_at=created + 5 + rnd.random() * 60,
                         pod_to_ready_seconds=rnd.random() * 5)


def test_the_largest_results_shard_rows_the_runner_accepts_writes_no_configmap_past_one_mib():
    """--results-shard-rows took any value (runner.NUMERIC_FLAGS: Range(1)) and a batch no bigger
    than it was one unsharded document: 20,000 plain episodes under 100000 made a gzip of ~1.4 MB
    after every shed stage, the API refused it, the batch stalled ApiRefused and every row was lost.
    Now the runner bounds the flag and the store shards past MAX_DOCUMENT_ROWS whatever it says."""
    import random

    from rolloutbatch.runner import NUMERIC_FLAGS
    rnd = random.Random(7)
    episodes = 20_000
    largest = NUMERIC_FLAGS["results_shard_rows"].high
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=episodes, rows_per_shard=int(min(largest, 100_000)))
    assert store.book.episodes == episodes      # what keeps shards filled by bytes within MAX_SHARDS
    for i in range(episodes):
        tracker.record(_plain_row(i, rnd), uid=f"u{i}")
    _write(store, tracker, spec, final=True, cms=cms)
    sizes = {name: _configmap_bytes(cm) for name, cm in cms.objects.items()}
    assert max(sizes.values()) <= 1024 * 1024, sizes
    whole = assemble(decode_results(cms.get(naming.results_configmap_name(REF))),
                     [decode_results(cm) for name, cm in cms.objects.items() if name != naming.results_configmap_name(REF)])
    assert len(whole["pods"]) == episodes and "dropped_row_fields" not in whole


def _noise(rnd, n: int) -> str:
    import string
    return "".join(rnd.choice(string.ascii_letters + string.digits + "+/") for _ in range(n))


def test_fields_shed_before_a_restart_stay_flagged_after_it():
    """A document too big even gzipped sheds row fields and says so in dropped_row_fields. A
    restarted operator restored those shed rows (no log_tail, no extra) as final; its next write fit
    without shedding, so dropped_row_fields was gone while the rows still lacked the fields: a
    trainer reading the final document found extras missing without a word."""
    import random
    rnd = random.Random(3)
    episodes = 100
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=episodes, rows_per_shard=1000)
    for i in range(80):
        extra = {f"f{j}": _noise(rnd, 3900) for j in range(4)}
        tracker.record(result(i, outcome="failed", log_tail=_noise(rnd, 4000), extra=extra), uid=f"u{i}")
    _write(store, tracker, spec, cms=cms)
    head = naming.results_configmap_name(REF)
    before = decode_results(cms.get(head))
    assert "extra" in before["dropped_row_fields"]                  # shed, and said so
    assert not any("extra" in r for r in before["pods"])

    store, tracker, spec = _restart(cms, episodes, 1000)            # the operator restarts
    assert len(tracker.results) == 80
    tracker.record(result(80), uid="u80")
    _write(store, tracker, spec, final=True, cms=cms)
    after = decode_results(cms.get(head))
    shed_rows = [r for r in after["pods"] if r["index"] < 80]
    assert not any("extra" in r or "log_tail" in r for r in shed_rows)   # still without them...
    assert after["dropped_row_fields"] == before["dropped_row_fields"]   # ...and still said so


def test_a_shard_rewritten_after_a_restart_still_flags_its_shed_rows(monkeypatch):
    """Likewise for a shard: rows restored from a shard that shed fields, written again (here the
    final write finds the shard deleted), must keep saying which fields they lack; a shard of rows
    that lost nothing says nothing."""
    import random
    rnd = random.Random(4)
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=3)
    for i in range(3):
        big = {f"f{j}": _noise(rnd, 3900) for j in range(4)}
        tracker.record(result(i, outcome="failed", log_tail=_noise(rnd, 4000), extra=big), uid=f"u{i}")
    with monkeypatch.context() as patch:
        patch.setattr("rolloutbatch.core.results.GZIP_ABOVE", 20_000)   # too small for three such rows gzipped
        _write(store, tracker, spec, cms=cms)
    shard0 = f"{naming.results_configmap_name(REF)}-0"
    assert "extra" in decode_results(cms.get(shard0))["dropped_row_fields"]

    store, tracker, spec = _restart(cms, 6, 3)
    for i in range(3, 6):
        tracker.record(result(i), uid=f"u{i}")
    cms.api.delete(cms.path(shard0), "kubectl delete")
    _write(store, tracker, spec, final=True, cms=cms)
    assert "extra" in decode_results(cms.get(shard0))["dropped_row_fields"]
    assert "dropped_row_fields" not in decode_results(cms.get(f"{naming.results_configmap_name(REF)}-1"))
    whole = assemble(decode_results(cms.get(naming.results_configmap_name(REF))),
                     [decode_results(cms.get(f"{naming.results_configmap_name(REF)}-{n}")) for n in (0, 1)])
    assert "extra" in whole["dropped_row_fields"]       # what readers get says it too
