"""Nothing a pool's prepare starts outlives it (core.pool_delivery): a process it left ran as the
launcher's user into the warm wait, read the episode from the container's stdin and killed the
launcher's reader for a draw it did not like (the episode lost, and retried), or rewrote the script's
time and handed it on (a hostile review's attacks on the devcluster). The launcher runs here as PID 1
of a PID namespace of its own, as in its container: only there does it kill (`kill -1`)."""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from rolloutbatch.core import naming, pool_children, pool_delivery
from tests.unit.core.pool_shell import (_start, episode, hand_over, has_pid_namespaces, reap_launchers,  # noqa: F401
                                        termination_message_file, wait_for_file)

pytestmark = pytest.mark.skipif(not has_pid_namespaces(), reason="needs unshare -p (a PID namespace)")

# Detached (a session of its own, its output and input away from the launcher's) and beating.
LEFTOVER = ["/bin/sh", "-c", 'setsid /bin/sh -c \'echo $$ > "$0/leftover.pid"; while :; do date +%s%N > "$0/alive"; '
                             'sleep 0.05; done\' "$PWD" > /dev/null 2>&1 < /dev/null & '
                             'while [ ! -s alive ]; do sleep 0.01; done; echo prepared > prepared']   # it beat once


def claim_of(workspace: pathlib.Path) -> pathlib.Path:
    """The launcher's claim directory; the prepare and the agent run in ``workspace`` beside it, as
    in their pod (the launcher empties its claim directory once the prepare ended)."""
    claim = workspace / "claim"
    claim.mkdir(exist_ok=True)
    return claim


def launcher_script(claim) -> str:
    script = pool_delivery.launcher(str(claim), 10).replace("$$", "$")
    return script.replace(naming.TERMINATION_MESSAGE_PATH, str(termination_message_file(claim)))


def start_in_its_container(workspace, prepare: list[str], **popen):
    claim = claim_of(workspace)
    return _start(["unshare", "-p", "-f", "--mount-proc", "/bin/sh", "-c", launcher_script(claim), "warm", *prepare],
                  workspace, claim, **popen)


def beats(path) -> bool:
    before = path.read_bytes()
    time.sleep(0.5)
    return path.read_bytes() != before


def test_a_process_the_prepare_left_is_gone_before_the_pod_is_warm(tmp_path) -> None:
    proc = start_in_its_container(tmp_path, LEFTOVER)
    wait_for_file(claim_of(tmp_path) / "warm", 10)
    assert (tmp_path / "prepared").read_text() == "prepared\n" and (tmp_path / "alive").exists()
    assert not beats(tmp_path / "alive")
    # the episode is handed over and runs as any
    command = ("/bin/sh", "-c", 'echo "$EPISODE_INDEX" > ran')
    assert hand_over(claim_of(tmp_path), pool_delivery.episode_script(episode("b", 3, 1, command)))
    assert proc.wait(timeout=20) == 0 and (tmp_path / "ran").read_text() == "3\n"


def test_files_the_prepare_left_where_the_delivery_goes_are_removed(tmp_path) -> None:
    planted = ["/bin/sh", "-c", 'echo "exit 9" > claim/episode.sh; echo 0000 > claim/episode.key']
    proc = start_in_its_container(tmp_path, planted)
    claim = claim_of(tmp_path)
    wait_for_file(claim / "warm", 10)
    assert not (claim / "episode.sh").exists() and not (claim / "episode.key").exists()
    command = ("/bin/sh", "-c", "exit 0")
    assert hand_over(claim, pool_delivery.episode_script(episode("b", 0, 1, command)))
    assert proc.wait(timeout=20) == 0


def test_the_launcher_kills_nothing_when_it_is_not_pid_1(tmp_path) -> None:
    """On a host (a unit test without a PID namespace) `kill -1` would reach every process of its
    user: the launcher kills only as a container's PID 1."""
    claim = claim_of(tmp_path)
    proc = _start(["/bin/sh", "-c", launcher_script(claim), "warm", *LEFTOVER], tmp_path, claim)
    wait_for_file(claim / "warm", 10)
    try:
        assert beats(tmp_path / "alive")       # left alone
        assert proc.poll() is None
    finally:                                   # a session of its own: no process group of the test's holds it
        os.kill(int((tmp_path / "leftover.pid").read_text()), signal.SIGKILL)


def can_mount_in_a_namespace() -> bool:
    return has_pid_namespaces() and subprocess.run(
        ["unshare", "-m", "/bin/sh", "-c", "mount -t tmpfs tmpfs /usr/local/bin"], capture_output=True).returncode == 0


# A `head` that saves every delivery it reads and fails it: a re-roll of every draw.
PLANT_HEAD = ["/bin/sh", "-c", "printf '#!/bin/sh\\n: > \"%s/planted-head-ran\"; cat > \"%s/stolen\"; exit 1\\n' "
                               '"$PWD" "$PWD" > /usr/local/bin/head && chmod +x /usr/local/bin/head']


