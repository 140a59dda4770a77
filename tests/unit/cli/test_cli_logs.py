"""`logs` and `results` of a batch whose sandbox is gone, without a cluster: what is kept is shown
and said to be the kept tail, both commands give the same hint, and they exit 0 when they did
what was asked."""
from __future__ import annotations

import pytest

from rolloutbatch.cli import logs
from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.children import removes_sandbox
from rolloutbatch.kube.errors import Forbidden, NotFound
from tests.unit.cli.test_cli_follow import _run as run

EVENTS = '{"event": "reward", "at": 2.0, "episode_id": "p1", "reward": 1.0}\n'
ROWS = [{"index": 0, "pod": "p0", "outcome": "failed", "reason": "NonZeroExit", "message": "exit code 3",
         "log_tail": "Traceback (most recent call last):\nValueError: boom\n", "channel": "log"},
        {"index": 1, "pod": "p1", "outcome": "succeeded", "reason": None, "message": "",
         "log_tail": "3 passed in 0.1s\n" + EVENTS, "channel": "log"},
        {"index": 2, "pod": "p2", "outcome": "succeeded", "reason": None, "message": "",
         "channel": "terminationMessage"}]


class Api:
    url = "https://k8s.example:6443"

    def get(self, path, what, **params):
        if path.endswith("/events"):
            return {"items": []}
        raise NotFound(f"{what}: not found", status=404)   # the sandbox and everything in it are gone


class Client:
    namespace, context = "n", "ctx"

    def __init__(self, phase="Succeeded", policy=None, rows=ROWS, document_extra=None):
        spec = {"episodes": 3, "cleanup": {"sandbox": policy}} if policy else {"episodes": 3}
        self.obj = {"metadata": {"name": "okgone", "namespace": "n", "uid": "0123456789abcdef"}, "spec": spec,
                    "status": {"phase": phase, "jobName": "okgone-job", "jobUID": "j-1",
                               "resultsConfigMap": "okgone-results"}}
        self.document = {"pods": rows, "episodes": 3, **(document_extra or {})}
        self.api = Api()

    def get(self, name, namespace=None):
        return self.obj

    def sandbox_namespace(self, obj):
        return "rb-0123456789"

    def namespace_exists(self, name, uid=None):
        return False

    def results_document(self, obj):
        return self.document


def test_a_succeeded_episodes_log_is_kept_and_said_to_be_the_tail(capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, Client(), "logs", "okgone", "--index", "1")
    assert code == 0, out + err
    assert "episode 1: succeeded" in out and "3 passed in 0.1s" in out and '"reward": 1.0' in out
    size = len(ROWS[1]["log_tail"].encode())
    assert f"the last {size} bytes of its log, as its results row keeps them" in out and "up to 1 KiB" in out
    assert "DeleteOnSuccess removes it once a batch succeeded" in err
    assert "Only cleanup.sandbox: Never keeps the sandbox" in err
    assert "(or Always)" not in err and "Never (DeleteOnSuccess and Always" not in err


def test_a_failed_episodes_tail_is_up_to_4_kib(capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, Client(phase="Failed", policy="Always"), "logs", "okgone", "-i", "0")
    assert code == 0 and "ValueError: boom" in out and "up to 4 KiB" in out
    assert "Always removes it once a batch failed" in err


def test_no_tail_kept_is_said_and_exits_1(capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, Client(), "logs", "okgone", "--index", "2")
    assert code == 1 and "episode 2: succeeded" in out
    assert "termination message, so its log was never read" in out
    shed = Client(document_extra={"dropped_row_fields": ["succeeded:log_tail"]})
    shed.document["pods"] = [{k: val for k, val in r.items() if k != "log_tail" or r["outcome"] != "succeeded"}
                             for r in ROWS]
    code, out, err = run(capsys, monkeypatch, shed, "logs", "okgone", "--index", "1")
    assert code == 1 and "shed" in out
    code, out, err = run(capsys, monkeypatch, Client(), "logs", "okgone")
    assert code == 1 and "ValueError: boom" in out and "3 passed" in out and "1 of 3 episode(s)" in err


