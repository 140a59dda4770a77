"""Trainer-driven sessions (sdk.sessions) on the API in memory (tests/support/memory_api.py): the
session batch built, a session found by its index, commands run (streamed, their exit codes and
the episode's variables), files, the end, the errors, and the asyncio twin.

The operator's part is played by hand: the pool's pod of each index is put in the pool's
namespace as the operator leaves it (claimed, handed its episode), and its exec handler runs the
commands for real with /bin/sh in a directory of the test (the workspace), except the end, which
ends the agent's container as the hold and its launcher would (core.sessions runs those for
real: tests/unit/core/test_sessions.py)."""
from __future__ import annotations

import asyncio
import errno
import os
import pathlib
import shutil
import tempfile
import threading
import time

import pytest

from rolloutbatch import sdk
from rolloutbatch.core import naming, sessions as core_sessions
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.pool_children import batch_pod_labels
from rolloutbatch.core.results import configmap_digest, encode_results
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.vocabulary import COMPLETION_INDEX_KEY
from rolloutbatch.kube.errors import Forbidden, Unavailable
from rolloutbatch.kube.pod_exec import ExecResult
from rolloutbatch.sdk import session_commands, sessions
from rolloutbatch.sdk.aio import AsyncClient
from tests.support import crd_schema
from tests.support.memory_api import AsyncMemoryApi, MemoryApi
from tests.support.runtime_exec import run_like_the_runtime

NS, POOL = "rl", "graded"
POOL_NS = naming.pool_namespace(NS, POOL)
VERIFIER = {"files": {"verify.sh": "exit 0"}, "command": ["sh", "/verifier/verify.sh"], "timeoutSeconds": 60}
INPUTS = [{"repo": "a"}, {"repo": "b"}]
BATCH_SPEC = crd_schema.openapi_schema()["properties"]["spec"]
CLAIMED = 1_800_000_000.0


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    for name in (NS, POOL_NS):
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return api


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(session_commands, "POLL_SECONDS", 0.01)   # where it is read


class Sandbox:
    """A pod's agent container: every exec run by /bin/sh in ``workspace``, its stdin copied whole
    as the runtime does (tests/support/runtime_exec.py), but the end, which ends the container as
    the hold's launcher would (once), and the look at the hold."""

    def __init__(self, api: MemoryApi, pod: str, workspace) -> None:
        self.api, self.pod, self.workspace = api, pod, workspace
        self.ends = 0
        self.stops: list[str] = []   # the markers of the commands stopped

    def __call__(self, command: list[str], stdin: bytes) -> ExecResult:
        if command[3:4] == ["rolloutbatch-end"]:
            self.ends += 1
            set_agent(self.api, self.pod, terminated=True)
            return ExecResult(exit_code=0, stdout=b"", stderr=b"")
        if command[3:4] == ["rolloutbatch-stop"]:   # kills by what it finds in /proc: never on this machine
            self.stops.append(command[4])
            return ExecResult(exit_code=0, stdout=b"0\n", stderr=b"")
        if command[3:4] == ["rolloutbatch-holding"]:   # the hold runs until its container ends
            agent = self.api.get_object("Pod", self.pod, POOL_NS)["status"]["containerStatuses"][0]
            return ExecResult(exit_code=1 if "terminated" in agent["state"] else 0, stdout=b"", stderr=b"")
        done = run_like_the_runtime(command, stdin, self.workspace)
        code = done.returncode
        return ExecResult(exit_code=code, stdout=done.stdout, stderr=done.stderr,
                          status={"status": "Success" if code == 0 else "Failure"})


def put_pod(api: MemoryApi, handle, index: int, *, name: str | None = None, delivered: bool = True,
            phase: str = "Running", workspace=None) -> str:
    """The pool's pod of ``index`` as the operator leaves it: claimed, started, handed its episode
    (its delivered-at annotation) or not yet."""
    ref = BatchRef(NS, handle.name, handle.uid)
    name = name or f"{POOL}-{index}x"
    annotations = {COMPLETION_INDEX_KEY: str(index), naming.POOLED_ANNOTATION: "true",
                   naming.ANNOTATION_CLAIMED_AT: f"{CLAIMED:.3f}"}
    if delivered:
        annotations[naming.ANNOTATION_DELIVERED_AT] = f"{CLAIMED + 0.25:.3f}"
    running = {"started": True, "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}
    api.put({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": name, "namespace": POOL_NS, "labels": batch_pod_labels(ref),
                          "annotations": annotations},
             "spec": {"nodeName": "n1",
                      "containers": [{"name": naming.AGENT_CONTAINER}, {"name": naming.VERIFIER_CONTAINER}]},
             "status": {"phase": phase, "containerStatuses": [{"name": naming.AGENT_CONTAINER, **running},
                                                              {"name": naming.VERIFIER_CONTAINER, **running}]}})
    if workspace is not None:
        api.set_exec(POOL_NS, name, Sandbox(api, name, workspace))
    return name


def set_agent(api: MemoryApi, pod: str, *, terminated: bool = False, phase: str | None = None) -> None:
    live = api.get_object("Pod", pod, POOL_NS)
    status = live["status"]
    if terminated:
        status["containerStatuses"][0] = {"name": naming.AGENT_CONTAINER, "started": False, "state": {
            "terminated": {"exitCode": 0, "message": '{"event":"agent_exit","exit_code":0,"timed_out":false}'}}}
    if phase:
        status["phase"] = phase
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{pod}/status", {"status": status}, "the kubelet")


def open_sessions(api: MemoryApi, **options) -> sdk.Sessions:
    client = sdk.Client(api=api, namespace=NS)
    options = {"inputs": INPUTS, "samples_per_input": 2, "episode_timeout_seconds": 300, "env": {"MODE": "fast"},
               **options}
    return client.open_sessions(POOL, 4, verifier=VERIFIER, **options)


