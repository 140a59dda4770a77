"""The warm pool's launcher and delivery against what a hostile episode, a crash or a cut
connection does, run by a real /bin/sh (as tests/unit/core/test_pools.py does). Each test is a
defect an attack review found (each docstring says what it did before it was fixed).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time

import pytest

from rolloutbatch.core import naming, pool_delivery
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.vocabulary import NOT_DELIVERED_EXIT
from rolloutbatch.service import episode_delivery
from tests.unit.core.pool_shell import (episode, delivery_head, hand_over, reap_launchers,  # noqa: F401 (the fixture)
                                       send, start_launcher)

BATCH = BatchRef(namespace="team", name="b", uid="b0000000-0000-0000-0000-000000000001", generation=1)


def _launcher(tmp_path, prepare: list[str] | None = None) -> subprocess.Popen:
    return start_launcher(tmp_path, prepare, env={"PATH": os.environ["PATH"]}, stderr=subprocess.DEVNULL)


def _wait_for(path, seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def _exit_on_term(proc: subprocess.Popen) -> int:
    """What the kubelet's SIGTERM ends the launcher with; 137 when it ignores it (as a PID 1 shell
    without a trap does: SIGKILL after the grace period)."""
    proc.send_signal(signal.SIGTERM)
    code = _exit_or_none(proc, 3.0)
    return 137 if code is None else code


def _exit_or_none(proc: subprocess.Popen, seconds: float = 5.0) -> int | None:
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def _episode_of(spec_raw: dict, index: int = 0) -> pool_delivery.Episode:
    spec = parse_spec(spec_raw)
    return episode_delivery.EpisodeDelivery(None, None, BATCH, spec, lambda *e: None, logging.getLogger("t")).episode(index)


# -- a delivery whose stdin ends early (operator crash, dropped connection, exec timeout) ---------------
def _cut_script(tmp_path, where: str) -> tuple[bytes, int]:
    naming_path = str(tmp_path)
    text = json.dumps({"q": "x" * 5000})
    script = pool_delivery.episode_script(episode("b", 0, 1, ("/bin/sh", "-c", "exit 0"), input_json=text))
    script = script.replace(naming.CLAIM_MOUNT_PATH.encode(), naming_path.encode())
    if where == "inside a quoted value":
        cut = len(script) // 4                        # in the middle of the input's quoted JSON
    else:                                             # a line boundary before `set -- <command>`
        cut = script.rindex(b"\nset -- ") + 1
    return script, cut


def test_a_delivery_cut_short_never_runs_as_an_episode(tmp_path) -> None:
    """A stdin that ends early (the operator died mid-attach, the connection dropped): `head -c N`
    exits 0 on a short stdin, so the launcher must count what it read. Were a cut-off script sourced,
    it would exit 2 (a syntax error in a sourced file is fatal to sh) or re-run the *prepare*
    command as the episode ("$@" never reset) and exit 0: a pod that never got its episode ending
    as a graded one (NonZeroExit / NoReadyEvent, the agent's)."""
    results = {}
    for where in ("inside a quoted value", "at a line boundary"):
        claim = tmp_path / where.replace(" ", "-")
        claim.mkdir()
        proc = _launcher(claim, ["/bin/sh", "-c", "exit 0"])
        _wait_for(claim / "warm")
        script, cut = _cut_script(claim, where)
        hand_over(claim, script, cut=delivery_head(script) + cut)
        results[where] = _exit_or_none(proc)
    # still waiting (a later delivery can complete it), or says "never delivered": never 0 or 2
    assert all(code in (None, NOT_DELIVERED_EXIT) for code in results.values()), results


def test_a_cut_delivery_completed_by_a_second_attach_never_runs(tmp_path) -> None:
    """A pod has no stdinOnce: a hand-over cut mid-script (the operator died) leaves the stdin open,
    and the next operator's attach (its pings, then the script again) completes the count. The
    spliced script must be refused before any line of it runs and before RECEIVED is said."""
    for where in ("inside a quoted value", "at a line boundary"):
        claim = tmp_path / where.replace(" ", "-")
        claim.mkdir()
        proc = start_launcher(claim, None, env={"PATH": os.environ["PATH"]}, stderr=subprocess.DEVNULL,
                              stdout=subprocess.PIPE)
        _wait_for(claim / "warm")
        script, cut = _cut_script(claim, where)
        hand_over(claim, script, cut=delivery_head(script) + cut, keep_open=True)
        time.sleep(0.1)
        hand_over(claim, script, before=pool_delivery.HELLO[0] * 3)
        assert _exit_or_none(proc) == NOT_DELIVERED_EXIT, where
        assert pool_delivery.RECEIVED.encode() not in proc.stdout.read(), where
        assert not (claim / "input.json").exists() and not list(claim.glob("*.json")), where   # nothing ran


def test_a_splice_crafted_by_the_submitters_values_never_runs_them(tmp_path) -> None:
    """The same splice with the cut placed for a crafted env value: the second send's quoting is
    inverted after the cut, so the value's text is read as shell, and the value holds what was the
    sentinel line where the launcher reads the script's last line. Each send's key closes it: that
    line is not the sentinel set to the first send's key, which no value can hold."""
    payload = "touch spliced-ran"
    forged = f"{pool_delivery.SENTINEL}=ready\n"
    value = "#" * 600 + f"\n{payload}\n{forged}" + "#" * 600
    script = pool_delivery.episode_script(episode("b", 0, 1, ("/bin/sh", "-c", "exit 0"),
                                                                env=(("X", value),)))
    # the second attach pings first, and the launcher, reading the script, takes its pings as script
    first, second = pool_delivery.delivery(script), pool_delivery.HELLO[0] + pool_delivery.delivery(script)
    head = first.index(b"\n") + 1
    key = first[:head].split()[1].decode()
    # the launcher reads all but the last line (the sentinel with its key) with head, then one line:
    # the cut is placed so that this line is the forged one of the second send
    body = len(first) - head - len(f"{pool_delivery.SENTINEL}={key}\n")
    cut = body - second.index(f"\n{payload}\n{forged}".encode()) - len(f"\n{payload}\n")
    start = script.index(b"X=")
    assert start < cut < start + len(value), "the cut must fall inside the crafted value's quotes"
    claim = tmp_path / "claim"
    claim.mkdir()
    proc = start_launcher(claim, None, env={"PATH": os.environ["PATH"]}, stderr=subprocess.DEVNULL,
                          stdout=subprocess.PIPE)
    _wait_for(claim / "warm")
    send(claim, first[:head + cut], keep_open=True)
    time.sleep(0.1)
    send(claim, second)
    assert _exit_or_none(proc) == NOT_DELIVERED_EXIT
    assert pool_delivery.RECEIVED.encode() not in proc.stdout.read()
    assert not (claim / "spliced-ran").exists()


# -- a pod ended before its episode arrives (activeDeadlineSeconds, pool deletion race, batch deadline) ---
def test_a_launcher_terminated_while_it_waits_says_not_delivered(tmp_path) -> None:
    """A claimed pod whose delivery is late (operator failover after the claim, a cold pod's slow
    prepare) is ended by its activeDeadlineSeconds: the kubelet sends SIGTERM (ignored by sh as
    PID 1), then SIGKILL. Exit 137 (or -15 here) is FailIndex for the Job and `Timeout` or
    `NonZeroExit` (the agent's failure) for the verdict: a pod that never got its episode is counted
    as one. The launcher must answer a termination while it waits with NOT_DELIVERED_EXIT."""
    proc = _launcher(tmp_path)
    _wait_for(tmp_path / "warm")
    assert _exit_on_term(proc) == NOT_DELIVERED_EXIT


def test_a_launcher_terminated_while_it_prepares_says_not_delivered(tmp_path) -> None:
    """The Job controller deletes its cold pod for an index a claimed pod holds, often while it
    still prepares: that pod never got an episode either, and must not end as 137 (an episode's
    failure, and the Job's FailIndex)."""
    proc = _launcher(tmp_path, ["sh", "-c", f"touch {tmp_path}/preparing; sleep 30"])
    _wait_for(tmp_path / "preparing")
    assert _exit_on_term(proc) == NOT_DELIVERED_EXIT
    assert not (tmp_path / "warm").exists()


# -- what parse_spec accepts must reach the episode -------------------------------------------------------
def test_an_env_name_the_spec_accepts_reaches_a_pooled_episode(tmp_path) -> None:
    """ENV_NAME_PATTERN accepts '-' and '.' (as Kubernetes does); the episode script writes
    `MY-VAR='v'; export MY-VAR`, and `export` of a bad name is a special-builtin error: the launcher
    (PID 1) exits 2 before the command runs, a NonZeroExit of every episode, counted as the agent's."""
    # Checked by Python, not sh: dash passes no variable whose name is not a shell identifier on to
    # its children, whether Kubernetes or the launcher set it.
    raw = {"episodes": 1, "poolRef": {"name": "p"},
           "command": ["python3", "-c", 'import os, sys; sys.exit(os.environ.get("MY-VAR") != "v")'],
           "env": [{"name": "MY-VAR", "value": "v"}]}
    try:
        episode = _episode_of(raw)
    except SpecError:
        return   # refused up front with poolRef: fine
    proc = _launcher(tmp_path)
    _wait_for(tmp_path / "warm")
    script = pool_delivery.episode_script(episode)
    hand_over(tmp_path, script)
    assert _exit_or_none(proc) == 0


def test_an_env_value_with_a_nul_is_refused_or_arrives_intact(tmp_path) -> None:
    """parse_spec accepts a NUL in an env value; sh drops NUL bytes from the sourced script, so the
    pooled episode silently sees another value ('ab' for 'a\\0b'). A non-pooled pod fails to start."""
    raw = {"episodes": 1, "poolRef": {"name": "p"},
           "command": ["/bin/sh", "-c", 'printf %s "$X" > seen'], "env": [{"name": "X", "value": "a\0b"}]}
    try:
        episode = _episode_of(raw)
    except SpecError:
        return
    proc = _launcher(tmp_path)
    _wait_for(tmp_path / "warm")
    script = pool_delivery.episode_script(episode)
    hand_over(tmp_path, script)
    code = _exit_or_none(proc)
    assert code == 0 and (tmp_path / "seen").read_bytes() == b"a\0b"


def test_a_command_that_is_a_shell_builtin_cannot_pass_for_not_delivered(tmp_path) -> None:
    """The launcher runs "$@" in PID 1's own shell: a command whose first word is a special builtin
    (`exit`, `exec`, `eval`, `.`) runs there, so `exec python agent.py` hands the agent PID 1 and its
    exit 121 is not mapped: the episode reads as InfrastructureFailure (lost, not graded)."""
    proc = _launcher(tmp_path)
    _wait_for(tmp_path / "warm")
    script = pool_delivery.episode_script(episode("b", 0, 1, ("exec", "/bin/sh", "-c", f"exit {NOT_DELIVERED_EXIT}")))
    hand_over(tmp_path, script)
    assert _exit_or_none(proc) not in (None, NOT_DELIVERED_EXIT)   # env finds no program `exec`: 127


@pytest.mark.parametrize("stdin", [b"", b"x\nexit 0\n", b"-1\n", b"99999\nexit 0\n", b"7e0\nexit 0\n",
                                   b"+99 0123456789abcdef0123456789abcdef\nexit 0\n",
                                   b"99999999999999999999 0123456789abcdef0123456789abcdef\nexit 0\n",
                                   b"1000000000 0123456789abcdef0123456789abcdef\nexit 0\n",
                                   b"0099 0123456789abcdef0123456789abcdef\nexit 0\n"],
                         ids=["nothing", "no number", "negative", "longer than what came", "not only digits",
                              "signed", "past sh's integer range", "ten digits",
                              "zero-padded"])
def test_a_delivery_without_a_whole_script_of_its_stated_length_never_runs(tmp_path, stdin) -> None:
    proc = _launcher(tmp_path, ["/bin/sh", "-c", "exit 0"])
    _wait_for(tmp_path / "warm")
    proc.stdin.write(stdin)
    proc.stdin.close()
    assert _exit_or_none(proc) == NOT_DELIVERED_EXIT


_KEY = "0123456789abcdef" * 2


@pytest.mark.parametrize(("length", "key"), [
    ("0%o", _KEY),                          # to sh's arithmetic, octal: the right count
    ("%d", _KEY + "0"),
    ("%d", _KEY + _KEY[:16]),
    ("%d", _KEY[:16]),
    ("%d", "0"),
], ids=["octal length", "33-digit key", "48-digit key", "16-digit key", "1-digit key"])
def test_a_length_or_key_not_in_the_one_form_delivery_writes_is_refused_before_anything_runs(
        tmp_path, length, key) -> None:
    """The launcher checked only that the length was digits and the key hex: `0<octal of the
    count>` passed its `[ -ge ]` (decimal) and gave `head -c` the right count through sh's
    arithmetic (octal), and a key of any length was taken: a hand-over in neither form ran."""
    proc = start_launcher(tmp_path, env={"PATH": os.environ["PATH"]}, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
    _wait_for(tmp_path / "warm")
    script = pool_delivery.episode_script(episode("b", 0, 1, ("/bin/sh", "-c", "echo ran > ran.txt")))
    whole = script + f"{pool_delivery.SENTINEL}={key}\n".encode()
    send(tmp_path, f"{length % len(whole)} {key}\n".encode() + whole)
    assert _exit_or_none(proc) == NOT_DELIVERED_EXIT
    assert pool_delivery.RECEIVED.encode() not in proc.stdout.read()
    assert not (tmp_path / "ran.txt").exists()


def test_delivery_refuses_a_script_longer_than_the_launchers_length_line_can_say(monkeypatch) -> None:
    monkeypatch.setattr(pool_delivery, "MAX_DELIVERY_BYTES", 100)   # not a GB of test data
    pool_delivery.delivery(b"x" * (100 - len(pool_delivery.SENTINEL) - 2 - 2 * pool_delivery.KEY_BYTES))
    with pytest.raises(ValueError, match="more than the pool launcher takes"):
        pool_delivery.delivery(b"x" * (101 - len(pool_delivery.SENTINEL) - 2 - 2 * pool_delivery.KEY_BYTES))


def test_the_launcher_says_it_received_before_the_agent_runs_and_the_agent_reads_no_more_stdin(tmp_path) -> None:
    """The operator's attach waits for RECEIVED: it must come before any byte the agent writes (or an
    agent could print it early: it cannot, it has not run yet), and what follows the script on the
    stdin (a second attach's bytes) never reaches the agent: its stdin is /dev/null."""
    proc = start_launcher(tmp_path, env={"PATH": os.environ["PATH"]}, stdout=subprocess.PIPE)
    _wait_for(tmp_path / "warm")
    script = pool_delivery.episode_script(episode(
        "b", 0, 1, ("/bin/sh", "-c", "echo agent; wc -c; echo done")))
    proc.stdin.write(pool_delivery.delivery(script) + b"more bytes for the agent?\n" * 100)
    proc.stdin.close()
    out = proc.stdout.read()
    assert proc.wait(timeout=10) == 0
    assert out.decode().split() == [*pool_delivery.RECEIVED.split(), "agent", "0", "done"]


def test_pings_are_answered_until_the_script_comes_and_are_no_part_of_it(tmp_path) -> None:
    """The operator pings until a PONG proves the container's stdout reaches its attach; the
    pings never reach the script, and a ping after the length is script, not a ping."""
    proc = start_launcher(tmp_path, env={"PATH": os.environ["PATH"]}, stdout=subprocess.PIPE)
    _wait_for(tmp_path / "warm")
    ping = pool_delivery.PING.encode() + b"\n"
    proc.stdin.write(ping * 3)
    proc.stdin.flush()
    assert [proc.stdout.readline() for _ in range(3)] == [pool_delivery.PONG.encode() + b"\n"] * 3
    script = pool_delivery.episode_script(episode("b", 0, 1, ("/bin/sh", "-c", "exit 4")))
    data = pool_delivery.delivery(script)
    proc.stdin.write(data + ping)
    proc.stdin.close()
    assert proc.stdout.readline().decode().strip() == pool_delivery.RECEIVED
    assert proc.wait(timeout=10) == 4
    assert (tmp_path / "episode.sh").read_bytes() == data[data.index(b"\n") + 1:]


def _sourced(tmp_path, script: bytes) -> subprocess.CompletedProcess:
    """What the launcher does with a whole script: source it, then run "$@" (its `set --`)."""
    path = tmp_path / "episode.sh"
    path.write_bytes(script)
    return subprocess.run(["/bin/sh", "-c", '. "$0"; ( "$@" )', str(path)], cwd=tmp_path,
                          env={"PATH": os.environ["PATH"]}, capture_output=True, timeout=10)


def test_a_first_word_that_expands_to_an_assignment_is_run_as_a_program_name(tmp_path) -> None:
    """env(1) would read `MODE=fast` as a variable and run the next word: warm and cold would run
    different programs. Run as a name, it fails as a Job pod's would (no such program)."""
    episode = _episode_of({"episodes": 1, "poolRef": {"name": "p"},
                           "command": ["$(TOOL)", "/bin/sh", "-c", "echo ran > ran.txt"],
                           "env": [{"name": "TOOL", "value": "MODE=fast"}]})
    done = _sourced(tmp_path, pool_delivery.episode_script(episode, str(tmp_path)))
    assert done.returncode == 127 and not (tmp_path / "ran.txt").exists(), done
    plain = _episode_of({"episodes": 1, "poolRef": {"name": "p"}, "command": ["/bin/sh", "-c", "echo ran > ran.txt"]})
    assert _sourced(tmp_path, pool_delivery.episode_script(plain, str(tmp_path))).returncode == 0
    assert (tmp_path / "ran.txt").exists()
