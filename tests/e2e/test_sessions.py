"""Trainer-driven sessions on the devcluster (core.sessions, sdk.sessions): the trainer claims a
pooled sandbox as one episode, runs commands in it (output streamed, exit codes), writes and
reads files, ends it, and the batch's verifier grades the workspace; a session nobody ends stops
at its deadline, flagged, and is graded all the same. The Role the README gives a trainer is
what it needs, and no less.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import pytest

from rolloutbatch.core import naming
from rolloutbatch.sdk import Client, SessionOver
from tests.support.batches import results, unique
from tests.support.kube import kubeconfig_path
from tests.support.operator import kubectl
from tests.support.tenant import Tenant

pytestmark = [pytest.mark.cluster]

PREPARE = ["/bin/sh", "-c", "echo warm > prepared"]
VERIFY = '''
import json, os, pathlib, time
ws = pathlib.Path("/workspace")
answer = (ws / "answer.txt").read_text().strip() if (ws / "answer.txt").exists() else ""
print(json.dumps(dict(event="reward", at=time.time(), episode_id=os.environ["EPISODE_ID"],
                      reward=float(answer == "42"), answer=answer)))
'''


@contextlib.contextmanager
def one_session(namespace: str, prefix: str) -> Iterator:
    """A session of a batch of one episode on a new pool of one (its verifier: VERIFY); the batch
    and the pool are deleted after it, whatever happened."""
    client = Client(str(kubeconfig_path()), namespace=namespace)
    pool = unique(prefix)
    client.create_pool(pool, 1, task_files={"setup.sh": "true"}, verifier={}, resources=SMALL)
    client.wait_pool(pool, timeout=180)
    with client.open_sessions(pool, 1, verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 60},
                              episode_timeout_seconds=120) as batch:
        try:
            with batch.session(0, timeout=60) as session:
                yield session
        finally:
            batch.handle.delete(wait=False)
            client.delete_pool(pool, wait=False)


def test_a_trainer_drives_two_sessions_and_the_verifier_grades_them(operator_process, namespace):
    client = Client(str(kubeconfig_path()), namespace=namespace)
    pool = unique("spool")
    client.create_pool(pool, 2, task_files={"setup.sh": "true"}, prepare=PREPARE, verifier={},
                       resources={"requests": {"cpu": "10m", "memory": "32Mi"},
                                  "limits": {"cpu": "500m", "memory": "128Mi"}})
    assert client.wait_pool(pool, timeout=180)["status"]["sandboxNamespace"] == naming.pool_namespace(namespace, pool)

    with client.open_sessions(pool, 2, verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 60},
                              inputs=[{"q": "six times seven"}], samples_per_input=2,
                              episode_timeout_seconds=30) as batch:
        heard: list[bytes] = []
        with batch.session(0, timeout=60) as session:
            assert session.read_file("prepared") == b"warm\n"          # the pool's workspace
            session.write_file("solve.sh", b'echo "$EPISODE_INDEX $EPISODE_SAMPLE"; cat "$EPISODE_INPUT"; exit 3\n')
            result = session.run("sh solve.sh", on_output=lambda _, data: heard.append(data))
            assert result.exit_code == 3 and result.stdout == b'0 0\n{"q":"six times seven"}'
            assert b"".join(heard) == result.stdout
            assert session.run(["sh", "-c", "echo 42 > answer.txt"]).ok
            with pytest.raises(FileNotFoundError):
                session.read_file("nope")
        assert session.ended
        with pytest.raises(SessionOver):
            session.run("true")
        # episode 1: opened and left holding, as a crashed trainer would; its deadline ends it
        abandoned = batch.session(1, timeout=60)
        abandoned.write_file("answer.txt", b"42\n")
        rows = batch.wait(timeout=240)

    by_index = {row["index"]: row for row in rows}
    assert [by_index[i]["reward"] for i in (0, 1)] == [1.0, 1.0], rows
    assert "AgentTimedOut" not in (by_index[0].get("flags") or []) and by_index[0]["outcome"] == "succeeded"
    assert "AgentTimedOut" in by_index[1]["flags"] and by_index[1]["outcome"] == "succeeded"
    stats = by_index[0]["session"]
    assert stats["commands"] == 2 and stats["command_seconds"] > 0 and 0 <= stats["claim_seconds"] < 10
    # the results ConfigMap's own rows, as any reader sees them: the ended session's stats, none
    # for the one its deadline stopped (nobody ended it)
    written = {row["index"]: row for row in results(batch.name, namespace)["pods"]}
    assert written[0]["session"] == {"commands": 2, "command_seconds": stats["command_seconds"]}
    assert "session" not in written[1]
    batch.handle.delete()
    client.delete_pool(pool, wait=False)


def test_the_role_the_readme_gives_a_trainer_is_what_exec_needs(operator_process, namespace):
    client = Client(str(kubeconfig_path()), namespace=namespace)
    pool = unique("rpool")
    client.create_pool(pool, 0, task_files={"setup.sh": "true"}, verifier={})
    sandbox = wait_namespace(client, pool)
    trainer = Tenant(namespace, "trainer")
    assert not trainer.can("create", "pods/exec", sandbox)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "session-trainer", "namespace": sandbox},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                      {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}]}
    kubectl("apply", "-f", "-", input=json.dumps(role))
    kubectl("create", "rolebinding", "session-trainer", "--role=session-trainer", "-n", sandbox,
            f"--serviceaccount={namespace}:trainer")
    for verb, resource in (("get", "pods/exec"), ("create", "pods/exec"), ("list", "pods"), ("get", "pods")):
        assert trainer.can(verb, resource, sandbox), (verb, resource)
    assert not trainer.can("delete", "pods", sandbox)
    client.delete_pool(pool, wait=False)


def wait_namespace(client: Client, pool: str, timeout: float = 60) -> str:
    end = time.monotonic() + timeout
    while True:
        sandbox = (client.get_pool(pool).get("status") or {}).get("sandboxNamespace")
        if sandbox and kubectl("get", "namespace", sandbox, check=False).returncode == 0:
            return sandbox
        assert time.monotonic() < end, f"pool {pool} has no namespace yet"
        time.sleep(0.5)


SMALL = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}


def test_a_command_killed_by_sigkill_reports_its_own_time_at_once(operator_process, namespace):
    """A command that ends itself with SIGKILL (`kill -KILL $$`, what an OOM kill leaves) while
    the session holds: its 137 is its own, and so is its time. run() used to read the pod for up
    to 10 s on every 137 (in case the session's end had killed it) and count that wait as the
    command's: CommandResult.seconds and the row's session.command_seconds gained ~10 s."""
    client = Client(str(kubeconfig_path()), namespace=namespace)
    pool = unique("kpool")
    client.create_pool(pool, 1, task_files={"setup.sh": "true"}, verifier={}, resources=SMALL)
    client.wait_pool(pool, timeout=180)
    with client.open_sessions(pool, 1, verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 60},
                              episode_timeout_seconds=120) as batch:
        with batch.session(0, timeout=60) as session:
            started = time.monotonic()
            result = session.run("kill -KILL $$")
            took = time.monotonic() - started
            assert result.exit_code == 137               # the session still holds: the command's own code
            assert session.run("true").ok                # and it does hold
        rows = batch.wait(timeout=240)
    written = {row["index"]: row for row in results(batch.name, namespace)["pods"]}
    batch.handle.delete()
    client.delete_pool(pool, wait=False)
    # an exec of a trivial command takes ~0.1 s on the devcluster, and a 137 three round trips
    # (exec, the pod, the hold's check); the defect this guards against waited 10 s more
    # (END_SETTLE_SECONDS): 7 s leaves a loaded node's stalls room and still catches it
    assert took < 7 and result.seconds < 7, (took, result.seconds)
    assert written[0]["session"]["commands"] == 2 and written[0]["session"]["command_seconds"] < 7, written[0]
    assert rows[0]["session"]["command_seconds"] < 7, rows[0]["session"]


def test_a_command_the_deadline_cuts_off_is_session_over_not_its_137(operator_process, namespace):
    """The watchdog's kill at episodeTimeoutSeconds reaches a running command before the kubelet
    reports the agent container ended: the hold has ended by then, so run() reads the pod until it
    shows the end, and raises SessionOver, not exit code 137; the wait is not the command's time."""
    client = Client(str(kubeconfig_path()), namespace=namespace)
    pool = unique("dpool")
    client.create_pool(pool, 1, task_files={"setup.sh": "true"}, verifier={}, resources=SMALL)
    client.wait_pool(pool, timeout=180)
    with client.open_sessions(pool, 1, verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 60},
                              episode_timeout_seconds=10) as batch:
        session = batch.session(0, timeout=60)
        with pytest.raises(SessionOver, match="the session is over"):
            session.run("sleep 100")
        assert session.ended and session.stats.commands == 1 and session.stats.command_seconds < 15
        rows = batch.wait(timeout=240)
    batch.handle.delete()
    client.delete_pool(pool, wait=False)
    assert "AgentTimedOut" in rows[0]["flags"]