# --- the session batch ---------------------------------------------------------------------------------
def test_open_sessions_creates_a_pooled_verified_batch_whose_episodes_hold(api):
    batch = open_sessions(api)
    stored = api.get_object("RolloutBatch", batch.name, NS)
    spec = stored["spec"]
    assert stored["metadata"]["name"].startswith("session-")
    assert spec["poolRef"] == {"name": POOL} and spec["verifier"] == VERIFIER
    assert spec["command"] == core_sessions.hold_command() and core_sessions.is_hold_command(spec["command"])
    assert spec["episodes"] == 4 and spec["inputs"] == INPUTS and spec["samplesPerInput"] == 2
    assert spec["episodeTimeoutSeconds"] == 300 and spec["env"] == [{"name": "MODE", "value": "fast"}]
    assert crd_schema.errors(spec, BATCH_SPEC) == []
    assert parse_spec(spec).verifier is not None


@pytest.mark.parametrize("options, said", [
    (dict(verifier=None), "needs a verifier"),
    (dict(command=["python", "agent.py"]), "the hold"),
    (dict(episode_timout_seconds=5), "unknown field"),
    (dict(image="python:3.12"), "is the pool's"),
    (dict(verifier={**VERIFIER, "image": "grader:1"}), "spec.verifier.image"),
])
def test_what_a_session_batch_cannot_be_is_refused_before_any_call(api, options, said):
    options = {"verifier": VERIFIER, **options}
    with pytest.raises(ValueError, match=said):
        sdk.build_sessions(POOL, 4, **options)
    assert api.list_objects("RolloutBatch") == []


def test_a_batch_that_is_not_a_session_batch_has_no_sessions(api):
    client = sdk.Client(api=api, namespace=NS)
    handle = client.submit(sdk.build_batch("step-", None, 2, pool=POOL, command=["python", "run.py"]))
    with pytest.raises(ValueError, match="not a session batch"):
        sdk.Sessions(handle)


# --- finding a session --------------------------------------------------------------------------------
def test_a_session_is_its_indexs_pod_once_it_holds(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 2, workspace=tmp_path)
    put_pod(api, batch.handle, 3, delivered=False)
    other = sdk.Client(api=api, namespace=NS).submit(sdk.build_sessions(POOL, 4, verifier=VERIFIER))
    put_pod(api, other, 1, name="not-ours")                 # another batch's index 1

    session = batch.session(2, timeout=5)
    assert (session.index, session.pod, session.ended) == (2, pod, False)
    assert session.stats.claim_seconds == 0.25 and session.stats.ready_seconds >= 0
    with pytest.raises(TimeoutError, match=r"episode 3 .* not yet handed its episode.*kubectl get rp graded"):
        batch.session(3, timeout=0.1)
    with pytest.raises(TimeoutError, match="no pod yet"):
        batch.session(1, timeout=0.1)
    with pytest.raises(ValueError, match="not in 0..3"):
        batch.session(4)
    with pytest.raises(ValueError, match="not in 0..3"):
        batch.session(True)          # a bool is no episode index
    for timeout in (float("nan"), float("inf"), -1, "5"):
        with pytest.raises(ValueError, match="finite number of seconds"):
            batch.session(2, timeout=timeout)


def test_a_pod_evicted_before_its_episode_is_waited_past_to_its_retry(api, tmp_path):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, name="first", delivered=False, phase="Failed")

    def retried():    # the Job's next pod for the index, handed its episode
        put_pod(api, batch.handle, 0, name="second", workspace=tmp_path)
    api.meanwhile("GET", "Pod", retried, when=lambda path: path.endswith("/pods"))
    assert batch.session(0, timeout=5).pod == "second"


def test_a_session_that_ended_or_a_batch_that_did_says_so(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0, workspace=tmp_path)
    set_agent(api, pod, terminated=True)
    with pytest.raises(sdk.SessionOver, match="agent container .* ended"):
        batch.session(0)
    api.merge_patch(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NS}/rolloutbatches/{batch.name}/status",
                    {"status": {"phase": "Failed", "message": "PoolConflict"}}, "the operator")
    started = time.monotonic()
    with pytest.raises(sdk.SessionOver, match=r"never opened: the batch ended \(Failed: PoolConflict\)"):
        batch.session(1, timeout=30)
    assert time.monotonic() - started < 5
    api.delete(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NS}/rolloutbatches/{batch.name}", "a user")
    with pytest.raises(sdk.SessionOver, match="the batch was deleted"):
        batch.session(1, timeout=30)


# --- running commands ----------------------------------------------------------------------------------
def test_run_in_the_agent_container_with_the_episodes_variables_and_its_exit_code(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 3, workspace=tmp_path)
    session = batch.session(3)
    heard = []
    result = session.run('echo "$EPISODE_INDEX $EPISODE_GROUP $EPISODE_SAMPLE $BATCH_NAME $EPISODE_INPUT $MODE"; '
                         'echo oops >&2; exit 3', on_output=lambda stream, data: heard.append((stream, data)))
    assert result.exit_code == 3 and not result.ok and result.seconds > 0
    assert result.stdout == f"3 1 1 {batch.name} {naming.CLAIM_MOUNT_PATH}/input.json fast\n".encode()
    assert result.stderr == b"oops\n" and heard == [("stdout", result.stdout), ("stderr", b"oops\n")]
    namespace, where, container, command, _ = api.execs[-1]
    assert (namespace, where, container) == (POOL_NS, pod, naming.AGENT_CONTAINER)
    assert command[:5] == core_sessions.marked_command([], command[4])   # stopped by it past its timeout
    assert command[5] == "env" and command[-3:-1] == ["/bin/sh", "-c"]
    # a list runs as it is, with stdin, in the workspace
    listed = session.run(["sh", "-c", 'cat; pwd'], stdin=b"in\n")
    assert listed.ok and listed.stdout == f"in\n{tmp_path}\n".encode()
    assert session.stats.commands == 2
    assert session.stats.command_seconds == pytest.approx(result.seconds + listed.seconds, abs=1e-3)
    with pytest.raises(ValueError, match="holds '='"):
        session.run(["A=1", "true"])


def test_output_past_the_limit_is_cut_and_said(api, tmp_path):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    result = batch.session(0).run("head -c 5000 /dev/zero", limit_bytes=1000)
    assert len(result.stdout) == 1000 and result.stdout_truncated


