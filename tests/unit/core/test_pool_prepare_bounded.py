"""The pool's prepare output kept out of the container's log stays bounded in the claim directory
(an emptyDir of CLAIM_DIR_LIMIT, 16Mi: the kubelet evicts a pod past its sizeLimit, and the pool
would then call a prepare that succeeded failed). Run by the real /bin/sh: the prepare itself
measures the claim directory while it prints 20 MiB."""
from __future__ import annotations

import sys

from rolloutbatch.core import pool_children
from tests.unit.core.pool_shell import reap_launchers, start_launcher, wait_for_file  # noqa: F401 (the fixture)


def _bytes(quantity: str) -> int:
    assert quantity.endswith("Mi")
    return int(quantity[:-2]) * 1024 * 1024


def test_a_verbose_prepare_stays_within_the_claim_directorys_size_limit(tmp_path) -> None:
    claim = tmp_path / "claim"
    claim.mkdir()
    size_file = tmp_path / "seen"
    # 20 MiB of build output, then the size of what the launcher made of it in the claim directory
    prepare = [sys.executable, "-c",
               "import os, sys\n"
               "line = 'x' * 1023 + '\\n'\n"
               "for _ in range(20 * 1024): sys.stdout.write(line)\n"
               "sys.stdout.flush()\n"
               f"used = sum(os.path.getsize(os.path.join({str(claim)!r}, n)) for n in os.listdir({str(claim)!r}))\n"
               f"open({str(size_file)!r}, 'w').write(str(used))\n"]
    proc = start_launcher(claim, prepare)
    wait_for_file(claim / "warm", 30)
    used = int(size_file.read_text())
    proc.kill()
    limit = _bytes(pool_children.CLAIM_DIR_LIMIT)
    assert used <= limit, (f"the prepare's output filled the claim emptyDir to {used} bytes, past its sizeLimit "
                           f"{pool_children.CLAIM_DIR_LIMIT} ({limit}): the kubelet evicts the warm pod")