def plant(tool: str) -> list[str]:
    """A prepare that puts a `tool` first on the PATH: it marks that it ran, then does the job
    (an `rm` run after the kill of the prepare's processes could start one of its own)."""
    real = shutil.which(tool, path="/usr/bin:/bin")
    return ["/bin/sh", "-c", f"printf '#!/bin/sh\\n: > \"%s/planted-{tool}-ran\"\\nexec {real} \"$@\"\\n' "
                             f'"$PWD" > /usr/local/bin/{tool} && chmod +x /usr/local/bin/{tool}']


def start_in_its_image(workspace, prepare: list[str]):
    """The launcher as PID 1 of its PID namespace, /usr/local/bin a tmpfs of its own mount
    namespace (an image whose user can write it)."""
    claim = claim_of(workspace)
    in_its_image = 'mount -t tmpfs tmpfs /usr/local/bin && exec /bin/sh -c "$0" "$@"'
    return _start(["unshare", "-m", "-p", "-f", "--mount-proc", "/bin/sh", "-c", in_its_image, launcher_script(claim),
                   "warm", *prepare], workspace, claim)


@pytest.mark.skipif(not can_mount_in_a_namespace(), reason="needs unshare -m and mount (root)")
def test_a_head_the_prepare_put_first_on_the_path_never_reads_the_delivery(tmp_path) -> None:
    """/usr/local/bin comes before /usr/bin on the launcher's tools' PATH; in an image whose user
    can write it, a prepare could put a `head` there. The launcher fixed its `head` before the
    prepare ran."""
    proc = start_in_its_image(tmp_path, PLANT_HEAD)
    wait_for_file(claim_of(tmp_path) / "warm", 10)
    command = ("/bin/sh", "-c", 'echo "$EPISODE_INDEX" > ran')
    assert hand_over(claim_of(tmp_path), pool_delivery.episode_script(episode("b", 5, 1, command)))
    assert proc.wait(timeout=20) == 0 and (tmp_path / "ran").read_text() == "5\n"
    assert not (tmp_path / "planted-head-ran").exists() and not (tmp_path / "stolen").exists()


@pytest.mark.skipif(not can_mount_in_a_namespace(), reason="needs unshare -m and mount (root)")
@pytest.mark.parametrize("tool", ["rm", "sleep", "head"])
def test_no_tool_the_prepare_put_first_on_the_path_runs_after_it(tmp_path, tool) -> None:
    """An `rm` run after the kill of the prepare's processes started one that read the delivery and
    failed the draws it did not like (a hostile review's attack); `sleep` is the agent's watchdog."""
    proc = start_in_its_image(tmp_path, plant(tool))
    wait_for_file(claim_of(tmp_path) / "warm", 10)
    command = ("/bin/sh", "-c", 'echo "$EPISODE_INDEX" > ran')
    assert hand_over(claim_of(tmp_path), pool_delivery.episode_script(episode("b", 1, 1, command)))
    assert proc.wait(timeout=20) == 0 and (tmp_path / "ran").read_text() == "1\n"
    assert not (tmp_path / f"planted-{tool}-ran").exists()


@pytest.mark.skipif(not can_mount_in_a_namespace() or not shutil.which("setpriv"),
                    reason="needs unshare -m, mount and setpriv (root)")
def test_a_head_of_the_image_that_its_user_can_write_gives_way_to_one_it_cannot():
    """An image whose /usr/local/bin is its user's (some chown it) and holds a `head` of its own:
    the prepare, as that user, overwrites it; the launcher reads the delivery with /usr/bin/head,
    which the user cannot write. The launcher runs as uid 1000 here, as in its pod."""
    base = pathlib.Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        claim = base / "claim"
        claim.mkdir()
        for path in (base, claim):
            os.chmod(path, 0o777)
        script = launcher_script(claim)
        in_its_image = ("mount -t tmpfs -o mode=755,uid=1000 tmpfs /usr/local/bin && "
                        "printf '#!/bin/sh\\nexec /usr/bin/head \"$@\"\\n' > /usr/local/bin/head && "
                        "chmod 755 /usr/local/bin/head && chown 1000 /usr/local/bin/head && "
                        'exec setpriv --reuid 1000 --regid 1000 --clear-groups /bin/sh -c "$0" "$@"')
        proc = _start(["unshare", "-m", "-p", "-f", "--mount-proc", "/bin/sh", "-c", in_its_image, script, "warm",
                       *PLANT_HEAD], base, claim)
        wait_for_file(claim / "warm", 10)
        command = ("/bin/sh", "-c", 'echo "$EPISODE_INDEX" > ran')
        assert hand_over(claim, pool_delivery.episode_script(episode("b", 2, 1, command)))
        assert proc.wait(timeout=20) == 0 and (base / "ran").read_text() == "2\n"
        assert not (base / "planted-head-ran").exists() and not (base / "stolen").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def waits(proc, claim) -> bool:
    """The pod's startupProbe (core.pool_children.waiting_check), run in the launcher's namespaces."""
    children = pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    if not children:                           # unshare has not forked it yet
        return False
    return subprocess.run(["nsenter", "-t", children[0], "-p", "-m", *pool_children.waiting_check(str(claim))],
                          capture_output=True).returncode == 0