def test_files_are_written_and_read_in_the_workspace(api, tmp_path):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    data = bytes(range(256)) * 10
    session.write_file("src/fix.py", data)
    assert (tmp_path / "src" / "fix.py").read_bytes() == data
    assert session.read_file("src/fix.py") == data
    with pytest.raises(FileNotFoundError, match="no such file: nope.txt in episode 0"):
        session.read_file("nope.txt")
    with pytest.raises(IsADirectoryError):
        session.read_file("src")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(sdk.SessionError, match="not a regular file .*: pipe in episode 0"):
        session.read_file("pipe")
    with pytest.raises(sdk.SessionError, match="larger than max_bytes"):
        session.read_file("src/fix.py", max_bytes=100)
    with pytest.raises(ValueError, match="more than one exec carries"):
        session.write_file("big", b"x" * (sessions.MAX_FILE_BYTES + 1))
    with pytest.raises(TypeError):
        session.write_file("text", ["not bytes"])


def test_a_path_longer_than_any_system_call_takes_is_refused_before_any_exec(api, tmp_path):
    """A hostile review: read_file's walk up a 130,000-character path took 51 s in the sandbox."""
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    for verb in (lambda p: session.read_file(p), lambda p: session.write_file(p, b"x")):
        with pytest.raises(ValueError, match="longer than any system call takes"):
            verb("a/" * 2048)
    with pytest.raises(FileNotFoundError):
        session.read_file("a/" * 2000 + "x")    # within PATH_MAX: asked, and answered


def test_write_file_given_text_says_to_encode_it_in_both_clients(api, tmp_path):
    """README's `s.write_file("patch.diff", diff)` with a str diff: a TypeError that says what to pass."""
    said = r"write_file takes the file's bytes, not str: encode text first, e.g. write_file\(path, text.encode\(\)\)"
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    with pytest.raises(TypeError, match=said):
        batch.session(0).write_file("patch.diff", "diff --git a/x b/x\n")

    async def main():
        client = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
        batch = await client.open_sessions(POOL, 2, verifier=VERIFIER, inputs=[{"q": 1}], samples_per_input=2)
        put_pod(api, batch.handle, 0, name="async-0x", workspace=tmp_path)
        session = await batch.session(0)
        await session.write_file("patch.diff", "diff --git a/x b/x\n")
    with pytest.raises(TypeError, match=said):
        asyncio.run(main())
    assert not (tmp_path / "patch.diff").exists()


def test_write_file_through_a_symlink_writes_the_file_it_names(api, tmp_path):
    """The link was replaced by a regular file while the file it names kept its old bytes: read_file
    through the link showed the edit, the verifier graded the old content."""
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "settings.py").write_bytes(b"DEBUG = False\n")
    os.symlink("conf/settings.py", tmp_path / "settings.py")       # a repo's link to its config
    session.write_file("settings.py", b"DEBUG = True\n")
    assert session.read_file("settings.py") == b"DEBUG = True\n"
    assert (tmp_path / "settings.py").is_symlink(), "write_file replaced the symlink with a regular file"
    assert (tmp_path / "conf" / "settings.py").read_bytes() == b"DEBUG = True\n"
    os.symlink("missing/x.py", tmp_path / "deep")
    with pytest.raises(sdk.SessionError, match="cannot follow the symbolic link deep"):
        session.write_file("deep", b"x")
    os.symlink("conf", tmp_path / "dirlink")
    with pytest.raises(IsADirectoryError, match="a directory, not a file: dirlink"):
        session.write_file("dirlink", b"x")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv (a second user)")
def test_a_file_the_sandbox_user_cannot_reach_is_a_permission_error(api):
    """Not FileNotFoundError (a new user's review: /root/.bashrc was "no such file"): the reads
    run as uid 1000, as the pool's pods do."""
    top = pathlib.Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        top.chmod(0o755)
        (top / "shut").mkdir(mode=0o700)
        (top / "shut" / "f").write_text("x")
        batch = open_sessions(api)
        pod = put_pod(api, batch.handle, 0, workspace=top)
        sandbox = Sandbox(api, pod, top)

        def as_the_user(command: list[str], stdin: bytes) -> ExecResult:
            if command[3:4] != ["rolloutbatch-read"]:
                return sandbox(command, stdin)
            done = run_like_the_runtime(["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", *command],
                                        stdin, top)
            return ExecResult(exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr)
        api.set_exec(POOL_NS, pod, as_the_user)
        session = batch.session(0)
        with pytest.raises(PermissionError, match="permission denied: shut cannot be searched: shut/f in episode 0"):
            session.read_file("shut/f")
        with pytest.raises(FileNotFoundError):
            session.read_file("nope.txt")
        # through a symbolic link: the user cannot reach its target (a hostile review: "no such file")
        os.symlink("shut/f", top / "into-shut")
        with pytest.raises(PermissionError, match="into-shut is a symbolic link to where the user cannot reach"):
            session.read_file("into-shut")
        # links that loop: Python's own open says ELOOP, not "no such file"
        os.symlink("loop-b", top / "loop-a")
        os.symlink("loop-a", top / "loop-b")
        with pytest.raises(OSError, match="the symbolic links loop: loop-a") as looped:
            session.read_file("loop-a")
        assert looped.value.errno == errno.ELOOP and not isinstance(looped.value, FileNotFoundError)
        os.symlink("gone", top / "dangling")
        with pytest.raises(FileNotFoundError):
            session.read_file("dangling")
    finally:
        shutil.rmtree(top)


# --- the end -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", ["write_file", "read_file"])
def test_a_directory_given_to_a_file_verb_is_an_is_a_directory_error_the_readme_names(api, tmp_path, verb):
    # Python's own, as read_file's FileNotFoundError: the README's errors sentence must name it,
    # or a trainer's `except (KubeError, FileNotFoundError)` around its tool calls misses it
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    (tmp_path / "src").mkdir()
    with pytest.raises(IsADirectoryError, match="a directory, not a file: src"):
        session.write_file("src", b"x") if verb == "write_file" else session.read_file("src")
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    errors = readme.split("\nErrors: all but", 1)[1].split("KubeError", 1)[0]
    assert "`IsADirectoryError` (`write_file`, `read_file`)" in " ".join(errors.split())
    assert "| `IsADirectoryError` | a session's `write_file`, `read_file` |" in readme


