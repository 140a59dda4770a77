"""service.registry: events before a reconciler exists are kept, within bounds a flood cannot pass."""
from rolloutbatch.service import registry
from rolloutbatch.service.registry import Registry
from tests.unit.core.test_tracker import pod


def test_a_flood_of_forged_pod_events_is_bounded(monkeypatch):
    monkeypatch.setattr(registry, "MAX_EARLY_PODS", 500)
    reg = Registry(ctx=None)
    reg.pod_event("victim", pod(0, uid="real"), False)
    for n in range(2000):                                  # one forged uid, then many
        reg.pod_event("forged" if n < 1000 else f"forged-{n}", pod(0, uid=f"f{n}"), False)
    assert reg._early_count <= 500
    assert sum(len(p) for p in reg._early_pods.values()) == reg._early_count
    reg.forget("forged-1999")
    assert sum(len(p) for p in reg._early_pods.values()) == reg._early_count
