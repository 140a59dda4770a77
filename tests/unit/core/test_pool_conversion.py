"""core.pool_conversion: a batch written to run cold, submitted on a pool (`submit --pool`): what it
names must be the pool's, else its episodes would silently run another sandbox."""

from __future__ import annotations

import pytest

from rolloutbatch.core import pool_conversion, pool_spec
from rolloutbatch.core.pool_conversion import manifest_conflict
from rolloutbatch.core.spec import parse_spec

FILES = {"episode.py": "print(1)"}
POOL = {"size": 3, "task": {"files": FILES}, "image": "python:3.11", "network": "AllowEgress",
        "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "8Gi"}},
        "workspace": {"sizeLimit": "1Gi"}, "verifier": {"image": "grader:1"}}
BATCH = {"episodes": 2, "task": {"files": FILES}}


@pytest.mark.parametrize("written, field", [
    ({"task": {"files": {**FILES, "extra.py": "x"}}}, "spec.task.files are not the pool's (extra.py differ)"),
    ({"task": {"files": {"episode.py": "print(2)"}}}, "spec.task.files are not the pool's (episode.py differ)"),
    ({"image": "python:3.12-alpine"}, "spec.image"),                 # the CRD's default, written: counts
    ({"resources": {"limits": {"memory": "128Mi"}}}, "spec.resources"),
    ({"task": {"files": FILES, "mountPath": "/opt/task"}}, "spec.task.mountPath"),
    ({"workspace": {"sizeLimit": "2Gi"}}, "spec.workspace.sizeLimit"),
    ({"isolation": {"network": "DenyAll"}}, "spec.isolation.network"),
    ({"isolation": {"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}}, "spec.isolation.egress"),
    ({"runtimeClassName": "cube"}, "spec.runtimeClassName"),
    ({"podTemplate": {"nodeSelector": {"gpu": "a100"}}}, "spec.podTemplate"),
    ({"verifier": {"image": "grader:2", "command": ["true"]}}, "spec.verifier.image"),
    ({"verifier": {"command": ["true"], "resources": {"limits": {"memory": "4Gi"}}}}, "spec.verifier.resources"),
    # invalid as written: the fields sdk.with_pool drops, so nothing else would refuse them
    ({"resources": "lots"}, "spec.resources"),
    ({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}, "spec.resources"),
    ({"verifier": {"command": ["true"], "resources": ["4Gi"]}}, "spec.verifier.resources"),
    ({"workspace": {"sizeLimit": "-1Gi"}}, "spec.workspace.sizeLimit"),
])
def test_what_a_manifest_names_that_the_pool_is_not_is_said(written, field) -> None:
    said = manifest_conflict({**BATCH, **written}, POOL)
    assert said is not None and said.startswith(field), said


@pytest.mark.parametrize("written", [
    {},
    {"image": "docker.io/library/python:3.11"},                              # one image, two spellings
    {"resources": {"requests": {"cpu": "0.1", "memory": "1024Mi"}, "limits": {"cpu": 1, "memory": "8Gi"}}},
    {"workspace": {"sizeLimit": "1024Mi", "mountPath": "/workspace/"}},
    {"task": {"files": FILES, "mountPath": "/task"}},
    {"isolation": {"namespace": "Shared", "network": "AllowEgress"}},      # where a cold batch ran: moot
    {"podTemplate": {"priorityClassName": ""}},
    {"verifier": {"image": "grader:1", "command": ["true"]}},
    {"poolRef": {"name": "other"}},
])
def test_a_manifest_naming_the_pools_own_sandbox_runs(written) -> None:
    assert manifest_conflict({**BATCH, **written}, POOL) is None


SMALL = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
LARGE = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
GRADING_POOL = {"size": 1, "task": {"files": FILES}, "image": "agent:1", "resources": LARGE,
                "verifier": {"image": "grader:2", "resources": SMALL}}


@pytest.mark.parametrize("written, field", [
    ({"image": "agent:1"}, "spec.image (the verifier's"),
    ({"image": "agent:1", "verifier": {}}, "spec.image (the verifier's"),     # a verifier of defaults
    ({"resources": LARGE}, "spec.resources (the verifier's"),
    ({"image": "agent:1", "verifier": {"command": ["true"], "image": "docker.io/grader:2"}, "resources": LARGE},
     "spec.resources (the verifier's"),
])
def test_a_verifier_without_an_image_or_resources_of_its_own_is_compared_as_it_runs_cold(written, field) -> None:
    """Cold, a verifier without its own image or resources runs the batch's (parse_spec): on a pool
    whose verifier has others, the grading would move to another image or other limits."""
    said = manifest_conflict({**BATCH, "verifier": {"command": ["true"]}, **written}, GRADING_POOL)
    assert said is not None and said.startswith(field), said


@pytest.mark.parametrize("pool, written", [
    (GRADING_POOL, {"image": "agent:1", "resources": LARGE,
                    "verifier": {"command": ["true"], "image": "grader:2", "resources": SMALL}}),
    (GRADING_POOL, {"verifier": {"command": ["true"]}}),          # neither phase's image or resources written
    ({**GRADING_POOL, "verifier": {}}, {"image": "agent:1", "resources": LARGE, "verifier": {"command": ["true"]}}),
])
def test_a_verifier_running_the_pools_verifier_image_and_resources_runs(pool, written) -> None:
    assert manifest_conflict({**BATCH, **written}, pool) is None


def test_an_invalid_batch_naming_nothing_of_the_pool_or_an_unreadable_pool_is_left_to_the_api() -> None:
    assert manifest_conflict({"episodes": "many"}, POOL) is None
    assert manifest_conflict(BATCH, {"size": -1}) is None


_R = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


@pytest.mark.parametrize("batch", [
    {"episodes": 1, "image": "agent:1", "resources": _R, "verifier": {"resources": None}},
    {"episodes": 1, "image": "agent:1", "resources": None, "verifier": {}},
], ids=["verifier.resources null", "resources null"])
def test_a_null_is_absent_to_the_conversion_as_to_the_spec(batch):
    """A YAML `resources:` with nothing under it: core.spec reads it as absent, and so does this."""
    pool = {"size": 1, "image": "agent:1", "resources": _R, "task": {"files": {"episode.py": "x"}}, "verifier": {}}
    batch = {**batch, "task": {"files": {"episode.py": "x"}}}
    assert parse_spec(batch).verifier is not None
    assert pool_conversion.manifest_conflict(batch, pool) is None


@pytest.mark.parametrize("written", ["library/python:3.11", "index.docker.io/python:3.11",
                                     "docker.io/library/python:3.11", "index.docker.io/library/python:3.11"])
def test_every_docker_hub_spelling_of_the_pools_image_is_its_image(written):
    pool = {"size": 1, "image": "python:3.11", "task": {"files": {"episode.py": "x"}}}
    assert pool_conversion.manifest_conflict({"episodes": 1, "image": written,
                                              "task": {"files": {"episode.py": "x"}}}, pool) is None
    assert pool_spec.same_image(written) == pool_spec.same_image("python:3.11")
    assert pool_spec.same_image("python") == pool_spec.same_image("python:latest") == "python:latest"
    assert pool_spec.same_image("localhost:5000/img") == "localhost:5000/img:latest"   # a port is no tag
    assert pool_spec.same_image("ghcr.io/library/x:1") != pool_spec.same_image("x:1")