def test_end_ends_once_and_nothing_runs_after_it(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 1, workspace=tmp_path)
    sandbox = api.exec_handlers[(POOL_NS, pod)]
    with batch.session(1) as session:
        assert session.run("true").ok
    assert sandbox.ends == 1 and session.ended
    execs = len(api.execs)
    session.end()                                       # idempotent: no exec
    with pytest.raises(sdk.SessionOver, match="end\\(\\) was called"):
        session.run("true")
    assert len(api.execs) == execs and sandbox.ends == 1
    assert api.execs[-1][3] == core_sessions.end_command()
    with pytest.raises(sdk.SessionOver):                # and the index's session cannot be opened again
        batch.session(1)



def test_end_records_the_sessions_stats_on_the_batch_for_its_row(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 1, workspace=tmp_path)
    with batch.session(1) as session:
        session.run("true")
        session.run("true")
    annotations = api.get_object("RolloutBatch", batch.name, NS)["metadata"]["annotations"]
    assert core_sessions.stats_of(annotations, 1, pod) == {"commands": 2,
                                                           "command_seconds": session.stats.command_seconds}
    assert core_sessions.stats_of(annotations, 0, pod) is None


def test_stats_refused_by_the_api_are_a_warning_and_the_session_still_ends(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 1, workspace=tmp_path)
    sandbox = api.exec_handlers[(POOL_NS, pod)]
    session = batch.session(1)
    api.fail("PATCH", "RolloutBatch", Forbidden("rolloutbatches is forbidden", status=403, reason="Forbidden"))
    with pytest.warns(RuntimeWarning, match="session stats of episode 1 were not recorded.*its row has none"):
        session.end()
    assert sandbox.ends == 1 and session.ended

@pytest.mark.parametrize("answer", ["killed", "container gone"])
def test_a_command_the_deadline_cut_off_is_session_over_though_the_kubelet_says_so_late(api, monkeypatch, answer):
    """The watchdog's kill reaches a running command (137), or the next exec finds the agent
    container gone, before the kubelet reports the container ended: the pod is read again for a
    while, and the answer is SessionOver, not exit code 137 nor Unavailable."""
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 5)
    monkeypatch.setattr(session_commands, "POLL_SECONDS", 0.05)
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    session = batch.session(0)

    reads: list[int] = []

    def cut_off(command, stdin):
        reads.append(0)    # from now on the pod's reads are counted
        if answer == "killed":
            return ExecResult(exit_code=137, stdout=b"", stderr=b"")
        raise Unavailable('container not found ("agent")', status=500)
    api.set_exec(POOL_NS, pod, cut_off)

    def of_this_pod(path: str) -> bool:
        return path.endswith(f"/pods/{pod}")

    def reported_on_the_third_read_after_the_exec():
        # one race per read (every race registered fires on the next read): it registers the next
        if reads:
            reads.append(1)
            if len(reads) == 4:
                set_agent(api, pod, terminated=True)
                return
        api.meanwhile("GET", "Pod", reported_on_the_third_read_after_the_exec, when=of_this_pod)
    api.meanwhile("GET", "Pod", reported_on_the_third_read_after_the_exec, when=of_this_pod)
    with pytest.raises(sdk.SessionOver, match="agent container .* ended"):
        session.run("sleep 100")
    assert len(reads) == 4   # read again after the exec until the pod showed the end, then no more


def test_a_session_ended_by_its_deadline_raises_session_over_and_ends_quietly(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    set_agent(api, pod, terminated=True, phase="Succeeded")   # the watchdog, then the verifier, ended it
    with pytest.raises(sdk.SessionOver, match="the session is over: its pod .* ended \\(Succeeded\\)"):
        session.run("true")
    session.end()                                       # nothing left to end: no error
    assert session.ended


def test_a_session_whose_pod_was_lost_says_so_and_is_no_end(api, tmp_path):
    """Evicted while open: nothing of it is graded and the Job runs the index again on a new pod.
    run() and end() raise SessionLost (a SessionOver), never a quiet end the trainer would take for
    a graded episode; session(i) then opens the retry."""
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    live = api.get_object("Pod", pod, POOL_NS)["status"]
    live.update(conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}])
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{pod}/status", {"status": live}, "the eviction")
    api.set_exec(POOL_NS, pod, lambda command, stdin: ExecResult(exit_code=None, stdout=b"", stderr=b"",
                                                                 status={"message": "container not found"}))
    with pytest.raises(sdk.SessionLost, match="was lost .* open that with session\\(0\\)"):
        session.run("true")
    session.end()                                       # said once, by run(): a later end() is quiet
    assert session.ended and isinstance(sdk.SessionLost("x"), sdk.SessionOver)
    with pytest.raises(TimeoutError):
        batch.session(0, timeout=0.3)   # the evicted pod, still ending, is passed over for the retry
    other = put_pod(api, batch.handle, 1, workspace=tmp_path)
    lost = batch.session(1)
    live = api.get_object("Pod", other, POOL_NS)["status"]
    live.update(phase="Failed", conditions=[{"type": "DisruptionTarget", "status": "True",
                                             "reason": "DeletionByTaintManager"}])
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{other}/status", {"status": live}, "the node's loss")
    with pytest.raises(sdk.SessionLost):
        lost.end()
    retry = put_pod(api, batch.handle, 1, name="graded-1-retry")
    assert batch.session(1, timeout=5).pod == retry


def test_an_end_that_the_launcher_killed_still_ended_the_session(api, monkeypatch):
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 0.2)
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    # the hold exited, the launcher's kill -KILL -1 took the end's exec too; the kubelet reports
    # the agent container ended a moment later
    api.set_exec(POOL_NS, pod, lambda command, stdin: ExecResult(exit_code=137, stdout=b"", stderr=b""))
    session = batch.session(0)
    reads = []

    def reported_on_the_second_read():
        reads.append(1)
        if len(reads) == 2:
            set_agent(api, pod, terminated=True)
    for _ in range(2):
        api.meanwhile("GET", "Pod", reported_on_the_second_read, when=lambda path: path.endswith(f"/pods/{pod}"))
    session.end()
    assert session.ended and len(reads) == 2
    # one that never shows the agent ended is an error, after a bounded wait
    other = put_pod(api, batch.handle, 1)
    api.set_exec(POOL_NS, other, lambda command, stdin: ExecResult(exit_code=137, stdout=b"", stderr=b"killed"))
    with pytest.raises(sdk.SessionError, match="failed \\(exit code 137\\): killed"):
        batch.session(1).end()


