"""Kubernetes' ``$(NAME)`` references in a pooled batch's command, args and env mean what they
mean in a Job's pod.

A cold pod gets ``spec.command``, ``args`` and ``env`` as its container's own fields, which the
kubelet expands (``args: ["$(EPISODE_INDEX)"]``, ``OUT=/workspace/out-$(EPISODE_INDEX)``): a
pooled episode is handed them in a script, where nothing would, so the operator expands them first
(core.env_expansion). Without it, a cold manifest converted by ``submit --pool`` gave every episode
the literal ``$(EPISODE_INDEX)``: one output path for all. Run by the real launcher.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import subprocess

from rolloutbatch.core import pool_delivery
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.sdk.build import with_pool
from rolloutbatch.service import episode_delivery
from tests.unit.core.pool_shell import hand_over, reap_launchers, start_launcher, wait_for_file  # noqa: F401

BATCH = BatchRef(namespace="team", name="b", uid="b0000000-0000-0000-0000-000000000001", generation=1)
COLD_MANIFEST_SPEC = {
    "episodes": 2,
    "command": ["/bin/sh", "-c", 'printf "%s|%s|%s" "$1" "$OUT" "$$" > "$0"'],
    "args": ["$(EPISODE_INDEX)"],
    "env": [{"name": "OUT", "value": "out-$(EPISODE_INDEX)-$(BATCH_NAME)-$(EPISODE_ID)-$$(KEPT)"}],
}


def _ran(tmp_path, spec, index: int, pod: str) -> str:
    out = tmp_path / "seen"
    delivery = episode_delivery.EpisodeDelivery(None, None, BATCH, spec, lambda *e: None, logging.getLogger("t"))
    episode = delivery.episode(index)
    episode = dataclasses.replace(episode, command=(*episode.command[:3], str(out), *episode.command[3:]),
                                  episode_id=pod)
    proc = start_launcher(tmp_path, env={"PATH": os.environ["PATH"]}, stderr=subprocess.DEVNULL)
    wait_for_file(tmp_path / "warm")
    assert hand_over(tmp_path, pool_delivery.episode_script(episode))
    assert proc.wait(timeout=10) == 0
    return out.read_text()


def test_a_converted_cold_manifest_gets_what_a_cold_pod_gets(tmp_path) -> None:
    pooled = with_pool({"metadata": {"name": "b"}, "spec": dict(COLD_MANIFEST_SPEC)}, "warm")["spec"]
    # the kubelet makes "$$" one "$" (the shell then prints "$", not its PID)
    assert _ran(tmp_path, parse_spec(pooled), 1, "warm-x1") == "1|out-1-b-warm-x1-$(KEPT)|$"


def test_a_value_is_still_never_read_as_shell(tmp_path) -> None:
    """Expanded values are quoted as before: a batch name or env value with shell in it stays text."""
    spec = parse_spec({**COLD_MANIFEST_SPEC, "poolRef": {"name": "warm"},
                       "env": [{"name": "X", "value": "'; touch /tmp/pwned-$(EPISODE_INDEX); '"},
                               {"name": "OUT", "value": "$(X)"}]})
    index, out, _ = _ran(tmp_path, spec, 0, "warm-x0").split("|")
    assert (index, out) == ("0", "'; touch /tmp/pwned-0; '") and not os.path.exists("/tmp/pwned-0")
