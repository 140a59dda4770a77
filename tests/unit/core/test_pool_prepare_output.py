"""The pool's prepare output is not read as part of any episode's log.

A warm pod's episode container runs the pool's `prepare`, then, once handed over, the episode.
The operator reads an episode's log from the container's first byte, up to `log_limit_bytes`
(1 MiB by default): had the prepare's output gone to the container's log, a verbose prepare (a
`pip install`, a build) would spend the budget of every episode the pool serves, and past it
every episode would fail `LogLimitExceeded` as its own failure. The launcher keeps it in a file
and prints its last 4 KiB only when the prepare fails (the pod then runs no episode).

With the real launcher under /bin/sh (as tests/unit/core/test_pools.py does).
"""

from __future__ import annotations

import os
import sys
import time

from rolloutbatch.core import naming, pool_delivery
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.verdict import judge_episode, pod_facts
from tests.unit.core.pool_shell import _start, hand_over, reap_launchers, wait_for_file  # noqa: F401 (the fixture)

POD = "warm-abcde"
# a verbose but successful prepare: 1.2 MB of progress output (pip/npm/cargo print that much)
PREPARE = [sys.executable, "-c", "import sys\nfor i in range(20000): sys.stdout.write('building %05d ' % i + 'x' * 44 + '\\n')"]
EPISODE = ("/bin/sh", "-c",
           'now=$(date +%s); printf \'{"event":"ready","at":%s,"episode_id":"%s"}\\n\' "$now" "$EPISODE_ID"; '
           'printf \'{"event":"reward","at":%s,"episode_id":"%s","reward":1}\\n\' "$now" "$EPISODE_ID"')


def test_a_verbose_prepare_does_not_fail_every_episode_of_the_pool(tmp_path) -> None:
    script = pool_delivery.launcher(str(tmp_path), 60).replace("$$", "$")
    env = {**os.environ, "EPISODE_ID": POD}
    container_log = tmp_path.parent / f"{tmp_path.name}.log"   # what the runtime writes the stdout to
    with open(container_log, "wb") as out:
        proc = _start(["/bin/sh", "-c", script, "warm", *PREPARE], tmp_path, tmp_path, stdout=out, env=env)
    wait_for_file(tmp_path / "warm", 20)
    assert hand_over(tmp_path, pool_delivery.episode_script(pool_delivery.Episode("b", 0, 1, EPISODE)))
    assert proc.wait(timeout=30) == 0
    log = container_log.read_bytes()
    assert b'"event":"reward"' in log     # the episode did print its two events

    # what the operator reads: the first log_limit_bytes of the container's log (limitBytes)
    limit = v.LOG_LIMIT_BYTES
    parsed = parse_log(log[:limit], truncated=len(log) > limit)
    now = time.time()
    pod = {"metadata": {"name": POD, "namespace": "rp-x", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z",
                        "annotations": {naming.POOLED_ANNOTATION: "true", v.COMPLETION_INDEX_KEY: "0",
                                        naming.ANNOTATION_CLAIMED_AT: f"{now - 5:.3f}"}},
           "spec": {"nodeName": "n"},
           "status": {"phase": "Succeeded", "containerStatuses": [{"name": naming.CONTAINER_NAME, "state": {
               "terminated": {"exitCode": 0, "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                         time.gmtime(now + 1))}}}]}}
    result = judge_episode(pod_facts(pod), parsed, now=now + 2, channel=v.CHANNEL_LOG)
    assert result.outcome == v.OUTCOME_SUCCEEDED, (
        f"the episode printed its ready and reward, yet is judged {result.outcome}/{result.reason}: "
        f"{result.message} ({len(log)} bytes in the container's log, {len(log) - log.find(b'{')} of them the "
        "episode's)")


def test_a_failed_prepare_prints_only_the_end_of_its_output(tmp_path) -> None:
    from tests.unit.core.pool_shell import start_launcher
    import subprocess
    noisy = ["/bin/sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); "
                              "done; echo the-last-words; exit 3"]
    proc = start_launcher(tmp_path, noisy, stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == v.NOT_DELIVERED_EXIT
    assert out.rstrip().endswith(b"the-last-words") and len(out) <= 4096
    assert not (tmp_path / "prepare.log").exists() and not (tmp_path / "warm").exists()


def test_a_prepare_that_leaves_a_process_printing_still_makes_the_pod_warm(tmp_path) -> None:
    """A prepare may start a service and leave it running (its stdout the prepare's): the pod is
    warm once the prepare itself ended, and the service's output goes where the prepare's went."""
    from tests.unit.core.pool_shell import start_launcher
    import subprocess
    daemon = ["/bin/sh", "-c", "(while :; do echo service-line; sleep 0.05; done) & echo started"]
    proc = start_launcher(tmp_path, daemon, stdout=subprocess.PIPE)
    wait_for_file(tmp_path / "warm", 10)
    assert proc.poll() is None and not (tmp_path / "prepare.out").exists()