def test_an_end_where_nothing_holds_and_nothing_ends_is_an_error(api, monkeypatch):
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 0.2)
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    api.set_exec(POOL_NS, pod, lambda command, stdin: ExecResult(core_sessions.NOT_HOLDING, b"", b"no session"))
    with pytest.raises(sdk.SessionError, match="cannot be ended: its session.s end FIFO is gone"):
        batch.session(0).end()


def test_an_end_whose_fifo_the_session_removed_ends_it_once_the_pod_says_so(api, monkeypatch):
    """The end kills the session's processes even when its FIFO is gone (core.sessions): the
    kubelet reports the agent container ended a moment later, and end() returns."""
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 5)
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)

    def removed(command, stdin):
        threading.Timer(0.3, set_agent, (api, pod), {"terminated": True}).start()
        return ExecResult(core_sessions.NOT_HOLDING, b"", b"no session FIFO in this container")
    api.set_exec(POOL_NS, pod, removed)
    session = batch.session(0)
    session.end()
    assert session.ended


def test_leaving_the_batch_ends_every_session_still_holding(api, tmp_path):
    with open_sessions(api) as batch:
        opened = put_pod(api, batch.handle, 0, workspace=tmp_path)
        never_opened = put_pod(api, batch.handle, 1, workspace=tmp_path)
        ended = put_pod(api, batch.handle, 2, workspace=tmp_path)
        put_pod(api, batch.handle, 3, delivered=False, workspace=tmp_path)
        batch.session(0).run("true")
        set_agent(api, ended, terminated=True)
    ends = {pod: api.exec_handlers[(POOL_NS, pod)].ends for pod in (opened, never_opened, ended)}
    assert ends == {opened: 1, never_opened: 1, ended: 0}
    assert not [e for e in api.execs if e[1] == f"{POOL}-3x"]


def test_wait_returns_the_rows_with_each_opened_sessions_stats(api, tmp_path, monkeypatch):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0, workspace=tmp_path)
    with batch.session(0) as session:
        session.run("true")
    rows = [{"index": 0, "pod": pod, "reward": 1.0}, {"index": 1, "pod": "other", "reward": 0.0}]
    data, _ = encode_results({"uid": batch.handle.uid, "pods": rows})
    head = api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{batch.name}-results",
                                                                          "namespace": NS}, "data": data})
    final = {"phase": "Succeeded", "resultsDigests": {head["metadata"]["name"]: configmap_digest(head)}}
    api.merge_patch(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NS}/rolloutbatches/{batch.name}/status",
                    {"status": final}, "the operator")
    monkeypatch.setattr(batch.handle, "wait", lambda timeout: batch.handle.refresh())
    got = batch.wait(timeout=5)
    assert got[0]["session"] == {"commands": 1, "command_seconds": session.stats.command_seconds,
                                 "claim_seconds": 0.25, "ready_seconds": session.stats.ready_seconds}
    assert "session" not in got[1] and got[1]["reward"] == 0.0


# --- errors ---------------------------------------------------------------------------------------------
def test_a_forbidden_exec_names_the_rights_a_trainer_needs(api, tmp_path):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    api.fail("POST", "Pod", Forbidden('pods "x" is forbidden: User "trainer" cannot create resource "pods/exec"',
                                      status=403, reason="Forbidden"), when=lambda path: path.endswith("/exec"))
    with pytest.raises(sdk.ExecForbidden, match=f"get and create on pods/exec .* {POOL_NS}") as refused:
        session.run("true")
    assert isinstance(refused.value, sdk.Forbidden) and refused.value.status == 403
    api.fail("GET", "Pod", Forbidden("pods is forbidden", status=403, reason="Forbidden"))
    with pytest.raises(sdk.ExecForbidden, match="get and list on pods"):
        batch.session(1)


def test_a_forbidden_read_of_the_sessions_pod_names_the_rights_too(api, tmp_path):
    """A command killed by a signal is checked against the pod (was it the session's end?): a
    trainer without get on pods is told which rights it needs, not handed the raw refusal."""
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    api.fail("GET", "Pod", Forbidden("pods is forbidden", status=403, reason="Forbidden"))
    with pytest.raises(sdk.ExecForbidden, match=f"get and list on pods.* {POOL_NS}"):
        session.run("exit 137")   # as a killed process exits


def hangs(api: MemoryApi, pod: str, stopped: ExecResult | Exception | None = None) -> None:
    """The pod's execs never answer (a command that hangs, or a FIFO the sandbox holds), but the
    stop of a command past its timeout, which answers ``stopped``."""
    async def never(command, stdin):
        if command[3:4] == ["rolloutbatch-stop"]:
            if isinstance(stopped, Exception):
                raise stopped
            return stopped or ExecResult(exit_code=0, stdout=b"2\n", stderr=b"")
        await asyncio.sleep(10)
    api.set_exec(POOL_NS, pod, never)


def test_an_exec_that_times_out_says_so_and_counts_with_its_time(api):
    batch = open_sessions(api)
    hangs(api, put_pod(api, batch.handle, 0))
    session = batch.session(0)
    with pytest.raises(sdk.TimedOut, match="no exit status within 0.2s"):
        session.run("sleep 100", timeout=0.2)
    assert session.stats.commands == 1 and session.stats.command_seconds >= 0.2   # it ran, for its timeout
    assert session.stats.command_seconds < 1   # not the stop's exec after it


