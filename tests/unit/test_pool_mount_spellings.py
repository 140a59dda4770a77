"""A pool's mount paths that name the launcher's own directories (or one another) in
another spelling. docs/design.md §5.17 promises such a spec is InvalidSpec before the pool's
namespace exists ("its mounts may not overlap one another or the launcher's /rollout/claim
directories"). Kubernetes compares mountPaths as strings (ValidateVolumeMounts' uniqueness) and
the container runtime cleans them (containerd orders mounts by filepath.Clean; runc resolves
them with securejoin): "/rollout//claim" and "/x/../rollout/claim" ARE /rollout/claim in the
container, so the later mount shadows the earlier one.
"""

from __future__ import annotations

import pytest

from rolloutbatch.core import naming, pool_spec
from rolloutbatch.core.model import SpecError

BASE = {"size": 1, "task": {"files": {"episode.py": "print(1)"}}}

# every spelling below is the launcher's claim directory (or the verifier's) once cleaned
SAME_AS_CLAIM = ["/rollout//claim", "/rollout/./claim", "/x/../rollout/claim", "//rollout/claim"]
SAME_AS_VERIFIER_CLAIM = ["/rollout//verifier-claim", "/v/../rollout/verifier-claim"]


@pytest.mark.parametrize("path", SAME_AS_CLAIM)
def test_a_workspace_spelled_as_the_claim_directory_is_invalid(path: str) -> None:
    """workspace.mountPath at the claim directory: the workspace emptyDir and the claim emptyDir
    are mounted at one path; the launcher's FIFO, `warm` file and episode.sh land in (or hide)
    the agent's workspace."""
    with pytest.raises(SpecError):
        pool_spec.parse_pool_spec({**BASE, "workspace": {"mountPath": path}})


@pytest.mark.parametrize("path", SAME_AS_CLAIM)
def test_task_files_spelled_at_the_claim_directory_are_invalid(path: str) -> None:
    """task.mountPath at the claim directory: the claim emptyDir (mounted last) hides the task
    files, so every episode of every batch on the pool fails as its own."""
    with pytest.raises(SpecError):
        pool_spec.parse_pool_spec({**BASE, "task": {**BASE["task"], "mountPath": path}})


@pytest.mark.parametrize("path", SAME_AS_VERIFIER_CLAIM)
def test_verifier_files_spelled_at_the_verifier_claim_directory_are_invalid(path: str) -> None:
    """verifier.mountPath at the verifier's claim directory: the verifier's files (written by the
    sourced episode script into files_dir) land next to, or over, episode.sh itself: a batch's
    verifier file named `episode.sh` overwrites the script while the launcher sources it."""
    with pytest.raises(SpecError):
        pool_spec.parse_pool_spec({**BASE, "verifier": {"mountPath": path}})


def test_task_and_workspace_at_one_directory_in_two_spellings_are_invalid() -> None:
    """The pool's own two mounts at one directory (the CRD rule and _own_paths compare strings)."""
    with pytest.raises(SpecError):
        pool_spec.parse_pool_spec({**BASE, "task": {**BASE["task"], "mountPath": "/task"},
                                   "workspace": {"mountPath": "//task"}})


def test_sanity_the_plain_spelling_is_refused() -> None:
    """The plain spelling is refused today (so the failures above are the spelling alone)."""
    with pytest.raises(SpecError):
        pool_spec.parse_pool_spec({**BASE, "workspace": {"mountPath": naming.CLAIM_MOUNT_PATH}})


@pytest.mark.parametrize("field", ["workspace", "task", "verifier"])
@pytest.mark.parametrize("path, cleaned", [("/a//b", "/a/b"), ("/a/./b/", "/a/b"), ("/x/../a", "/a"), ("//a", "/a")])
def test_a_batchs_mount_path_is_read_as_the_runtime_reads_it(field: str, path: str, cleaned: str) -> None:
    """The batch's own mounts are compared with one another, and with the launcher's, cleaned."""
    from rolloutbatch.core.spec import parse_spec
    from tests.unit.core.factories import MINIMAL
    raw = {**MINIMAL, field: {**(MINIMAL.get(field) or {}), "mountPath": path}}
    if field == "verifier":
        raw["verifier"] = {"command": ["true"], "mountPath": path}
    spec = parse_spec(raw)
    got = {"workspace": spec.workspace_mount_path, "task": spec.task_mount_path,
           "verifier": spec.verifier.mount_path if spec.verifier else None}[field]
    assert got == cleaned


def test_a_batchs_task_in_another_spelling_of_its_workspace_overlaps_it() -> None:
    from rolloutbatch.core.spec import parse_spec
    from tests.unit.core.factories import MINIMAL
    with pytest.raises(SpecError):
        parse_spec({**MINIMAL, "workspace": {"mountPath": "/work"}, "task": {**(MINIMAL.get("task") or {}),
                                                                            "mountPath": "//work/./"}})


@pytest.mark.parametrize("field, path", [
    ("verifier", naming.VERIFIER_FILES_CLAIM_MOUNT_PATH), ("verifier", "/rollout//verifier-files-claim/x"),
    ("workspace", naming.VERIFIER_FILES_CLAIM_MOUNT_PATH), ("task", "/x/../rollout/verifier-files-claim")])
def test_mounts_at_the_verifier_files_writers_directory_are_invalid(field: str, path: str) -> None:
    """The verifier's files writer's directory (the episode's input for the verifier, and its mark
    that the files are whole) is the pod's own too: a mount there is two mounts at one path."""
    raw = {**BASE, "verifier": {}}
    raw[field] = {**raw.get(field, {}), **(BASE["task"] if field == "task" else {}), "mountPath": path}
    with pytest.raises(SpecError):
        pool_spec.parse_pool_spec(raw)
