"""A pool's task files as ``build_pool`` / ``Client.create_pool`` take them.

``build_pool`` promises "ValueError (a SpecError) for what the operator would refuse, read by its
own parse_pool_spec", which reads a pool's files as a batch's (core.spec_fields.checked_files: each a
string). It used to check a copy turned into strings while the object kept what was given:

- ``bytes`` content (``pathlib.Path(p).read_bytes()``, the natural way to read a script):
  ``Client.create_pool`` then died inside ``requests`` with ``TypeError: Object of type bytes is
  not JSON serializable`` (a traceback, no word on which field).
- ``None`` content: sent as JSON null, which the API server prunes: on the devcluster
  ``kubectl create --dry-run=server`` of ``files: {a.sh: null, e.py: x}`` stores
  ``{"files": {"e.py": "x"}}``: a pool without the file, with nothing said.
"""
from __future__ import annotations

import json

import pytest

from rolloutbatch.sdk.build import build_pool


@pytest.mark.parametrize("content", [b"#!/bin/sh\necho ready\n", None], ids=["bytes", "None"])
def test_a_task_file_that_is_not_text_is_refused_before_any_call(content) -> None:
    """Expected: ValueError naming spec.task.files, as for a batch's task files; found: an object
    that either cannot be sent (bytes) or loses the file on the API server (None)."""
    try:
        pool = build_pool("warm", 1, task_files={"setup.sh": content, "e.py": "x"})
    except ValueError as exc:
        assert "task" in str(exc)
        return
    files = pool["spec"]["task"]["files"]
    try:
        sent = json.loads(json.dumps(pool))   # what Client.create_pool sends (requests' json=)
    except TypeError as exc:
        pytest.fail(f"build_pool accepted {content!r} as a file's content; sending the pool raises {exc!r}")
    pytest.fail(f"build_pool accepted {content!r} as a file's content: files sent as "
                f"{sent['spec']['task']['files']!r} (the API server drops a null value: the pool has no setup.sh); "
                f"built {files!r}")


@pytest.mark.parametrize("batch", [{"spec": ["episodes", 2]}, {"spec": "x"}, ["spec"]])
def test_a_batch_that_is_not_an_object_is_refused_by_with_pool(batch) -> None:
    from rolloutbatch.sdk.build import with_pool
    with pytest.raises(ValueError, match="RolloutBatch object"):
        with_pool(batch, "warm")
