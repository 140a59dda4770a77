"""service.results_store: checkpoints paced by the monotonic clock, the final write of a sharded batch."""
import asyncio
import copy
import logging
import time

from rolloutbatch.core import naming
from rolloutbatch.core.cadence import Cadence
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


def _store(cms: ConfigMaps, episodes: int, rows_per_shard: int) -> tuple[ResultsStore, BatchTracker, object]:
    spec = parse_spec({**MINIMAL, "episodes": episodes})
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