def test_a_command_past_its_timeout_is_stopped_in_the_sandbox_before_timed_out(api):
    """Closing the exec's stream leaves the command running: it could change the workspace the
    verifier grades after the trainer moved on. It runs marked, and its marker's processes are
    killed (core.sessions.stop_command, run by real shells in tests/unit/core/test_session_stop.py)
    before TimedOut, which says so."""
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    hangs(api, pod)
    session = batch.session(0)
    with pytest.raises(sdk.TimedOut, match=r"no exit status within 0.2s; it was stopped: its processes in the "
                                           r"sandbox were killed \(2\)"):
        session.run("sleep 100", timeout=0.2, stdin=b"in")
    ran, stop = api.execs[-2][3], api.execs[-1][3]
    assert ran[:5] == core_sessions.marked_command([], ran[4]) and len(ran[4]) == 32
    assert ran[5:8] == ["/bin/sh", "-c", core_sessions._DRAINED]   # the marker is on the whole exec
    assert stop == core_sessions.stop_command(ran[4])
    with pytest.raises(sdk.TimedOut):
        session.run("sleep 100", timeout=0.2)
    assert api.execs[-2][3][4] != ran[4]   # a marker per command
    # a stop that failed says the command may still run
    hangs(api, pod, ExecResult(exit_code=1, stdout=b"9\n", stderr=b""))
    with pytest.raises(sdk.TimedOut, match=r"stopping it failed \(exit code 1: 9 killed\): it may still run"):
        session.run("sleep 100", timeout=0.2)
    hangs(api, pod, Unavailable("no route", status=503))
    with pytest.raises(sdk.TimedOut, match=r"stopping it failed \(.*no route.*\): it may still run in the sandbox, "
                                           "unless the session ended"):
        session.run("sleep 100", timeout=0.2)
    assert session.stats.commands == 4


def test_a_command_that_ends_in_time_is_marked_and_nothing_is_stopped(api, tmp_path):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    result = session.run(f'echo "${core_sessions.COMMAND_MARKER}"; exit 4')
    assert result.exit_code == 4 and len(result.stdout) == 33
    assert api.exec_handlers[(POOL_NS, pod)].stops == [] and len(api.execs) == 1


def test_files_take_a_timeout_as_run_does(api, tmp_path):
    """The README's TimedOut "past its timeout" for write_file and read_file: theirs was the core's
    fixed 60 s, which a 16 MiB file on a slow link could not raise (a TypeError)."""
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    session.write_file("big.bin", b"x" * 10, timeout=600)
    assert session.read_file("big.bin", timeout=600) == b"x" * 10
    for timeout in (float("nan"), float("inf"), 0, -1, True):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds, above 0"):
            session.write_file("big.bin", b"y", timeout=timeout)
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds, above 0"):
            session.read_file("big.bin", timeout=timeout)
    assert (tmp_path / "big.bin").read_bytes() == b"x" * 10
    hangs(api, put_pod(api, batch.handle, 1))
    stuck = batch.session(1)
    with pytest.raises(sdk.TimedOut, match="no exit status within 0.2s"):
        stuck.write_file("a.txt", b"A", timeout=0.2)
    with pytest.raises(sdk.TimedOut, match="no exit status within 0.2s"):
        stuck.read_file("a.txt", timeout=0.2)


def test_the_async_session_files_take_a_timeout_too(api, tmp_path):
    async def main():
        client = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
        batch = await client.open_sessions(POOL, 2, verifier=VERIFIER, inputs=[{"q": 1}], samples_per_input=2)
        put_pod(api, batch.handle, 0, workspace=tmp_path)
        session = await batch.session(0)
        await session.write_file("a.txt", b"A", timeout=600)
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds"):
            await session.read_file("a.txt", timeout=float("nan"))
        return await session.read_file("a.txt", timeout=600)
    assert asyncio.run(main()) == b"A"


def test_the_blocking_client_runs_inside_a_running_event_loop(api, tmp_path):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)

    async def in_a_notebook():
        return session.run("echo hi").stdout
    assert asyncio.run(in_a_notebook()) == b"hi\n"


# --- asyncio --------------------------------------------------------------------------------------------
def test_the_async_client_opens_runs_and_ends_sessions_alike(api, tmp_path):
    async def main():
        client = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
        batch = await client.open_sessions(POOL, 2, verifier=VERIFIER, inputs=[{"q": 1}], samples_per_input=2)
        pod = put_pod(api, batch.handle, 1, workspace=tmp_path)
        async with batch:
            async with await batch.session(1) as session:
                heard = []
                result = await session.run("echo $EPISODE_INDEX $EPISODE_SAMPLE",
                                           on_output=lambda _, data: heard.append(data))
                await session.write_file("a.txt", b"A")
                assert await session.read_file("a.txt") == b"A"
                with pytest.raises(FileNotFoundError):
                    await session.read_file("b.txt")
            with pytest.raises(sdk.SessionOver):
                await session.run("true")
            with pytest.raises(TimeoutError):
                await batch.session(0, timeout=0.05)
        return batch, pod, result, heard, session
    batch, pod, result, heard, session = asyncio.run(main())
    assert result.stdout == b"1 1\n" and heard == [b"1 1\n"]
    assert api.get_object("RolloutBatch", batch.name, NS)["spec"]["command"] == core_sessions.hold_command()
    assert api.exec_handlers[(POOL_NS, pod)].ends == 1 and session.stats.commands == 1


# --- from an attack review: what the session's own commands say is not trusted (each failed before) ----
@pytest.mark.parametrize("said", [core_sessions.ENDED, core_sessions.ALREADY_ENDED])
def test_an_end_is_confirmed_by_the_pod_not_by_what_the_sandbox_said(api, monkeypatch, said):
    """Whatever the end says (the session's commands can forge the hold's marker), an end the pod
    does not confirm (its agent container still runs) is an error, bounded."""
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 0.2)
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    api.set_exec(POOL_NS, pod, lambda command, stdin: ExecResult(said, b"", b""))
    session = batch.session(0)
    with pytest.raises(sdk.SessionError, match="did not end: its agent container still runs"):
        session.end()


def test_an_evicted_pod_of_an_index_is_passed_over_for_its_retry(api):
    batch = open_sessions(api)
    evicted = put_pod(api, batch.handle, 0, name="graded-0-old")
    live = api.get_object("Pod", evicted, POOL_NS)["status"]
    live.update(phase="Failed", conditions=[{"type": "DisruptionTarget", "status": "True",
                                             "reason": "PreemptionByScheduler"}])
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{evicted}/status", {"status": live}, "the kubelet")
    with pytest.raises(TimeoutError):
        batch.session(0, timeout=0.3)                   # waits for the retry, not SessionOver
    retry = put_pod(api, batch.handle, 0, name="graded-0-new")
    assert batch.session(0, timeout=5).pod == retry