def test_a_command_that_reads_part_of_its_stdin_returns_when_it_exits(operator_process, namespace):
    """run(command, stdin=...) where the command stops reading early (`head -c 1`; a write_file
    refused at once, onto a directory): the command exits, but the runtime reports an exec's
    exit only once it copied all of its stdin, which no one read. run() hung until its timeout
    (by default until the session's deadline ended the episode: AgentTimedOut, the session lost)."""
    with one_session(namespace, "ipool") as session:
        started = time.monotonic()
        result = session.run("head -c 1", stdin=b"y" * 1_000_000, timeout=20)
        # well under its 20 s timeout (it took ~0.2 s; a loaded CI machine more)
        assert (result.exit_code, result.stdout) == (0, b"y") and time.monotonic() - started < 15
        assert session.run("wc -c", stdin=b"w" * 1_000_000).stdout.strip() == b"1000000"
        assert session.run("mkdir -p src").ok
        started = time.monotonic()
        with pytest.raises(IsADirectoryError):
            session.write_file("src", b"x" * 1_000_000, timeout=20)
        assert time.monotonic() - started < 15
        assert session.run("true").ok


# A process an agent's command leaves behind (env -i, setsid: no stop marker finds it): it waits for
# the hold to end, then writes its answer over and over.
RACER = (f'c={naming.CLAIM_MOUNT_PATH}; read -r h < "$c/session-hold"; while [ -e "/proc/$h" ]; do :; done; '
         'while :; do echo 42 1<> /workspace/answer.txt; done')


