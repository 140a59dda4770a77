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
import subprocess
import sys
import time

from rolloutbatch.core import naming, pool_census, pool_delivery
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.core.pod_reading import pod_facts
from tests.unit.core.pool_shell import (episode, _start, hand_over, reap_launchers, start_launcher,  # noqa: F401 (the fixture)
                                       termination_message_file, wait_for_file)

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
    assert hand_over(tmp_path, pool_delivery.episode_script(episode("b", 0, 1, EPISODE)))
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


def _failed_pod(message: str) -> dict:
    """A warm pod whose launcher exited NOT_DELIVERED_EXIT, ``message`` its termination message."""
    return {"metadata": {"name": POD, "labels": {naming.LABEL_EPISODE_ROLE: naming.ROLE_WARM},
                         "annotations": {pool_census.TEMPLATE_ANNOTATION: "t1"}},
            "status": {"phase": "Failed", "containerStatuses": [{"name": naming.CONTAINER_NAME, "state": {
                "terminated": {"exitCode": v.NOT_DELIVERED_EXIT, "message": message}}}]}}


def _stall_message(tmp_path) -> str:
    said = termination_message_file(tmp_path).read_text()
    [(_, reason, message)] = pool_census.census([_failed_pod(said)], "t1").stuck
    assert reason == v.PoolReason.PREPARE_FAILED
    return message


def test_a_failed_prepare_is_quoted_by_the_pools_stall(tmp_path) -> None:
    """The pool's Stalled condition says how the prepare ended and how its output ended, not only
    that it failed: the one who wrote the prepare need not find the dead pod's log."""
    noisy = ["/bin/sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; "
                              "echo 'pip: no matching distribution for torch==9.9'; exit 3"]
    proc = start_launcher(tmp_path, noisy, stdout=subprocess.DEVNULL)
    assert proc.wait(timeout=20) == v.NOT_DELIVERED_EXIT
    message = _stall_message(tmp_path)
    assert "exited 3" in message and message.endswith("no matching distribution for torch==9.9)")
    assert len(message) < 1000 and "line-10 " not in message


def test_a_prepare_past_its_time_is_said_to_be_so(tmp_path) -> None:
    """Killed at its timeout: said so, with its output (a process it started and left holding its
    output keeps that output from being quoted; the launcher still ends in 2 s)."""
    proc = start_launcher(tmp_path, ["/bin/sh", "-c", "echo cloning; exec sleep 30"], prepare_timeout=1,
                          stdout=subprocess.DEVNULL)
    assert proc.wait(timeout=20) == v.NOT_DELIVERED_EXIT
    message = _stall_message(tmp_path)
    assert "ran past its 1s" in message and "cloning" in message, message


def test_an_image_without_mkfifo_says_so(tmp_path) -> None:
    """The launcher keeps the prepare's output in a FIFO: an image without `mkfifo` (or one where it
    fails) says that in the pod's log and in the pool's condition, not only PrepareFailed."""
    (tmp_path / "prepare.out").mkdir()    # where the FIFO goes: mkfifo fails
    proc = start_launcher(tmp_path, ["true"], stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == v.NOT_DELIVERED_EXIT
    assert pool_delivery.MKFIFO_MISSING.encode() in out
    assert "mkfifo" in _stall_message(tmp_path)


def test_what_a_prepare_printed_is_quoted_printable_and_bounded() -> None:
    said = "rolloutbatch: the pool prepare exited 1; its output ends:\n" + "\x1b[31mred\x00" * 500 + "\nthe end"
    [(_, _, message)] = pool_census.census([_failed_pod(said)], "t1").stuck
    assert message.isprintable() and len(message) < 1000
    assert "exited 1" in message and message.endswith("the end)")
    [(_, _, bare)] = pool_census.census([_failed_pod("")], "t1").stuck
    assert bare == "the pool's prepare command failed or timed out"