def until_it_waits(proc, claim, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not waits(proc, claim):
        assert time.monotonic() < deadline, "the launcher never said it waits"
        time.sleep(0.05)


@pytest.mark.skipif(not shutil.which("nsenter"), reason="needs nsenter")
def test_a_prepare_that_makes_the_warm_file_is_not_warm_until_it_ended(tmp_path) -> None:
    """A prepare that made `warm` at once had its pod claimed while it ran: it read the delivery
    from /proc/1/fd/0 and failed the draws it did not like (a hostile review's attack). The probe
    waits for the launcher's own stdin to be /dev/null, which no other process can do."""
    prepare = ["/bin/sh", "-c", ': > claim/warm; : > made-warm; sleep 2; : > prepared']
    proc = start_in_its_container(tmp_path, prepare)
    claim = claim_of(tmp_path)
    wait_for_file(tmp_path / "made-warm", 10)
    assert not waits(proc, claim)
    until_it_waits(proc, claim)
    assert (tmp_path / "prepared").exists()
    command = ("/bin/sh", "-c", 'echo "$EPISODE_INDEX" > ran')
    assert hand_over(claim, pool_delivery.episode_script(episode("b", 4, 1, command)))
    assert proc.wait(timeout=20) == 0 and (tmp_path / "ran").read_text() == "4\n"


@pytest.mark.skipif(not shutil.which("nsenter"), reason="needs nsenter")
@pytest.mark.parametrize("left", ["mkfifo warm", "mkdir -p episode.sh/x", "mkfifo input.json",
                                  "ln -s /dev/zero episode.key", "mkfifo session-hold", ": > session-end"])
def test_what_the_prepare_left_at_the_launchers_names_is_cleared(tmp_path, left) -> None:
    """A FIFO at `warm` blocked the launcher's `: > warm` for ever while the old probe (`test -e`)
    said the pod was warm: every claim of the pool was lost, the pool Ready throughout. A FIFO at
    `session-hold` blocked a session's hold alike. The claim directory is the launcher's: emptied."""
    proc = start_in_its_container(tmp_path, ["/bin/sh", "-c", f"cd claim && {left}"])
    claim = claim_of(tmp_path)
    until_it_waits(proc, claim)
    assert sorted(os.listdir(claim)) == ["warm"]
    command = ("/bin/sh", "-c", 'cat "$EPISODE_INPUT" > ran')
    script = pool_delivery.episode_script(episode("b", 0, 1, command, input_json='{"r": 0}'), claim_dir=str(claim))
    assert hand_over(claim, script)
    assert proc.wait(timeout=20) == 0 and (tmp_path / "ran").read_text() == '{"r": 0}'


@pytest.mark.parametrize("junk", [0, 60_000])       # below the pipe's 64 KiB: more would block the prepare
def test_a_delivery_the_prepare_wrote_to_the_launchers_stdin_never_runs(tmp_path, junk) -> None:
    """The prepare can open /proc/1/fd/0 (the launcher's, of its user) and write a whole delivery
    of its own, with a key it chose, then exit: the launcher read it once warm and ran the
    prepare's script as its episode (a review's attack). What is on the stdin before the launcher
    waits is dropped; the operator's own hand-over then runs."""
    injected = pool_delivery.delivery(pool_delivery.episode_script(
        episode("x", 9, 1, ("/bin/sh", "-c", ": > injected-ran")), claim_dir=str(claim_of(tmp_path))))
    (tmp_path / "injected").write_bytes(b"x" * junk + b"\n" * bool(junk) + injected)
    proc = start_in_its_container(tmp_path, ["/bin/sh", "-c", "cat injected > /proc/1/fd/0"])
    claim = claim_of(tmp_path)
    until_it_waits(proc, claim)
    time.sleep(0.5)                             # time for the reader to take what it was given
    assert not (tmp_path / "injected-ran").exists() and proc.poll() is None
    command = ("/bin/sh", "-c", 'echo "$EPISODE_INDEX" > ran')
    assert hand_over(claim, pool_delivery.episode_script(episode("b", 6, 1, command)))
    assert proc.wait(timeout=20) == 0 and (tmp_path / "ran").read_text() == "6\n"
    assert not (tmp_path / "injected-ran").exists()