def graded_after(namespace: str, leave: list[str], episode_timeout: int = 120) -> tuple[dict, float]:
    """The row of a one-episode session whose agent ran the commands ``leave`` (each exits at once),
    after which the trainer wrote its last word (7) and ended it; and the seconds end() took."""
    client = Client(str(kubeconfig_path()), namespace=namespace)
    pool = unique("lpool")
    client.create_pool(pool, 1, task_files={"setup.sh": "true"}, verifier={}, resources=SMALL)
    client.wait_pool(pool, timeout=180)
    try:
        with client.open_sessions(pool, 1, verifier={"files": {"verify.py": VERIFY}, "timeoutSeconds": 60},
                                  episode_timeout_seconds=episode_timeout) as batch:
            session = batch.session(0, timeout=60)
            for command in leave:
                assert session.run(command, timeout=15).ok
            time.sleep(1)                                          # what they left starts
            session.write_file("answer.txt", b"7\n")
            assert session.read_file("answer.txt") == b"7\n"
            started = time.monotonic()
            session.end()
            ended = time.monotonic() - started
            batch.wait(timeout=240)
            row = {r["index"]: r for r in results(batch.name, namespace)["pods"]}[0]
            batch.handle.delete(wait=False)
    finally:
        client.delete_pool(pool, wait=False)
    return row, ended


def test_nothing_the_agent_left_running_changes_the_workspace_after_end(operator_process, namespace):
    """Two processes an agent's command leaves behind: RACER, and one that takes the FIFO's place to
    catch an end's line. A line on the FIFO ended the session, and both got their answer in before
    the launcher's kill (a hostile review's attack: reward 1.0 for the agent's 42 where the trainer
    left 7). end() now kills them with the hold: the verifier grades 7."""
    claim = naming.CLAIM_MOUNT_PATH
    thief = (f'c={claim}; mv "$c/session-end" "$c/.real" && mkfifo "$c/session-end" && '
             'read -r l < "$c/session-end"; echo 42 > /workspace/answer.txt; printf "end\\n" > "$c/.real"')
    row, _ = graded_after(namespace, [f"nohup env -i setsid /bin/sh -c '{left}' > /dev/null 2>&1 &"
                                      for left in (RACER, thief)])
    assert (row.get("extra") or {}).get("answer") == "7" and row.get("reward") == 0.0, row


def test_an_end_whose_fifo_the_agent_removed_still_ends_the_session(operator_process, namespace):
    """An agent's command removes the end's FIFO and leaves RACER behind: the end found no FIFO,
    said so and killed nothing, the hold ran to the episode's deadline and RACER then wrote its 42.
    The end now kills all the same; end() returns once the pod says the agent ended (not at the
    deadline, 300 s away), and the verifier grades the trainer's 7."""
    remover = (f"rm -f {naming.CLAIM_MOUNT_PATH}/session-end; "
               f"nohup env -i setsid /bin/sh -c '{RACER}' > /dev/null 2>&1 &")
    row, ended = graded_after(namespace, [remover], episode_timeout=300)
    assert ended < 60
    assert (row.get("extra") or {}).get("answer") == "7" and row.get("reward") == 0.0, row