def test_a_session_of_inputs_by_reference_gets_its_input_file_too():
    """submit() moves inputs too large for the object into ConfigMaps (spec.inputsFrom); the
    operator hands those over as it hands spec.inputs, so the session's commands need the path."""
    batch = {"metadata": {"name": "b", "namespace": NS},
             "spec": {"samplesPerInput": 2, "inputsFrom": {"configMaps": ["b-in-x-0"], "count": 2}}}
    env = dict(sessions.episode_env(batch, 3))
    assert env["EPISODE_INPUT"] == f"{naming.CLAIM_MOUNT_PATH}/input.json"
    assert (env["EPISODE_GROUP"], env["EPISODE_SAMPLE"]) == ("1", "1")
    assert "EPISODE_INPUT" not in dict(sessions.episode_env({"metadata": {"name": "b"}, "spec": {}}, 0))


# --- what a hostile sandbox or a careless trainer does to a session --------------------------------------
def test_a_session_opened_twice_is_one_session_with_one_count(api, tmp_path):
    """Two tasks (or a retry loop) opening one episode get the session already open on its pod:
    its commands are counted once, and the end writes them all into the row."""
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 1, workspace=tmp_path)
    first, second = batch.session(1), batch.session(1)
    first.run("true")
    second.run("true")
    second.end()
    first.end()
    annotations = api.get_object("RolloutBatch", batch.name, NS)["metadata"]["annotations"]
    assert core_sessions.stats_of(annotations, 1, pod)["commands"] == 2 and first.stats.commands == 2


@pytest.mark.parametrize("verb", ["run", "write_file", "read_file"])
def test_a_verb_the_sessions_end_killed_is_no_result_of_the_verb(api, tmp_path, verb):
    """The deadline's (or the end's) `kill -KILL -1` kills the running command, or the file verb's
    exec: its 137 says the session is over, not what the tool did."""
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)

    def killed_by_the_deadline(command, stdin):
        set_agent(api, pod, terminated=True)
        return ExecResult(exit_code=137, stdout=b"", stderr=b"")
    api.set_exec(POOL_NS, pod, killed_by_the_deadline)
    verbs = {"run": lambda: session.run("sleep 100"), "write_file": lambda: session.write_file("patch.diff", b"diff"),
             "read_file": lambda: session.read_file("out.txt")}
    with pytest.raises(sdk.SessionOver, match="cut off \\(exit code 137\\).*the session is over"):
        verbs[verb]()
    assert session.ended
    if verb == "run":
        assert session.stats.commands == 1   # it ran, until it was cut off


def test_a_command_that_exits_137_while_the_session_holds_is_its_own_result(api, tmp_path):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    assert batch.session(0).run("exit 137").exit_code == 137   # as a command OOM-killed does


def test_a_command_killed_by_sigkill_while_the_session_holds_returns_at_once_with_its_own_time(
        api, tmp_path, monkeypatch):
    """`kill -KILL $$` (what an OOM kill of a tool leaves) while the hold runs. Before, every 137
    read the pod again for END_SETTLE_SECONDS (10 s) in case the session's end had killed it, and
    counted that wait as the command's time (CommandResult.seconds, the row's command_seconds).
    Now one look at the hold says the session holds: the 137 is the command's, at once."""
    # its real 10 s: the bounds below leave a loaded machine's stalls room and still tell the wait apart
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 10)
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    started = time.monotonic()
    result = session.run("kill -KILL $$")
    assert result.exit_code == 137 and time.monotonic() - started < 5
    assert result.seconds < 5 and session.stats.commands == 1 and session.stats.command_seconds < 5
    assert session.run("true").ok and not session.ended


def test_a_command_the_deadline_cut_off_counts_its_exec_not_the_wait_for_the_kubelet(api, monkeypatch):
    """The deadline's kill (137, the hold gone) is SessionOver once the pod shows the end, which
    the kubelet reports late: the reads meanwhile are no time of the command's (they were)."""
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 5)
    monkeypatch.setattr(session_commands, "POLL_SECONDS", 0.1)
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    session = batch.session(0)
    killed_at: list[float] = []

    def killed(command, stdin):
        killed_at.append(time.monotonic())
        return ExecResult(exit_code=1 if command[3:4] == ["rolloutbatch-holding"] else 137, stdout=b"", stderr=b"")
    api.set_exec(POOL_NS, pod, killed)

    def reported_late():   # each read of the pod, until the kubelet reports the end 0.4 s after the kill
        if killed_at and time.monotonic() - killed_at[0] >= 0.4:
            set_agent(api, pod, terminated=True)
        else:
            api.meanwhile("GET", "Pod", reported_late, when=lambda path: path.endswith(f"/pods/{pod}"))
    reported_late()
    with pytest.raises(sdk.SessionOver, match="cut off \\(exit code 137\\).*agent container .* ended"):
        session.run("sleep 100")
    assert time.monotonic() - killed_at[0] >= 0.4     # the pod was read again, a while
    assert session.stats.commands == 1 and session.stats.command_seconds < 0.2


def test_a_command_that_reads_part_of_its_stdin_returns_when_it_exits(api, tmp_path):
    """`head -c 1` given 1 MB, or a write refused before it read its data: the command exits at
    once, but the runtime reports an exec's exit only once it copied all of its stdin, and the
    rest was never read. run() hung until its timeout (by default until the session's deadline
    ended the episode, AgentTimedOut); write_file too. The command's stdin is now read whole."""
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    result = session.run("head -c 1", stdin=b"y" * 1_000_000, timeout=20)
    assert (result.exit_code, result.stdout) == (0, b"y")
    assert session.run("head -c 2; exit 3", stdin=b"z" * 1_000_000).exit_code == 3
    assert session.run("wc -c", stdin=b"w" * 1_000_000).stdout.strip() == b"1000000"   # read whole, as before
    (tmp_path / "src").mkdir()
    with pytest.raises(IsADirectoryError):
        session.write_file("src", b"x" * 1_000_000)
    assert session.stats.commands == 3 and not session.ended