def test_every_episode_with_a_tail_exits_0(capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, Client(rows=ROWS[:2]), "logs", "okgone")
    assert code == 0 and out.count("as its results row keeps them") == 2


def test_no_row_yet_exits_1(capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, Client(phase="Running", rows=[]), "logs", "okgone", "--index", "1")
    assert code == 1 and "no results row yet" in err and "phase Running" in err


def test_results_says_each_file_once_and_gives_the_logs_hint(capsys, monkeypatch, tmp_path):
    code, out, err = run(capsys, monkeypatch, Client(), "results", "okgone", "--output", str(tmp_path / "out"))
    assert code == 0, out + err
    lines = out.splitlines()
    assert "job.json" not in lines[0] and "pods.json" not in lines[0]
    assert sum("job.json" in line for line in lines) == 1 and any(line.startswith("empty: job.json") for line in lines)
    assert not any(line.startswith("not written: job.json") for line in lines)
    assert "Only cleanup.sandbox: Never keeps the sandbox" in out
    assert "Every episode's results row keeps the end of its log: 1 KiB of a succeeded one's" in out
    assert "empty: job.json, pods.json; not written: <pod>.log (the sandbox namespace rb-0123456789 is gone" in out
    assert (tmp_path / "out" / "job.json").read_text() == "null\n"


class NamespaceLevelApi(Api):
    """A user with the README's namespace-level rights: the sandbox namespace (the operator's,
    with no RoleBinding for them) refuses every read; the batch's own namespace answers."""

    def get(self, path, what, **params):
        if "/namespaces/rb-" in path:
            raise Forbidden(f'{what}: forbidden: User "alice@example.com" cannot list resource "pods" in API group "" '
                            f'in the namespace "rb-0123456789"', status=403)
        return super().get(path, what, **params)


class NamespaceLevelClient(Client):
    def __init__(self):
        super().__init__(phase="Running")
        self.api = NamespaceLevelApi()

    def namespace_exists(self, name, uid=None):
        raise Forbidden(f'namespaces "{name}" is forbidden: cluster scope', status=403)


def test_logs_without_rights_in_the_sandbox_says_which_and_what_works_in_one_line(capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, NamespaceLevelClient(), "logs", "okgone", "--index", "1")
    assert code == 1 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("rolloutbatch: error: alice@example.com has no right to read namespace rb-0123456789: "), err
    assert "get and list on pods, pods/log, jobs and events there" in err and "…" not in err   # whole
    assert "rolloutbatch results okgone --output DIR needs none" in err


