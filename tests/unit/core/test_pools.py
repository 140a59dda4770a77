"""core.pools: the warm pod, the claim, the episode script, the census and the status.

The episode script and the launcher are run by a real POSIX shell here (/bin/sh, as in the
pods): quoting is proved by running it, not by reading it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import naming, pool_census, pool_children, pool_delivery, pool_spec, pools
from rolloutbatch.core.env_expansion import expand
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.vocabulary import AGENT_OVERRAN_EXIT, COMPLETION_INDEX_KEY, NOT_DELIVERED_EXIT
from tests.unit.core.pool_shell import episode, hand_over, reap_launchers, start_launcher, wait_for_file  # noqa: F401 (the fixture)

POOL = pool_spec.PoolRef(name="swe", namespace="team", uid="0123456789abcdef")
BATCH = BatchRef(namespace="team", name="b1", uid="fedcba98-7654-3210", generation=1)
SPEC = {"size": 3, "task": {"files": {"episode.py": "print(1)"}}}


def _spec(**extra) -> pool_spec.PoolSpec:
    return pool_spec.parse_pool_spec({**SPEC, **extra})


def _mounts(container: dict) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container["volumeMounts"]}


# -- parsing ----------------------------------------------------------------------------------
def test_parse_defaults() -> None:
    spec = _spec()
    assert spec.size == 3 and spec.max_size == 100 and spec.image == "python:3.12-alpine"
    assert spec.prepare_command == () and spec.network == v.NETWORK_DENY_ALL


@pytest.mark.parametrize("raw, field", [
    ({"size": 5, "maxSize": 4}, "spec.size"),
    ({"size": -1}, "spec.size"),
    ({"size": True}, "spec.size"),
    ({"task": {"files": {}}}, "spec.task.files"),
    ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, "spec.env"),
    ({"env": [{"name": "EPISODE_ID", "value": "x"}]}, "spec.env"),
    ({"env": [{"name": "A=B", "value": "x"}]}, "spec.env"),          # no environment variable name
    ({"env": [{"name": "X", "value": 3}]}, "spec.env[X]"),             # a value is a string
    ({"env": [{"name": "X", "value": "a\0b"}]}, "spec.env[X]"),          # no process gets a NUL
    ({"prepare": {"command": ["sh", "-c", "true\0"]}}, "spec.prepare.command"),
    ({"runtimeClassName": "a..b"}, "spec.runtimeClassName"),
    ({"prepare": {"command": []}}, "spec.prepare.command"),
    # a key of spec.prepare is named by its whole path
    ({"prepare": {"command": ["true"], "timeoutSeconds": 0}}, "spec.prepare.timeoutSeconds"),
    ({"prepare": {"command": ["true"], "timeoutSeconds": "60"}}, "spec.prepare.timeoutSeconds"),
    ({"prepare": "sh /task/setup.sh"}, "spec.prepare"),
    ({"network": "Open"}, "spec.network"),
    # the sandbox's fields by a batch's rules (core.spec): refused before the pool's objects exist,
    # not by the API at its first pod
    ({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}, "spec.resources.requests.cpu"),
    ({"resources": {"limits": {"cpu": "-1"}}}, "spec.resources.limits.cpu"),
    ({"resources": {"limits": {"memroy": "1Gi"}}}, "spec.resources.limits.memroy"),
    ({"workspace": {"sizeLimit": "-1Gi"}}, "spec.workspace.sizeLimit"),
    ({"image": "python 3"}, "spec.image"),
    ({"podTemplate": {"tolerations": [{"key": "k", "operator": "Sometimes"}]}}, "spec.podTemplate.tolerations[0].operator"),
    ({"podTemplate": {"nodeSelector": {"zone": "a b"}}}, "spec.podTemplate.nodeSelector[zone]"),
    ({"podTemplate": {"affinity": {"nodeAfinity": {}}}}, "spec.podTemplate.affinity"),
    ({"podTemplate": {"priorityClassName": "system-cluster-critical"}}, "spec.podTemplate.priorityClassName"),
    ({"verifier": {"image": "a b"}}, "spec.verifier.image"),
    ({"verifier": {"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}},
     "spec.verifier.resources.requests.memory"),
    # the launcher's own directories, and the pod's other mounts
    ({"task": {"files": {"e.py": "x"}, "mountPath": "/rollout/claim"}}, "spec.task.mountPath"),
    ({"task": {"files": {"e.py": "x"}, "mountPath": "/rollout"}}, "spec.task.mountPath"),
    ({"workspace": {"mountPath": "/rollout/verifier-claim/x"}}, "spec.workspace.mountPath"),
    ({"workspace": {"mountPath": "/task/work"}}, "spec.task.mountPath"),
    ({"workspace": {"mountPath": "relative"}}, "spec.workspace.mountPath"),
])
def test_parse_refuses(raw: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        pool_spec.parse_pool_spec({**SPEC, **raw})
    assert err.value.field == field


@pytest.mark.parametrize("written", ["docker.io/library/python:3.11", "index.docker.io/library/python:3.11",
                                     "docker.io/python:3.11"])
def test_a_pooled_batch_naming_its_pools_image_in_another_spelling_runs(written: str) -> None:
    """Docker Hub's spellings of one image are one, as `submit --pool` reads them
    (core.pool_conversion): a batch that runs there must not stall PoolConflict here."""
    pool = _spec(image="python:3.11")
    batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"}, "image": written})
    assert pool_spec.sandbox_conflict(batch, pool) is None
    assert pool_spec.sandbox_conflict(batch, _spec(image="python:3.12")).startswith("spec.image")


# -- the pods -------------------------------------------------------------------------------------
def test_warm_pod_is_an_orphan_of_the_pools_namespace() -> None:
    pod = pool_children.warm_pod(POOL, _spec())
    meta = pod["metadata"]
    assert meta["namespace"] == naming.pool_namespace("team", "swe")
    assert "ownerReferences" not in meta
    assert meta["labels"][naming.LABEL_EPISODE_ROLE] == naming.ROLE_WARM
    assert meta["annotations"][pool_children.TEMPLATE_ANNOTATION] == pool_children.template_digest(POOL, _spec())
    body = pod["spec"]
    assert body["automountServiceAccountToken"] is False and "activeDeadlineSeconds" not in body
    container = body["containers"][0]
    assert container["name"] == naming.CONTAINER_NAME and "startupProbe" in container
    assert {"name": "claim", "mountPath": naming.CLAIM_MOUNT_PATH} in container["volumeMounts"]


def test_a_warm_pod_made_with_the_pools_digest_at_hand_is_the_same_pod() -> None:
    spec = _spec()
    assert pool_children.warm_pod(POOL, spec, pool_children.template_digest(POOL, spec)) == pool_children.warm_pod(POOL, spec)


def test_only_a_change_of_what_the_pod_is_made_of_makes_pods_stale() -> None:
    digest = pool_children.template_digest(POOL, _spec())
    assert pool_children.template_digest(POOL, _spec(size=7, maxSize=9)) == digest          # kubectl scale
    assert pool_children.template_digest(POOL, _spec(image="other:1")) != digest
    assert pool_children.template_digest(POOL, _spec(task={"files": {"a": "b"}})) != digest  # it prepared from them


def test_pool_namespace_is_per_pool() -> None:
    assert naming.pool_namespace("a", "p") != naming.pool_namespace("b", "p")
    assert naming.pool_namespace("a", "p") == naming.pool_namespace("a", "p")
    assert len(naming.pool_namespace("a" * 63, "p" * 253)) <= 63


def test_pooled_job_adopts_by_the_batchs_labels() -> None:
    job = pools.pooled_job(BATCH, 10, 4, 2, 3600, 600, POOL, _spec())
    spec = job["spec"]
    assert spec["manualSelector"] is True
    labels = spec["template"]["metadata"]["labels"]
    assert all(labels[k] == val for k, val in spec["selector"]["matchLabels"].items())
    assert labels[naming.LABEL_BATCH_UID] == BATCH.uid
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[1]["action"] == "Count" and rules[1]["onExitCodes"]["values"] == [NOT_DELIVERED_EXIT]
    assert rules[2]["action"] == "FailIndex"
    assert "ownerReferences" not in job["metadata"]
    assert "annotations" not in job["metadata"]
    began = pools.pooled_job(BATCH, 10, 4, 2, 3600, 600, POOL, _spec(), claims_began=1796256000.25)
    assert began["metadata"]["annotations"] == {naming.ANNOTATION_CLAIMS_BEGAN_AT: "1796256000.250"}


def test_claim_patch_marks_the_pod_changes_no_label_and_bounds_its_time() -> None:
    pod = {"metadata": {"name": "swe-x", "resourceVersion": "42"},
           "status": {"startTime": "2026-12-03T00:00:00Z"}}
    now = 1796256000.0 + 100   # 100 s after the pod's start
    patch = pools.claim_patch(pod, BATCH, 7, now, episode_seconds=60)
    meta = patch["metadata"]
    assert meta["resourceVersion"] == "42"
    assert "labels" not in meta   # a label change makes every node's policy agent recompute
    assert meta["annotations"][COMPLETION_INDEX_KEY] == "7"
    assert meta["annotations"][naming.ANNOTATION_CLAIMED_BY] == BATCH.uid
    assert float(meta["annotations"][naming.ANNOTATION_CLAIMED_AT]) == pytest.approx(now)
    assert patch["spec"]["activeDeadlineSeconds"] == 101 + 60 + pools.DELIVERY_SLACK_SECONDS


def test_enrol_patch_moves_the_claimed_pod_into_the_batch() -> None:
    labels = pools.enrol_patch(BATCH, 7)["metadata"]["labels"]
    assert labels[naming.LABEL_POOL_UID] is None and labels[naming.LABEL_POOL_NAME] is None
    assert labels[naming.LABEL_BATCH_UID] == BATCH.uid and labels[COMPLETION_INDEX_KEY] == "7"
    assert labels[naming.LABEL_EPISODE_ROLE] != naming.ROLE_WARM


def test_an_enrolment_carries_its_hand_overs_record_as_a_write_of_its_own_would() -> None:
    record = pools.HandOverRecord("ns", "pod-a", {naming.ANNOTATION_DELIVERED_AT: "12.5"}, 40)
    patch = pools.enrol_patch(BATCH, 3, record)
    alone = pools.record_patch(record.annotations, record.active_deadline_seconds)
    assert patch["metadata"]["annotations"] == alone["metadata"]["annotations"]
    assert patch["spec"] == alone["spec"] == {"activeDeadlineSeconds": 40}
    unchanged = pools.enrol_patch(BATCH, 3, dataclasses.replace(record, active_deadline_seconds=None))
    assert "spec" not in unchanged and "spec" not in pools.enrol_patch(BATCH, 3)
    assert "annotations" not in pools.enrol_patch(BATCH, 3)["metadata"]


def test_a_claimed_pod_is_no_longer_warm_and_its_batch_finds_it_in_one_list() -> None:
    claimed = _pod("a", created="2026-12-03T00:00:01Z")
    claimed["metadata"]["annotations"][naming.ANNOTATION_CLAIMED_BY] = BATCH.uid
    other = _pod("b", created="2026-12-03T00:00:02Z")
    other["metadata"]["annotations"][naming.ANNOTATION_CLAIMED_BY] = "another-batch"
    free = _pod("c", created="2026-12-03T00:00:03Z")
    enrolled = _pod("d", role="episode")
    enrolled["metadata"]["labels"][naming.LABEL_BATCH_UID] = BATCH.uid
    for pod in (claimed, other, free):
        pod["metadata"]["labels"][naming.LABEL_POOL_UID] = POOL.uid
    assert not pools.is_warm(claimed) and not pools.is_warm(other) and pools.is_warm(free)
    listed = pools.pool_pods([claimed, other, free, enrolled], POOL, BATCH.uid)
    assert [p["metadata"]["name"] for p in listed.warm] == ["c"]
    assert sorted(p["metadata"]["name"] for p in listed.mine) == ["a", "d"]
    assert pools.unenrolled_claims([claimed, other, free, enrolled], BATCH.uid) == [claimed]


def test_a_warm_pod_whose_node_stopped_reporting_is_not_warm() -> None:
    """is_warm read only the containers' started/running, which stay as last reported when the
    pod's node goes NotReady; the node lifecycle controller then turns the pod's Ready condition
    False. Such a pod counted in readyPods and was claimed, and its hand-over (an attach through
    that node's kubelet) failed: an eviction, an infrastructure retry of the index, or a pod left
    to its deadline. A pod is warm only while its Ready condition is True; until it is Ready
    again (or evicted: the not-ready toleration is 30 s) it counts as starting, not claimed."""
    lost = _pod("lost", created="2026-12-03T00:00:01Z")
    lost["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]
    ready = _pod("ready", created="2026-12-03T00:00:02Z")
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert not pools.is_warm(lost) and pools.is_warm(ready)
    assert [p["metadata"]["name"] for p in pools.claim_order([lost, ready])] == ["ready"]
    found = pool_census.census([lost, ready], "t1")
    assert found.warm == ("ready",) and found.starting == ("lost",) and not found.dead and not found.stuck


def _pod(name: str, *, phase: str = "Running", started: bool = True, template: str = "t1", role: str = "warm",
         waiting: str | None = None, exit_code: int | None = None, created: str = "2026-12-03T00:00:00Z") -> dict:
    state: dict = {"running": {}} if phase == "Running" else {}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": "m"}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code}}
    return {"metadata": {"name": name, "uid": f"u-{name}", "creationTimestamp": created,
                         "labels": {naming.LABEL_EPISODE_ROLE: role},
                         "annotations": {pool_children.TEMPLATE_ANNOTATION: template}},
            "status": {"phase": phase, "containerStatuses": [{"name": "episode", "started": started, "state": state}]}}


def test_census_sorts_the_pods() -> None:
    pods = [_pod("warm"), _pod("starting", started=False), _pod("old", template="t0"),
            _pod("dead", phase="Failed", exit_code=1), _pod("claimed", role="episode"),
            _pod("pull", phase="Pending", started=False, waiting="ImagePullBackOff"),
            _pod("prep", phase="Failed", exit_code=NOT_DELIVERED_EXIT)]
    found = pool_census.census(pods, "t1")
    assert found.warm == ("warm",) and found.starting == ("starting",) and found.stale == ("old",)
    assert set(found.dead) == {"dead", "pull", "prep"}
    assert {s[1] for s in found.stuck} == {v.PoolReason.IMAGE, v.PoolReason.PREPARE_FAILED}


@pytest.mark.parametrize("ended_by", [{"reason": "Terminated"}, {"reason": "Evicted"},
                                      {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                                       "reason": "TerminationByKubelet"}]}])
def test_a_warm_pod_the_node_ended_is_replaced_not_taken_for_a_failed_prepare(ended_by) -> None:
    """A node's graceful shutdown or an eviction TERMs a waiting launcher, which then exits
    NOT_DELIVERED_EXIT as a failed prepare does: the pool lost a pod, and refills at once rather
    than wait out the stuck back-off with a false PrepareFailed warning."""
    pod = _pod("gone", phase="Failed", exit_code=NOT_DELIVERED_EXIT)
    pod["status"].update(ended_by)
    found = pool_census.census([pod], "t1")
    assert found.dead == ("gone",) and found.stuck == ()


@pytest.mark.parametrize("reason", ["StartError", "ContainerCannotRun"])
def test_a_container_the_runtime_cannot_start_stalls_the_pool_not_churns_it(reason) -> None:
    """An image without /bin/sh (the launcher's shell), a mount the runtime cannot make: every pod
    of the template ends that way (exit 128, no 121), so the pool stalls with the runtime's words
    instead of deleting and making pods every round."""
    pod = _pod("nosh", phase="Failed", exit_code=128)
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(
        reason=reason, message='exec: "/bin/sh": stat /bin/sh: no such file or directory')
    found = pool_census.census([pod], "t1")
    assert found.dead == ("nosh",) and [s[1] for s in found.stuck] == [v.PoolReason.CANNOT_START]
    assert "/bin/sh" in found.stuck[0][2] and reason in found.stuck[0][2]
    assert pool_census.pods_to_create(_spec(size=3), found) == 0
    conditions = {c["type"]: c for c in pool_census.pool_status(POOL, _spec(size=3), found, 1, 0, "t")["conditions"]}
    assert conditions["Stalled"]["status"] == "True" and conditions["Stalled"]["reason"] == "ContainerCannotStart"
    # an ordinary failure of a pod (its own exit) is only a dead pod, replaced
    plain = _pod("dead", phase="Failed", exit_code=128)
    assert pool_census.census([plain], "t1").stuck == ()


def test_a_start_cut_short_by_the_node_is_a_lost_pod_not_a_broken_template() -> None:
    """Preempted or shut down while its container started (StartError, "context canceled"): the
    pool lost a pod, replaced at once; one such pod must not stall a pool of warm ones."""
    pod = _pod("cut", phase="Failed", exit_code=128)
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(reason="StartError", message="context canceled")
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]
    found = pool_census.census([pod, _pod("w1"), _pod("w2")], "t1")
    assert found.dead == ("cut",) and found.stuck == () and pool_census.pods_to_create(_spec(size=3), found) == 1


def test_a_pool_spec_is_kept_as_written() -> None:
    """Checked by a batch's rules, kept as written: what the pods are made of (their digest) must
    not change under a running pool when the operator is upgraded."""
    spec = _spec(task={"files": {"e.py": "x"}, "mountPath": "/opt/task/"}, workspace={"mountPath": "/work/"},
                 podTemplate={"priorityClassName": "", "tolerations": [{"key": "k", "operator": "Exists"}]})
    container = pool_children.pod_spec(POOL, spec)["containers"][0]
    assert _mounts(container) == {
        "task": "/opt/task/", "workspace": "/work/", "claim": naming.CLAIM_MOUNT_PATH}
    assert container["workingDir"] == "/work/"
    assert spec.pod_template == {"priorityClassName": "", "tolerations": [{"key": "k", "operator": "Exists"}]}
    assert "priorityClassName" not in pool_children.warm_pod(POOL, spec)["spec"]   # an empty class is none


@pytest.mark.parametrize("written", ["/absent/../task", "//task", "/task/.", "/task/"])
def test_a_pools_mount_paths_are_read_as_the_runtime_reads_them(written: str) -> None:
    """As a batch's (core.spec_fields.checked_path): a pooled batch's default command names the task where
    the runtime mounts it, not 'python -B /absent/../task/episode.py', which the kernel resolves
    only if /absent exists. The pods still mount the spelling written (their digest)."""
    spec = _spec(task={"files": {"e.py": "x"}, "mountPath": written}, workspace={"mountPath": f"/w{written}"})
    assert (spec.task_mount_path, spec.workspace_mount_path) == ("/task", "/w/task")
    assert spec.task_mount_path == parse_spec({"episodes": 1, "task": {"files": {"episode.py": "x"}, "mountPath": written}}
                                              ).task_mount_path
    assert pool_spec.task_mount_path_in(pool_children.pod_spec(POOL, spec)) == "/task"
    assert _mounts(pool_children.pod_spec(POOL, spec)["containers"][0])["task"] == written


@pytest.mark.parametrize("pools_own", ["/w/./ws", "/w/ws/", "//w/ws", "/x/../w/ws"])
def test_a_pooled_batch_naming_its_pools_workspace_in_another_spelling_runs(pools_own: str) -> None:
    pool = _spec(workspace={"mountPath": pools_own})
    for written in ("/w/ws", pools_own):
        batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"}, "workspace": {"mountPath": written}})
        assert pool_spec.sandbox_conflict(batch, pool) is None, written
    other = parse_spec({"episodes": 1, "poolRef": {"name": "swe"}, "workspace": {"mountPath": "/w/other"}})
    assert "spec.workspace.mountPath" in pool_spec.sandbox_conflict(other, pool)


def test_a_prepare_evicted_for_filling_its_own_workspace_is_a_failed_prepare() -> None:
    """Its eviction is its own doing (core.verdict.over_own_limits): replaced at once, it would churn
    pods for ever; the pool waits it out as stuck, and says why."""
    pod = _pod("full", phase="Failed", exit_code=NOT_DELIVERED_EXIT)
    pod["status"].update(reason="Evicted", message="Usage of EmptyDir volume \"workspace\" exceeds the limit \"1Gi\".",
                         conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}])
    assert [s[1] for s in pool_census.census([pod], "t1").stuck] == [v.PoolReason.PREPARE_FAILED]


@given(warm=st.integers(0, 8), starting=st.integers(0, 8), size=st.integers(0, 8))
def test_create_and_delete_reach_size(warm: int, starting: int, size: int) -> None:
    spec = _spec(size=size, maxSize=8)
    found = pool_census.PoolCensus(tuple(f"w{i}" for i in range(warm)), tuple(f"s{i}" for i in range(starting)), (), (), ())
    create, delete = pool_census.pods_to_create(spec, found), pool_census.pods_to_delete(spec, found)
    assert warm + starting + create - len(delete) == size
    assert create == 0 or not delete


def test_a_stuck_template_is_not_churned() -> None:
    found = pool_census.PoolCensus((), (), ("p",), (("p", v.PoolReason.IMAGE, "no"),), ())
    assert pool_census.pods_to_create(_spec(), found) == 0


def test_status_keeps_transition_times() -> None:
    found = pool_census.PoolCensus(("a", "b", "c"), (), (), (), ())
    first = pool_census.pool_status(POOL, _spec(), found, 1, 5, "2026-12-03T00:00:00Z")
    ready = {c["type"]: c for c in first["conditions"]}
    assert ready["Ready"]["status"] == "True" and first["readyPods"] == 3 and first["claimedPods"] == 5
    again = pool_census.pool_status(POOL, _spec(), found, 1, 5, "2026-12-03T00:05:00Z", first)
    assert again["conditions"][0]["lastTransitionTime"] == "2026-12-03T00:00:00Z"
    stuck = pool_census.PoolCensus((), (), ("p",), (("p", v.PoolReason.IMAGE, "cannot pull"),), ())
    bad = {c["type"]: c for c in pool_census.pool_status(POOL, _spec(), stuck, 1, 5, "t", first)["conditions"]}
    assert bad["Stalled"]["status"] == "True" and bad["Stalled"]["reason"] == "ImagePullFailed"
    assert bad["Reconciling"]["status"] == "False"


@pytest.mark.parametrize("warm, starting, stuck, ready, reconciling, stalled", [
    (3, 0, False, "True", "False", "False"),      # full: done
    (1, 2, False, "False", "True", "False"),      # filling: in progress, so kstatus and Flux wait
    (0, 0, True, "False", "False", "True"),       # its pods cannot run: failed, not in progress
])
def test_a_filling_pool_is_reconciling_for_kstatus(warm, starting, stuck, ready, reconciling, stalled) -> None:
    """kstatus (Flux's `wait: true`) calls Current a resource with neither Reconciling nor Stalled
    true: a pool at 0 of 10 warm must say Reconciling=True while it fills."""
    found = pool_census.PoolCensus(tuple(f"w{i}" for i in range(warm)), tuple(f"s{i}" for i in range(starting)),
                                   ("p",) if stuck else (), (("p", v.PoolReason.IMAGE, "no"),) if stuck else (), ())
    status = pool_census.pool_status(POOL, _spec(size=3), found, 2, 0, "t")
    seen = {c["type"]: c["status"] for c in status["conditions"]}
    assert seen == {"Ready": ready, "Reconciling": reconciling, "Stalled": stalled}
    assert all(c["observedGeneration"] == 2 for c in status["conditions"])
    refused = pool_census.stalled_status(POOL, v.PoolReason.INVALID_SPEC, "bad", 2, "t", status)
    assert {c["type"]: c["status"] for c in refused["conditions"]} == {"Ready": "False", "Reconciling": "False",
                                                                        "Stalled": "True"}


# -- the scripts, run by /bin/sh --------------------------------------------------------------------
# What an episode sees: its variables and its argv, NUL-separated (Python: any variable name).
_PRINT = ("import os, sys; e = os.environ; sys.stdout.write('\\0'.join([e['EPISODE_INDEX'], e['EPISODE_GROUP'], "
          "e['EPISODE_SAMPLE'], e['BATCH_NAME'], e.get('EPISODE_INPUT', ''), e.get('FOO', ''), *sys.argv[1:]]) + '\\0')")


def _episode(command, **fields) -> pool_delivery.Episode:
    return pool_delivery.Episode(command=("python3", "-c", _PRINT, *command), **fields)


def _source(script: bytes, tmp_path) -> dict:
    """Source the episode script as the launcher does and run its command (a printer, _episode)."""
    path = tmp_path / "episode.sh"
    path.write_bytes(script)
    out = subprocess.run(["/bin/sh", "-c", '. "$0"; exec "$@"', str(path)],
                         capture_output=True, check=True, env={"PATH": os.environ["PATH"]}, cwd=tmp_path).stdout
    fields = [p.decode() for p in out.split(b"\0")[:-1]]
    return {"index": fields[0], "group": fields[1], "sample": fields[2], "batch": fields[3], "input": fields[4],
            "foo": fields[5], "argv": fields[6:]}


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40)


@settings(max_examples=60, deadline=None)
@given(command=st.lists(_TEXT, min_size=1, max_size=4), foo=_TEXT, name=_TEXT)
def test_episode_script_quotes_every_value(tmp_path_factory, command: list[str], foo: str, name: str) -> None:
    tmp = tmp_path_factory.mktemp("script")
    episode = _episode(command, batch_name=name, index=5, samples_per_input=2, env=(("FOO", foo),))
    seen = _source(pool_delivery.episode_script(episode), tmp)
    assert (seen["index"], seen["group"], seen["sample"]) == ("5", "2", "1")
    # the values arrive as written, but for the kubelet's own expansion of $(NAME) and $$
    known = dict(pool_delivery.episode_variables(name, 5, 2, (("FOO", foo),)))
    assert seen["batch"] == name and seen["foo"] == known["FOO"]
    assert seen["argv"] == [expand(word, known) for word in command]


def test_episode_script_writes_the_input(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(naming, "CLAIM_MOUNT_PATH", str(tmp_path))
    text = pool_delivery.input_json([{"q": "it's $(x) `y`"}, {"q": 2}], 1, 1)
    script = pool_delivery.episode_script(_episode((), batch_name="b", index=1, samples_per_input=1, input_json=text))
    seen = _source(script, tmp_path)
    assert seen["input"] == f"{tmp_path}/input.json"
    assert json.loads((tmp_path / "input.json").read_text()) == {"q": 2}


def _launcher(tmp_path, prepare: list[str] | None = None) -> subprocess.Popen:
    return start_launcher(tmp_path, prepare)


def test_launcher_waits_then_runs_the_delivered_episode(tmp_path) -> None:
    proc = _launcher(tmp_path)
    wait_for_file(tmp_path / "warm")
    assert proc.poll() is None   # warm: waiting, holding no episode
    # the episode reads its stdin: it must get nothing of what a later attach writes there
    command = ("/bin/sh", "-c", 'sleep 0.3; if read -r x; then printf "%s" "$x" > got; fi; exit 7')
    script = pool_delivery.episode_script(episode("b", 0, 1, command))
    assert hand_over(tmp_path, script, keep_open=True)   # a pod without stdinOnce: its stdin stays open
    hand_over(tmp_path, b"exit 99\n", keep_open=True)     # a second delivery (a repeat after a restart)
    assert proc.wait(timeout=10) == 7
    assert (tmp_path / "episode.sh").read_bytes().startswith(script) and not (tmp_path / "got").exists()


def test_an_agents_own_not_delivered_code_reads_as_one(tmp_path) -> None:
    proc = _launcher(tmp_path)
    wait_for_file(tmp_path / "warm")
    hand_over(tmp_path, pool_delivery.episode_script(
        episode("b", 0, 1, ("/bin/sh", "-c", f"exit {NOT_DELIVERED_EXIT}"))))
    assert proc.wait(timeout=10) == 1


def _timed(command: str, seconds: int) -> bytes:
    """An episode without a verifier, handed its time as the operator hands it (episode_delivery)."""
    return pool_delivery.episode_script(episode("b", 0, 1, ("/bin/sh", "-c", command),
                                                              timeout_seconds=seconds))


def test_a_pooled_agent_without_a_verifier_is_stopped_at_its_time_from_its_hand_over(tmp_path) -> None:
    """README: an episode past episodeTimeoutSeconds fails with Timeout, a pooled one as a Job's.
    The pod's deadline alone left it its time plus HANDED_OVER_SLACK_SECONDS (and the claim's
    DELIVERY_SLACK_SECONDS when the lowered deadline was never written): a reward printed in that
    slack was a success. The launcher's watchdog stops it at its time, counted from the hand-over
    however long the pod waited warm, and says so (AGENT_OVERRAN_EXIT: the verdict's Timeout)."""
    proc = _launcher(tmp_path)
    wait_for_file(tmp_path / "warm")
    time.sleep(1.5)   # warm longer than the episode's time: none of it is the episode's
    handed = time.monotonic()
    hand_over(tmp_path, _timed("sleep 10; echo late > reward; exit 0", 1))
    assert proc.wait(timeout=20) == AGENT_OVERRAN_EXIT
    # stopped at its 1 s, far from its own end at 10 s (room for a loaded machine between)
    assert 1 <= time.monotonic() - handed < 6 and not (tmp_path / "reward").exists()


def test_a_pooled_agent_that_kills_its_watchdog_still_ran_past_its_time(tmp_path) -> None:
    """The watchdog runs as the agent's user: killed, the launcher's own clock still says the
    agent ran past its time (as core.launchers' agent launcher's does)."""
    proc = _launcher(tmp_path)
    wait_for_file(tmp_path / "warm")
    hand_over(tmp_path, _timed('for p in $(pgrep -P "$PPID"); do [ "$p" = "$$$$" ] || kill "$p"; done; '
                               "sleep 2.5; exit 0", 1))
    assert proc.wait(timeout=10) == AGENT_OVERRAN_EXIT


def test_a_pooled_agent_within_its_time_keeps_its_code_and_its_own_overran_code_reads_as_one(tmp_path) -> None:
    for claim, (command, code) in enumerate((("sleep 0.2; exit 5", 5), ("exit 0", 0),
                                             (f"exit {AGENT_OVERRAN_EXIT}", 1))):
        where = tmp_path / str(claim)
        where.mkdir()
        proc = _launcher(where)
        wait_for_file(where / "warm")
        hand_over(where, _timed(command, 5))
        assert proc.wait(timeout=10) == code, command


def test_a_pooled_episode_its_launcher_stopped_at_its_time_is_a_timeout() -> None:
    """Judged as a Job's pod ended by its deadline: Timeout, whatever it printed; an agent's own
    exit of that code cannot be told from it (its launcher reports it as 1)."""
    from rolloutbatch.core.verdict import judge_episode
    from rolloutbatch.core.pod_reading import pod_facts
    pod = {"metadata": {"name": "p", "creationTimestamp": "2026-12-03T00:00:00Z",
                        "annotations": {naming.POOLED_ANNOTATION: "true", naming.ANNOTATION_DELIVERED_AT: "1796256001.0"},
                        "labels": {COMPLETION_INDEX_KEY: "0"}},
           "status": {"phase": "Failed", "containerStatuses": [
               {"name": naming.CONTAINER_NAME, "restartCount": 0, "state": {"terminated": {
                   "exitCode": AGENT_OVERRAN_EXIT, "reason": "Error", "finishedAt": "2026-12-03T00:01:05Z"}}}]}}
    result = judge_episode(pod_facts(pod), None, log_error="no log")
    assert result.reason == v.EP_TIMEOUT and "episodeTimeoutSeconds" in result.message
    job_pod = {**pod, "metadata": {**pod["metadata"], "annotations": {}}}
    assert judge_episode(pod_facts(job_pod), None, log_error="no log").reason != v.EP_TIMEOUT


def test_a_failed_prepare_is_not_an_episode(tmp_path) -> None:
    proc = _launcher(tmp_path, ["/bin/sh", "-c", "exit 3"])
    assert proc.wait(timeout=10) == NOT_DELIVERED_EXIT
    assert not (tmp_path / "warm").exists()


def test_the_prepare_runs_before_warm(tmp_path) -> None:
    out = tmp_path.parent / f"{tmp_path.name}.prepared"        # the claim directory is emptied after it
    proc = _launcher(tmp_path, ["/bin/sh", "-c", f"echo ready > {out}"])
    wait_for_file(tmp_path / "warm")
    assert out.read_text() == "ready\n"
    proc.kill()


def test_only_a_pool_pods_claim_moves_its_episodes_clock() -> None:
    from rolloutbatch.core.pod_reading import pod_facts
    meta = {"name": "p", "creationTimestamp": "2026-12-03T00:00:00Z",
            "annotations": {naming.ANNOTATION_CLAIMED_AT: "1796256100.5"}}
    assert pod_facts({"metadata": meta}).created == 1796256000.0          # not a pool's pod
    pooled = dict(meta, annotations={**meta["annotations"], naming.POOLED_ANNOTATION: "true"})
    assert pod_facts({"metadata": pooled}).created == 1796256100.5
    bad = dict(pooled, annotations={**pooled["annotations"], naming.ANNOTATION_CLAIMED_AT: "inf"})
    assert pod_facts({"metadata": bad}).created == 1796256000.0           # non-finite: the creation


# -- the deadline once the episode is handed over ------------------------------------------------------
def test_a_handed_over_pods_deadline_is_lowered_to_its_episodes_time_from_then() -> None:
    start, ads = 1000.0, 250
    # handed over 40 s after its start: it ends 100 s + the slack after that
    assert pools.tightened_deadline(ads, start + ads, start + 40, 100) == 40 + 100 + pools.HANDED_OVER_SLACK_SECONDS
    assert pools.tightened_deadline(ads, start + ads, start + 140, 100) is None    # no later than that already
    assert pools.tightened_deadline(None, None, start, 100) is None                 # no deadline known
    # with a verifier the agent's launcher keeps its time; the slack is the verifier's hand-over's
    assert pools.tightened_deadline(ads, start + ads, start + 40, 100, verified=True) == \
        40 + 100 + pools.VERIFIED_HANDED_OVER_SLACK_SECONDS


@given(ads=st.integers(1, 100_000), started=st.floats(0, 1e6), waited=st.floats(0, 1e5), seconds=st.integers(1, 90_000))
def test_a_lowered_deadline_is_lower_and_never_short_of_the_episodes_time(ads, started, waited, seconds) -> None:
    now = started + waited
    lowered = pools.tightened_deadline(ads, started + ads, now, seconds)
    if lowered is not None:
        assert 1 <= lowered < ads
        assert started + lowered >= now + seconds + pools.HANDED_OVER_SLACK_SECONDS - 1


# -- a cold pod the Job controller made for a claimed index ---------------------------------------------
def _facts(uid: str, index: int | None, *, claimed: bool = False, delivered: bool = False,
           deleting: bool = False):
    from rolloutbatch.core.model import PodFacts
    return PodFacts(name=f"p-{uid}", namespace="rp-x", uid=uid, index=index, created=100.0, phase="Running",
                    node="devnode-1", image_id="img", exit_code=None, restart_count=0, terminated_reason=None,
                    pod_reason=None, pod_message=None, disrupted=False, deleting=deleting, ready=True,
                    started_at=None, finished_at=None, waiting_reason=None, waiting_message=None, pooled=True,
                    container_started=True, claimed_at=101.0 if claimed else None,
                    delivered_at=102.0 if delivered else None)


def test_a_cold_pod_of_a_claimed_index_is_handed_nothing() -> None:
    warm, cold = _facts("w", 3, claimed=True), _facts("c", 3)
    assert pools.shadowed_by_claim(cold, [warm, cold])
    assert not pools.shadowed_by_claim(warm, [warm, cold])                  # the claim holds the index
    assert not pools.shadowed_by_claim(_facts("c", 4), [warm, _facts("c", 4)])   # another index
    # a cold pod already handed its episode holds its index against a second cold one
    assert pools.shadowed_by_claim(_facts("c2", 5), [_facts("c1", 5, delivered=True), _facts("c2", 5)])
    # the index's claimed pod is being deleted (evicted, its delivery failed): the retry is handed over
    assert not pools.shadowed_by_claim(cold, [_facts("w", 3, claimed=True, deleting=True), cold])
    assert not pools.shadowed_by_claim(_facts("c", None), [warm])


@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans(), st.booleans()), max_size=8))
def test_of_the_live_pods_of_an_index_at_most_one_holder_is_handed_an_episode(rows) -> None:
    live = [_facts(f"u{i}", index, claimed=claimed, delivered=delivered, deleting=deleting)
            for i, (index, claimed, delivered, deleting) in enumerate(rows)]
    for index in range(4):
        # what a round hands over: the undelivered, unshadowed pods of the index that are not being deleted
        handed = [f for f in live if f.index == index and not f.deleting and f.delivered_at is None
                  and not pools.shadowed_by_claim(f, live)]
        holders = [f for f in live if f.index == index and not f.deleting
                   and (f.claimed_at is not None or f.delivered_at is not None)]
        if holders:
            assert all(f.claimed_at is not None for f in handed)   # only a claim's pod, never a cold one
        assert all(f.index == index for f in handed)


