"""service.results_store: checkpoints paced by the monotonic clock, the final write of a sharded batch."""
import asyncio
import copy
import logging
import time

from rolloutbatch.core import manifests, naming
from rolloutbatch.core.cadence import Cadence
from rolloutbatch.core.results import KEY, decode_results
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import NotOurs
from rolloutbatch.service import results_store
from rolloutbatch.service.results_store import ResultsStore
from tests.unit.core.factories import MINIMAL, REF, result


class ConfigMaps:
    """Stands in for the storage layer's ConfigMap calls: objects by name, a resourceVersion each."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.puts: list[str] = []
        self._version = 0
        # the batch's status.resultsDigests, as the reconciler patches it after each write
        self.status_digests: dict[str, str] = {}

    def _matching(self, selector: str) -> list[dict]:
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        return [cm for cm in self.objects.values()
                if wanted.items() <= (cm["metadata"].get("labels") or {}).items()]

    async def call(self, fn, *args):
        if fn is resources.put_configmap:
            cm, uid, _version, also_ours = args
            existing = self.objects.get(cm["metadata"]["name"])
            if existing is not None and not resources.owned_by(existing, uid) and not also_ours(existing):
                raise NotOurs(f"{cm['metadata']['name']} is not ours")
            self._version += 1
            live = copy.deepcopy(cm)
            live["metadata"]["resourceVersion"] = str(self._version)
            self.objects[cm["metadata"]["name"]] = live
            self.puts.append(cm["metadata"]["name"])
            return live
        if fn is resources.configmap_versions:
            return {cm["metadata"]["name"]: cm["metadata"]["resourceVersion"] for cm in self._matching(args[1])}
        if fn is resources.list_configmaps:
            return self._matching(args[1])
        assert fn is resources.get_or_none and args[0] == "ConfigMap"
        return self.objects.get(args[1])


def _store(cms: ConfigMaps, episodes: int, rows_per_shard: int, k: int = 1) -> tuple[ResultsStore, BatchTracker, object]:
    raw = {**MINIMAL, "episodes": episodes}
    if k > 1:
        raw |= {"samplesPerInput": k, "inputs": [{"task": g} for g in range(episodes // k)]}
    spec = parse_spec(raw)
    store = ResultsStore(cms.call, REF, {}, logging.getLogger("t"), rows_per_shard)
    store.configure(spec)
    return store, BatchTracker(episodes, 0), spec


def _write(store, tracker, spec, final=False, cms: ConfigMaps | None = None):
    asyncio.run(store.write(tracker, spec, None, {"final": final}, final=final))
    if cms is not None:
        cms.status_digests = dict(store.digests)


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

    # a restarted operator adopts every row from the shards
    again, restored, _ = _store(cms, episodes=6, rows_per_shard=2)
    asyncio.run(again.restore(restored, cms.status_digests))
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
    asyncio.run(store.restore(tracker, cms.status_digests))
    return store, tracker, spec


def _edit_shard(cms: ConfigMaps, number: int, change) -> None:
    """What a user does with kubectl edit: the shard's document changed, its ownership kept."""
    name = f"{naming.results_configmap_name(REF)}-{number}"
    cm = cms.objects[name]
    document = decode_results(cm)
    change(document)
    edited = manifests.results_configmap(REF, document, None, shard=number)
    cm.pop("binaryData", None)
    cm["data"] = edited["data"]


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
    assert decode_results(cms.objects[naming.results_configmap_name(REF)])["final"] is True
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
              if name[-1].isdigit() and cms.status_digests.get(name)]
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
    cms.objects[f"{naming.results_configmap_name(REF)}-1"]["data"] = {KEY: "{not json"}
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
    cms.objects[name] = dict(cm, metadata=dict(cm["metadata"], resourceVersion="999"))
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
    head = decode_results(cms.objects[naming.results_configmap_name(REF)])
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
    head = decode_results(cms.objects[naming.results_configmap_name(REF)])
    assert [bool(s.get("skipped")) for s in head["shards"]] == [False, True, False, True, False]
    assert decode_results(cms.objects[taken])["pods"][0]["reward"] == 1e6   # never touched
    assert sorted(_restart(cms, 6, 2)[1].results) == list(range(6))


def test_the_number_of_shards_is_bounded_whatever_the_flag_says():
    from rolloutbatch.core.result_shards import MAX_SHARDS
    store, _, _ = _store(ConfigMaps(), episodes=100_000, rows_per_shard=1)
    assert store.sharded and -(-100_000 // store.book.rows_per_shard) <= MAX_SHARDS


def test_a_head_stripped_of_labels_and_owner_is_still_ours_by_its_content():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=4, rows_per_shard=10)
    tracker.record(result(0), uid="u0")
    _write(store, tracker, spec, cms=cms)
    head = cms.objects[naming.results_configmap_name(REF)]
    head["metadata"].pop("labels"); head["metadata"].pop("ownerReferences", None)
    tracker.record(result(1), uid="u1")
    _write(store, tracker, spec, cms=cms)                 # no NotOurs: written, labels back
    assert naming.LABEL_BATCH_UID in cms.objects[naming.results_configmap_name(REF)]["metadata"]["labels"]
    head = cms.objects[naming.results_configmap_name(REF)]
    head["metadata"].pop("labels"); head["metadata"].pop("ownerReferences", None)
    store, tracker, spec = _restart(cms, 4, 10)           # no ResultsConfigMapConflict either
    assert sorted(tracker.results) == [0, 1]
