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
from rolloutbatch.service import results_store
from rolloutbatch.service.results_store import ResultsStore
from tests.unit.core.factories import MINIMAL, REF, result


class ConfigMaps:
    """Stands in for the storage layer's ConfigMap calls: objects by name, a resourceVersion each."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.puts: list[str] = []
        self._version = 0

    def _matching(self, selector: str) -> list[dict]:
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        return [cm for cm in self.objects.values()
                if wanted.items() <= (cm["metadata"].get("labels") or {}).items()]

    async def call(self, fn, *args):
        if fn is resources.put_configmap:
            cm, _uid, _version = args
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


def _write(store, tracker, spec, final=False):
    asyncio.run(store.write(tracker, spec, None, {"final": final}, final=final))


def test_a_sharded_batchs_final_write_remembers_what_it_held():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    assert store.sharded
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec, final=True)
    # the tracker's version, not a shard's resourceVersion: nothing is written again after the end
    assert store.written_version == tracker.version and store.written_finals == 6
    assert not store.checkpoint_due(tracker, Cadence(0, 0, 1))
    head = naming.results_configmap_name(REF)
    assert set(cms.objects) == {head} | {f"{head}-{n}" for n in range(3)}

    # a restarted operator adopts every row from the shards
    again, restored, _ = _store(cms, episodes=6, rows_per_shard=2)
    asyncio.run(again.restore(restored))
    assert sorted(restored.results) == list(range(6))


def test_checkpoints_follow_the_monotonic_clock_not_the_wall_clock(monkeypatch):
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=100, rows_per_shard=1000)
    cadence = Cadence(min_interval=1, max_interval=10, steps=20)
    tracker.record(result(0), uid="u0")
    assert store.checkpoint_due(tracker, cadence)           # nothing written yet
    _write(store, tracker, spec)
    tracker.record(result(1), uid="u1")
    assert not store.checkpoint_due(tracker, cadence)        # one episode of 100, just written

    wall, tick = time.time(), time.monotonic()
    monkeypatch.setattr(results_store.time, "time", lambda: wall - 3600)   # the clock stepped back an hour
    monkeypatch.setattr(results_store.time, "monotonic", lambda: tick + 11)
    assert store.checkpoint_due(tracker, cadence)             # the longest interval has passed
    _write(store, tracker, spec)
    assert not store.checkpoint_due(tracker, cadence)         # nothing new since


def _restart(cms: ConfigMaps, episodes: int, rows_per_shard: int, k: int = 1):
    store, tracker, spec = _store(cms, episodes, rows_per_shard, k)
    asyncio.run(store.restore(tracker))
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
    _write(store, tracker, spec)                       # a checkpoint: every row, "final": false
    assert store.unwritten(tracker, final=True) and not store.unwritten(tracker, final=False)
    _write(store, tracker, spec, final=True)
    assert not store.unwritten(tracker, final=True)
    assert decode_results(cms.objects[naming.results_configmap_name(REF)])["final"] is True
    restarted, restored, _ = _restart(cms, 6, 2)
    assert not restarted.unwritten(restored, final=True)     # read back from the head


def test_a_good_copy_of_a_row_a_user_broke_survives_more_restarts():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=3)
    for i in range(4):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec)                          # shard 0 full: 0 1 2; shard 1 open: 3
    _edit_shard(cms, 0, _break_row(1))
    store, tracker, spec = _restart(cms, 6, 3)
    assert sorted(tracker.results) == [0, 2, 3]           # row 1 is judged again ...
    tracker.record(result(1), uid="u1-again")
    _write(store, tracker, spec)                          # ... into the open shard: 3 1
    store, tracker, spec = _restart(cms, 6, 3)
    tracker.record(result(4), uid="u4")
    _write(store, tracker, spec)                          # the open shard again: still holds row 1
    store, tracker, spec = _restart(cms, 6, 3)
    assert sorted(tracker.results) == [0, 1, 2, 3, 4]


def test_a_broken_member_of_a_complete_group_is_judged_again_without_error():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=3, k=2)
    for i in range(4):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec)                          # group 1 (rows 2, 3) listed in the open shard 1
    _edit_shard(cms, 0, _break_row(2))
    store, tracker, spec = _restart(cms, 6, 3, k=2)
    assert 2 not in tracker.results
    tracker.record(result(4), uid="u4")
    _write(store, tracker, spec)                          # the open shard again: no KeyError for row 2
    tracker.record(result(2), uid="u2-again")
    tracker.record(result(5), uid="u5")
    _write(store, tracker, spec, final=True)
    again, restored, _ = _restart(cms, 6, 3, k=2)
    assert sorted(restored.results) == list(range(6))
    shards = [decode_results(cm) for name, cm in sorted(cms.objects.items()) if name[-1].isdigit()]
    assert {g["group"] for d in shards for g in d["groups"]} == {0, 1, 2}


def test_a_row_outside_the_batch_in_a_shard_is_ignored():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(3):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec)                          # the open shard 1 holds row 2
    _edit_shard(cms, 1, lambda d: d["pods"].append({**d["pods"][0], "index": 50}))
    store, tracker, spec = _restart(cms, 6, 2)
    assert sorted(tracker.results) == [0, 1, 2]
    tracker.record(result(3), uid="u3")
    _write(store, tracker, spec)                          # no KeyError for index 50


def test_a_shard_of_the_batch_a_user_made_unreadable_is_written_over_not_a_conflict():
    cms = ConfigMaps()
    store, tracker, spec = _store(cms, episodes=6, rows_per_shard=2)
    for i in range(6):
        tracker.record(result(i), uid=f"u{i}")
    _write(store, tracker, spec)
    cms.objects[f"{naming.results_configmap_name(REF)}-1"]["data"] = {KEY: "{not json"}
    store, tracker, spec = _restart(cms, 6, 2)            # no ResultsConfigMapConflict
    assert sorted(tracker.results) == [0, 1, 4, 5]        # shard 1's rows are judged again
    for i in (2, 3):
        tracker.record(result(i), uid=f"u{i}-again")
    _write(store, tracker, spec, final=True)
    assert sorted(_restart(cms, 6, 2)[1].results) == list(range(6))