def test_results_without_rights_in_the_sandbox_writes_the_rest_and_says_why(capsys, monkeypatch, tmp_path):
    code, out, err = run(capsys, monkeypatch, NamespaceLevelClient(), "results", "okgone",
                         "--output", str(tmp_path / "out"))
    assert code == 0 and err == "", out + err
    said = [line for line in out.splitlines() if "no right" in line]
    assert len(said) == 1 and said[0].startswith(
        "empty: job.json, pods.json; not written: <pod>.log (alice@example.com has no right to read namespace "
        "rb-0123456789: "), out
    assert said[0].endswith("results.json needs none: it keeps every episode's log tail)"), out
    assert "is gone" not in out and "rolloutbatch logs" not in out      # it cannot tell, and logs could not either
    assert (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("policy, phase, removed", [
    (v.CLEANUP_DELETE_ON_SUCCESS, v.SUCCEEDED, True), (v.CLEANUP_DELETE_ON_SUCCESS, v.FAILED, False),
    (v.CLEANUP_ALWAYS, v.FAILED, True), (v.CLEANUP_NEVER, v.SUCCEEDED, False)])
def test_the_hint_says_what_the_policy_does(policy, phase, removed):
    assert removes_sandbox(policy, phase) is removed
    hint = logs.cleanup_hint({"spec": {"cleanup": {"sandbox": policy}}, "status": {"phase": phase, "jobName": "j", "jobUID": "u"}})
    assert ("removes it once" in hint) is removed and "Only cleanup.sandbox: Never keeps" in hint


def test_the_hint_names_no_sandbox_a_batch_never_had_and_the_pools_namespace_for_a_pooled_one():
    """A new user's review: an InvalidSpec batch, and batches on a pool, were said to have lost a
    sandbox namespace rb-... that never existed ("deleted by someone")."""
    from rolloutbatch.sdk.ops import pods_namespace, sandbox_namespace

    never = {"spec": {}, "status": {"phase": v.FAILED, "reason": "InvalidSpec"}}
    hint = logs.cleanup_hint(never)
    assert "reached Failed (InvalidSpec) before it made its Job: it never had pods" in hint
    assert "deleted by someone" not in hint
    # its Job named (the status names it before it is made), never made: a pool that was not there
    named = {"spec": {"poolRef": {"name": "gone"}}, "status": {"phase": v.FAILED, "reason": "PoolNotFound",
                                                               "jobName": "rb-0123456789"}}
    assert "reached Failed (PoolNotFound) before it made its Job" in logs.cleanup_hint(named)
    pooled = {"metadata": {"name": "b", "namespace": "team", "uid": "u-1"}, "spec": {"poolRef": {"name": "warm"}},
              "status": {"phase": v.SUCCEEDED, "jobName": "b-job", "jobUID": "j-1"}}
    assert "removes its Job in RolloutPool warm's namespace once" in logs.cleanup_hint(pooled)
    assert sandbox_namespace(pooled) is None                   # not the batch's own: never waited for, never deleted
    assert pods_namespace(pooled) == naming.pool_namespace("team", "warm")
    dedicated = {"metadata": {"name": "b", "namespace": "team", "uid": "u-1"}, "spec": {}, "status": {}}
    assert pods_namespace(dedicated) == sandbox_namespace(dedicated) != "team"


def test_a_kept_tail_cannot_move_the_terminal_cursor():
    from rolloutbatch.cli.logs import shown

    assert shown("ok\x1b[3A\x1b[2Kepisode 3: succeeded\tdone\n\u00e9\x7f") == \
        "ok\\x1b[3A\\x1b[2Kepisode 3: succeeded\tdone\n\u00e9\\x7f"


# clear the screen, home the cursor, set the window title; a C1 CSI; a line separator; a bidi override
HOSTILE_NAME = "\x1b[2J\x1b[H\x1b]0;pwned\x07\x9b1A\u2028\u202e"


def _printed_row(row) -> str:
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        logs.print_kept(row, {"pods": []})
    return out.getvalue()


def test_a_rows_message_cannot_move_the_terminal_cursor():
    """A row's message quotes episode text (a dropped reward extra's name), and a results ConfigMap
    is anyone's with write access to it (or an older operator's): printed escaped, on one line."""
    from rolloutbatch.core.verdict import judge_episode
    from rolloutbatch.core.pod_reading import pod_facts
    from tests.unit.core.test_verdict import READY, REWARD, T0, log_of, pod_json
    judged = judge_episode(pod_facts(pod_json()), log_of(READY, {**REWARD, HOSTILE_NAME: "a" * 5000}))
    assert judged.outcome == v.OUTCOME_SUCCEEDED
    forged = {"index": 3, "pod": "p3", "outcome": "failed", "reason": "NonZeroExit\x1b[2K",
              "message": f"exit code 3{HOSTILE_NAME}\nepisode 4: succeeded"}
    for row in (judged.to_row(T0), forged):
        out = _printed_row(row)
        first, *rest = out.splitlines()
        assert all(line.isprintable() for line in out.splitlines()), repr(out)
        assert "\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\x9b1A\\u2028\\u202e" in first, repr(out)
        assert all(line.startswith("  (") for line in rest), repr(out)     # no forged line of its own


# -- every episode's log while some pods are gone (an API server in memory) ----------------------
@pytest.fixture
def memory_api(monkeypatch):
    from rolloutbatch.sdk import Client as SdkClient
    from tests.support.memory_api import MemoryApi
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    monkeypatch.setattr(logs, "make_client", lambda args: SdkClient(api=api, namespace="team"))
    return api


def _batch_with_one_pod_left(api, phase: str) -> dict:
    from rolloutbatch.core.naming import CONTAINER_NAME, LABEL_BATCH_UID
    batch = api.put({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
                     "metadata": {"name": "b", "namespace": "team"},
                     "spec": {"episodes": 3, "isolation": {"namespace": "Shared"}}, "status": {"phase": phase}})
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b-0-abcde", "namespace": "team", "labels": {
        LABEL_BATCH_UID: batch["metadata"]["uid"], v.COMPLETION_INDEX_KEY: "0"}},
        "spec": {"containers": [{"name": CONTAINER_NAME}]}})
    api.set_log("team", "b-0-abcde", CONTAINER_NAME, b"episode zero output\n")
    return batch