def test_an_end_whose_exec_hangs_is_confirmed_by_the_pod_or_said_plainly(api, monkeypatch):
    """The sandbox's commands can hold the end's FIFO so the end's exec hangs: it is then judged by
    the pod, as any end whose answer was lost."""
    monkeypatch.setattr(session_commands, "END_TIMEOUT", 0.2)
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 0.2)
    batch = open_sessions(api)
    hangs(api, put_pod(api, batch.handle, 0))
    with pytest.raises(sdk.SessionError, match="ending the session of episode 0.*failed"):
        batch.session(0).end()


@pytest.mark.parametrize("command, options, error", [
    ([b"echo", b"hi"], {}, TypeError), (["echo", 1], {}, TypeError), (["echo", "a\x00b"], {}, ValueError),
    ("echo a\x00b", {}, ValueError),
    # a name os.fsdecode made of bytes that are not UTF-8: the URL library dropped the surrogate, and
    # `rm -rf build\udcff` ran as `rm -rf build`
    (["rm", "-rf", "build\udcff"], {}, ValueError), ("cat caf\udce9", {}, ValueError),
    ("true", {"stdin": "text"}, TypeError), ("true", {"timeout": -1}, ValueError), ("true", {"timeout": 0}, ValueError),
    ("true", {"timeout": float("nan")}, ValueError), ("true", {"limit_bytes": -1}, ValueError),
    ("true", {"limit_bytes": 1.5}, ValueError),
])
def test_a_command_or_option_no_exec_can_carry_is_refused_before_any_call(api, tmp_path, command, options, error):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    execs = len(api.execs)
    with pytest.raises(error):
        session.run(command, **options)
    assert len(api.execs) == execs and session.stats.commands == 0


def test_a_command_an_end_from_another_task_kills_is_session_over_not_its_result(api):
    """The documented pattern (AsyncClient, one task per episode, and a task that ends it): the
    end's kill reaches the running command before the kubelet reports the container ended. Its 137
    is the end's, and it is not counted past what end() wrote into the row."""
    async def scenario():
        client = AsyncClient(api=AsyncMemoryApi(api), namespace=NS)
        batch = await client.open_sessions(POOL, 4, verifier=VERIFIER, inputs=INPUTS, samples_per_input=2)
        pod = put_pod(api, batch.handle, 0)
        killed = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def sandbox(command, stdin):
            if "rolloutbatch-end" in command:   # the hold ends; its launcher kills every process
                killed.set()
                loop.call_later(0.3, lambda: set_agent(api, pod, terminated=True))   # the kubelet, later
                return ExecResult(exit_code=0, stdout=b"", stderr=b"")
            await killed.wait()
            return ExecResult(exit_code=137, stdout=b"", stderr=b"")
        api.set_exec(POOL_NS, pod, sandbox)
        session = await batch.session(0)
        running = asyncio.create_task(session.run("python long_test.py"))
        await asyncio.sleep(0.05)
        await session.end()
        with pytest.raises(sdk.SessionOver, match="end\\(\\) was called"):
            await running
        annotations = api.get_object("RolloutBatch", batch.name, NS)["metadata"]["annotations"]
        assert core_sessions.stats_of(annotations, 0, pod) is None or \
            core_sessions.stats_of(annotations, 0, pod)["commands"] == session.stats.commands == 0
        with pytest.raises(sdk.SessionOver):   # and nothing more runs once end() began
            await session.run("true")
    asyncio.run(scenario())


def test_sessions_open_in_another_namespace(api):
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    batch = sdk.Client(api=api, namespace=NS).open_sessions(POOL, 2, verifier=VERIFIER, namespace="other")
    assert batch.handle.namespace == "other"


@pytest.mark.parametrize("call", [
    lambda s: s.read_file("f", max_bytes=-5), lambda s: s.read_file("f", max_bytes=sessions.MAX_FILE_BYTES + 1),
    lambda s: s.read_file("f", max_bytes=True), lambda s: s.read_file("a\x00b"), lambda s: s.read_file(""),
    lambda s: s.write_file("a\x00b", b"x"), lambda s: s.write_file(b"f", b"x"),
    lambda s: s.read_file("caf\udce9"), lambda s: s.write_file("caf\udce9", b"x"),
])
def test_a_file_call_out_of_bounds_is_refused_before_any_call(api, tmp_path, call):
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)
    execs = len(api.execs)
    with pytest.raises(ValueError):
        call(session)
    assert len(api.execs) == execs


def test_a_sessions_commands_see_the_env_its_episode_sees():
    """A session's commands run under env(1) with sdk.sessions.episode_env: the same variables, with
    the same ``$(NAME)`` expansion, as the script its pod's hold and verifier get (a value left as
    written would have its commands write where the verifier does not read)."""
    import shlex

    from rolloutbatch.core import pool_delivery
    env = [{"name": "OUT", "value": "/work/$(EPISODE_INDEX)-$(EPISODE_ID)"}, {"name": "LOG", "value": "$(OUT)/log"}]
    script = pool_delivery.episode_script(pool_delivery.Episode(
        batch_name="b", index=3, samples_per_input=1, command=("true",),
        env=tuple((e["name"], e["value"]) for e in env), episode_id="b-pod"))
    line = next(ln for ln in script.decode().splitlines() if ln.startswith("set -- "))
    handed = [w for w in shlex.split(line[len("set -- "):])[1:] if "=" in w]
    batch = {"metadata": {"name": "b", "namespace": "team"}, "spec": {"env": env}}
    assert [f"{k}={val}" for k, val in sessions.episode_env(batch, 3, "b-pod")] == handed
    assert dict(sessions.episode_env(batch, 3, "b-pod"))["LOG"] == "/work/3-b-pod/log"


def test_a_command_whose_output_reached_the_trainer_counts_though_its_callback_raised(api, tmp_path):
    """on_output gets raw frames: a callback decoding them strictly raises on a byte that is no
    UTF-8. The command had run (its output came): it counts in the session's stats."""
    batch = open_sessions(api)
    put_pod(api, batch.handle, 0, workspace=tmp_path)
    session = batch.session(0)

    def strict(stream, data):
        data.decode()
    with pytest.raises(UnicodeDecodeError):
        session.run("printf '\\377'; touch ran", on_output=strict)
    assert (tmp_path / "ran").exists() and session.stats.commands == 1
