"""What build_pool (and so `rolloutbatch pool create`) accepts must be a RolloutPool the
CRD's schema accepts. cli/pools.py promises "the operator's own checks refuse a bad pool before
any call": an empty image, RuntimeClass or mount path (an unset shell variable), which the
operator's parser reads as the default, is refused, not sent for the API to refuse."""
from __future__ import annotations

import pytest

from rolloutbatch import crdgen
from rolloutbatch.sdk.build import build_pool
from tests.support import crd_schema

CRD = crd_schema.load_crd(crd_schema.ROOT / "crds" / crdgen.POOL_FILE)
SPEC = crd_schema.openapi_schema(CRD)["properties"]["spec"]
FILES = {"setup.sh": "echo ok"}


@pytest.mark.parametrize("option", [
    {"image": ""},
    {"runtime_class_name": ""},
    {"task_mount_path": ""},
    {"workspace": {"mountPath": ""}},
    {"verifier": {"image": ""}},
    {"verifier": {"mountPath": ""}},
])
def test_build_pool_refuses_what_the_crd_refuses(option):
    try:
        pool = build_pool("warm", 1, task_files=FILES, **option)
    except ValueError:
        return   # refused before any call: as promised
    assert crd_schema.errors(pool["spec"], SPEC) == [], \
        f"build_pool accepted {option} and built a spec the CRD refuses"