@pytest.mark.parametrize("phase, code", [("Failed", 1), ("Running", 0)])
def test_every_episodes_log_shows_the_kept_tail_of_one_whose_pod_is_gone(memory_api, capsys, monkeypatch,
                                                                       phase, code):
    """Episode 0's pod is there, episode 1's is gone (evicted) and its row keeps a tail, episode 2
    has neither: `logs b` printed episode 0 alone and exited 0. Now episode 1's kept tail follows,
    and a finished batch's episode 2, of which nothing is left, is said and makes it exit 1 (a
    running batch's may not have started yet)."""
    from rolloutbatch.sdk import Client as SdkClient
    from tests.unit.cli.cli_runner import run as run_cli
    _batch_with_one_pod_left(memory_api, phase)
    document = {"episodes": 3, "pods": [
        {"index": 0, "pod": "b-0-abcde", "outcome": "succeeded", "reason": None, "message": "",
         "log_tail": "episode zero output\n", "channel": "log"},
        {"index": 1, "pod": "b-1-fghij", "outcome": "lost", "reason": "Evicted", "message": "node drained",
         "log_tail": "EPISODE-ONE-TAIL\n", "channel": "log"}]}
    monkeypatch.setattr(SdkClient, "results_document", lambda self, obj: document)
    got, out, err = run_cli(capsys, "logs", "b")
    assert "episode zero output" in out and "EPISODE-ONE-TAIL" in out and got == code, (got, out, err)
    assert ("episode(s) 2 of b: no pod and no results row" in err) == (phase == "Failed"), err


def test_a_pooled_batchs_pods_namespace_is_the_pools_and_alive_while_the_pool_is():
    """A hostile review: `results --output` of a pooled batch said the pool's namespace "is gone"
    (it looked for the batch's uid on it, which only a batch's own sandbox carries)."""
    from rolloutbatch.cli import export

    asked = []

    class Namespaces:
        def namespace_exists(self, name, uid=None):
            asked.append((name, uid))
            return True
    pooled = {"metadata": {"name": "b", "namespace": "team", "uid": "u-1"}, "spec": {"poolRef": {"name": "warm"}}}
    assert export._namespace_alive(Namespaces(), pooled, naming.pool_namespace("team", "warm"))
    own = {"metadata": {"name": "b", "namespace": "team", "uid": "u-1"}, "spec": {}}
    assert export._namespace_alive(Namespaces(), own, "rb-0123456789")
    assert asked == [(naming.pool_namespace("team", "warm"), None), ("rb-0123456789", "u-1")]