# -- the refill after a claim -------------------------------------------------------------------------
def _claimed(claimed_at, delivered_at=None, phase: str = "Running", deleting: bool = False) -> dict:
    notes = {naming.ANNOTATION_CLAIMED_AT: str(claimed_at)}
    if delivered_at is not None:
        notes[naming.ANNOTATION_DELIVERED_AT] = str(delivered_at)
    meta = {"annotations": notes, **({"deletionTimestamp": "2026-12-04T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "status": {"phase": phase}}


@pytest.mark.parametrize("claimed_at, hold", [(1000.0, 0.0), ("abc", 0.0), ("inf", 0.0), (1999.0, 2.0),
                                              (2000.0, 3.0), (2001.5, 4.5), (9e9, 0.0)])
def test_the_refill_hold_runs_from_the_newest_claim_or_hand_over(claimed_at, hold) -> None:
    """Handed over at once (as a claim's pod is): the hold runs REFILL_HOLD_SECONDS (3 s in these
    figures) from the claim; a claim long ago or unreadable holds nothing, nor one further ahead
    than clocks disagree (it would hold every round and the pool would never refill)."""
    assert pool_census.REFILL_HOLD_SECONDS == 3.0
    pods = [_claimed(claimed_at, delivered_at=1000.0, phase="Succeeded"), {"metadata": {}}]
    assert pool_census.refill_hold(pods, 2000.0) == pytest.approx(hold)
    later = [_claimed(1000.0, delivered_at=claimed_at, phase="Succeeded")]   # a hand-over counts as a claim
    assert pool_census.refill_hold(later, 2000.0) == pytest.approx(hold)


def test_a_claimed_pod_still_waiting_for_its_hand_over_holds_the_refill() -> None:
    recent = 2000.0 - pool_census.REFILL_HOLD_MAX_SECONDS / 2
    assert pool_census.refill_hold([_claimed(recent)], 2000.0) == pytest.approx(1.0)   # looked at again in 1 s
    assert pool_census.refill_hold([_claimed(recent, phase="Failed")], 2000.0) == 0.0
    assert pool_census.refill_hold([_claimed(recent, deleting=True)], 2000.0) == 0.0
    # one claimed longer ago than a hold can last is not being handed over (left to its deadline,
    # its hand-over unconfirmed): it holds no refill, now or later
    assert pool_census.refill_hold([_claimed(1000.0)], 2000.0) == 0.0


def test_claims_and_hand_overs_that_keep_coming_hold_the_refill_only_so_long() -> None:
    """A batch every second, or a batch of hundreds handed over for a minute: the pool, short since
    ``short_since``, refills REFILL_HOLD_MAX_SECONDS after it."""
    most = pool_census.REFILL_HOLD_MAX_SECONDS
    pods = [_claimed(1000.0 + most, delivered_at=1000.0 + most), _claimed(1000.0)]
    assert pool_census.refill_hold(pods, 1000.0 + most - 1, short_since=1000.0) == pytest.approx(1.0)
    assert pool_census.refill_hold(pods, 1000.0 + most, short_since=1000.0) == 0.0
    assert pool_census.refill_hold(pods, 1000.0 + most, short_since=1000.0 + most) == pytest.approx(3.0)


# DNS subdomain: dot-separated labels of lowercase alphanumerics and '-', each starting and ending alphanumeric
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@given(st.from_regex(_DNS_SUBDOMAIN, fullmatch=True).filter(lambda n: len(n) <= 253))
def test_every_pool_name_gives_its_pods_valid_names(name: str) -> None:
    prefix = pool_children.warm_pod_prefix(name)
    assert _DNS_SUBDOMAIN.fullmatch(prefix + "abcde") and len(prefix) + 5 <= 63


def test_a_pool_name_cut_at_a_dot_gives_valid_pod_names() -> None:
    assert pool_children.warm_pod_prefix("a" * 39 + ".b") == "a" * 39 + "-"



@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans(), st.booleans()), max_size=10))
def test_the_holders_built_once_answer_as_each_pods_own_scan(rows) -> None:
    """The delivery builds an index's holders once per round (pools.held_indexes): the same answer
    as scanning every live pod for each one, which made a round quadratic in its pods."""
    live = [_facts(f"u{i % 4}", index, claimed=claimed, delivered=delivered, deleting=deleting)   # uids repeat
            for i, (index, claimed, delivered, deleting) in enumerate(rows)]
    held = pools.held_indexes(live)
    for pod in [*live, _facts("new", 2)]:
        scanned = pod.claimed_at is None and pod.index is not None and any(
            other.uid != pod.uid and other.index == pod.index and not other.deleting
            and (other.claimed_at is not None or other.delivered_at is not None) for other in live)
        assert pools.shadowed(pod, held) == scanned


def test_a_pooled_batch_without_a_command_needs_the_script_among_its_pools_files() -> None:
    """As a cold batch's default command: the pool's task files are mounted over the directory."""
    batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"}})
    problem = pool_spec.sandbox_conflict(batch, _spec(task={"files": {"main.py": "x"}}))
    assert problem is not None and "spec.command" in problem and "episode.py" in problem
    assert pool_spec.sandbox_conflict(batch, _spec(task={"files": {"episode.py": "x"}})) is None
    given = parse_spec({"episodes": 1, "poolRef": {"name": "swe"}, "command": ["python", "/task/main.py"]})
    assert pool_spec.sandbox_conflict(given, _spec(task={"files": {"main.py": "x"}})) is None
