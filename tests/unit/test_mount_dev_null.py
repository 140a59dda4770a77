"""A mount at /dev/null is refused by the spec: no pod of it could start.

An earlier change allowed mounts under /dev again (a workspace at /dev/shm), refusing only /dev itself,
/proc, /sys and /dev/termination-log (core.spec_fields.system_path). But runc reopens /dev/null inside
every container it creates: a volume (a directory) mounted at /dev/null makes every pod fail
to start. On the devcluster (containerd 2.4, runc), a pod with an emptyDir at /dev/null:

    StartError, exit 128: failed to create containerd task: failed to create shim task: OCI
    runtime create failed: runc create failed: unable to start container process: error during
    container init: error reopening /dev/null inside container: open /dev/null: is a directory

(the same pod with the emptyDir at /dev/shm, /dev/zero, /dev/pts, /dev/fd, /dev/mqueue or
/dev/stdout starts). So ``workspace.mountPath: /dev/null`` (or the task's or verifier's) is
accepted by parse_spec and parse_pool_spec; a pool's pods all end StartError (the pool stalls
ContainerCannotStart after making its namespace and pods), a batch's pods likewise, instead of
the spec being refused up front as the rule promises ("Not on or over the kernel's and the
runtime's own: no pod could start"; design §5.17: "such a spec is InvalidSpec before the pool's
namespace exists, not a refusal at its first pod").

Expected: a mount at /dev/null is refused by the spec, naming the field, as /dev/termination-log is.
"""
from __future__ import annotations

import pytest

from rolloutbatch.core import pool_spec
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import parse_spec

TASK = {"files": {"episode.py": "print(1)"}}


@pytest.mark.parametrize("path", ["/dev/null", "/dev//null/", "/dev/x/../null"])
def test_a_mount_at_dev_null_is_refused_by_the_spec(path):
    for field, spec in [("spec.task.mountPath", {"task": {**TASK, "mountPath": path}}),
                        ("spec.workspace.mountPath", {"task": TASK, "workspace": {"mountPath": path}})]:
        with pytest.raises(SpecError) as err:
            pool_spec.parse_pool_spec({"size": 1, **spec})
        assert err.value.field == field
        with pytest.raises(SpecError) as err:
            parse_spec({"episodes": 1, **spec})
        assert err.value.field == field
    with pytest.raises(SpecError) as err:
        parse_spec({"episodes": 1, "task": TASK, "verifier": {"files": {"v.py": "x"}, "mountPath": path}})
    assert err.value.field == "spec.verifier.mountPath"
