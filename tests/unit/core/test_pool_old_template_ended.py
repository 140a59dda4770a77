"""An older template's pod that ended broken is replaced and does not stall today's template.

An earlier change: "an older template's broken pods are replaced without stalling today's template (a
fixed image waited out the 60 s back-off under a Warning that blamed it)". The fix covers only
pods still waiting (``_waiting``: image pulls, CreateContainerConfigError). census()'s first
branch, for a pod whose container ended, files a failed prepare (exit NOT_DELIVERED_EXIT) and a
runtime StartError as ``stuck`` without looking at the pod's template. So a user who fixes the
pool's prepare command (or its image lacking /bin/sh) while old pods are still failing gets:
the round after the fix sees an old pod that just ended 121 (its prepare's timeout, a few
seconds after the edit), files it as stuck against the *new* template, the daemon emits a new
Warning PrepareFailed blaming the fixed template (``_stuck[0] != template``) and makes no pod
for STUCK_BACKOFF (60 s): exactly what the commit says it fixed, for the other half of the
broken pods.

Expected: an older template's ended pod is dead (replaced) and not stuck, as an older
template's ImagePullBackOff pod now is.
"""
from __future__ import annotations

from rolloutbatch.core import naming, pool_census, pool_children, pool_spec
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pod_reading import parse_time

NOW = parse_time("2026-12-03T00:10:00Z")
SPEC = pool_spec.parse_pool_spec({"size": 2, "task": {"files": {"e.py": "x"}}})


def ended(name: str, template: str, terminated: dict) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": "2026-12-03T00:00:00Z",
                         "labels": {naming.LABEL_EPISODE_ROLE: naming.ROLE_WARM},
                         "annotations": {pool_children.TEMPLATE_ANNOTATION: template}},
            "status": {"phase": v.PodPhase.FAILED, "containerStatuses": [
                {"name": naming.CONTAINER_NAME, "state": {"terminated": terminated}}]}}


PREPARE_FAILED = {"exitCode": v.NOT_DELIVERED_EXIT, "reason": "Error",
                  "message": "prepare exited 1\npip: no such package"}
START_ERROR = {"exitCode": 128, "reason": "StartError",
               "message": 'exec: "/bin/sh": stat /bin/sh: no such file or directory'}


def test_an_older_templates_failed_prepare_does_not_stall_todays_template():
    found = pool_census.census([ended("old-1", "old", PREPARE_FAILED)], "new", NOW)
    assert found.dead == ("old-1",)
    assert found.stuck == (), f"the fixed template is stalled by the old one's prepare: {found.stuck}"
    assert pool_census.pods_to_create(SPEC, found) == 2


def test_an_older_templates_start_error_does_not_stall_todays_template():
    found = pool_census.census([ended("old-1", "old", START_ERROR)], "new", NOW)
    assert found.dead == ("old-1",)
    assert found.stuck == (), f"the fixed template is stalled by the old one's StartError: {found.stuck}"
    assert pool_census.pods_to_create(SPEC, found) == 2


def test_todays_failed_prepare_still_stalls():   # the rule kept for the current template
    found = pool_census.census([ended("p", "new", PREPARE_FAILED)], "new", NOW)
    assert [s[1] for s in found.stuck] == [v.PoolReason.PREPARE_FAILED]


def test_a_fixed_prepare_is_tried_at_once_though_an_old_pod_failed_meanwhile():
    """The daemon's view: pod A's prepare failed (Stalled PrepareFailed, A deleted); the user fixes
    the prepare; pod B, of the old template, fails its prepare before the next round. The fixed
    template is blamed again (a second Warning PrepareFailed) and no pod is made for 60 s."""
    from rolloutbatch import GROUP, VERSION
    from tests.support.memory_api import MemoryApi
    from tests.unit.service.memory_pool import NS, live, make_pool, pod_names, reconciler, run, set_status

    def failed_prepare(name):
        set_status(api, name, {"phase": "Failed", "containerStatuses": [
            {"name": naming.CONTAINER_NAME, "state": {"terminated": PREPARE_FAILED}}]})

    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    make_pool(api, 2, prepare={"command": ["/bin/sh", "-c", "pip install no-such-package"]})
    events: list = []
    rec = reconciler(api, events)
    run(rec.round())
    first, second = sorted(pod_names(api))
    failed_prepare(first)
    run(rec.round())
    assert [e[1] for e in events] == [v.PoolReason.PREPARE_FAILED]      # as designed

    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm",
                    {"spec": {"prepare": {"command": ["/bin/sh", "-c", "true"]}}}, "the user's fix")
    rec.body = live(api)
    failed_prepare(second)            # the old template's other pod fails before the next round
    run(rec.round())
    run(rec.round())
    made = [n for n in pod_names(api) if n not in (first, second)]
    assert len(made) == 2, f"the fixed template made no pod (waits out the 60 s back-off): {pod_names(api)}"
    assert [e[1] for e in events] == [v.PoolReason.PREPARE_FAILED], f"the fixed template was blamed: {events}"
