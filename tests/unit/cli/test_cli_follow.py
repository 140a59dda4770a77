"""CLI for long runs, without a cluster: exit codes of watch, cleanup of several names, lazy imports."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rolloutbatch.cli import batches, export, follow, logs
from rolloutbatch import __version__
from rolloutbatch.cli.main import _command, main
from rolloutbatch.kube.errors import NotFound


def _obj(name, status):
    return {"metadata": {"name": name, "namespace": "n", "uid": f"uid-{name}"},
            "spec": {"episodes": 2, "isolation": {"namespace": "Shared"}}, "status": status}


class FakeClient:
    namespace = "n"

    def __init__(self, objects, retained=None):
        self.objects, self.deleted = objects, []
        # batch name -> {batch uid: its retained results ConfigMaps}; a list: those of uid-<name>
        self.retained = {name: sets if isinstance(sets, dict) else {f"uid-{name}": sets}
                         for name, sets in (retained or {}).items()}
        self.stopped: list[str] = []

    def retained_uids(self, name, namespace=None):
        return sorted(self.retained.get(name, {}))

    def delete_retained(self, name, namespace=None, *, uid=None):
        # as sdk.retained: by uid, or by name all but the set of a batch of the name that exists
        sets = self.retained.get(name, {})
        live = self.objects[name]["metadata"]["uid"] if name in self.objects else None
        uids = [uid] if uid is not None else [u for u in sets if u != live]
        removed = sorted(cm for u in uids for cm in sets.pop(u, []))
        if not sets:
            self.retained.pop(name, None)
        return removed

    def stop(self, obj):
        if (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Stopped"):
            self.stopped.append(obj["metadata"]["name"])
        return obj

    def get(self, name, namespace=None):
        if name not in self.objects:
            raise NotFound(f'rolloutbatch "{name}" not found in namespace n', status=404)
        return self.objects[name]

    def sandbox_namespace(self, obj):
        return None

    def delete(self, obj, wait=True, timeout=300, interval=1.0):
        self.deleted.append((obj["metadata"]["name"], wait))
        if wait:
            self.objects.pop(obj["metadata"]["name"], None)

    def results_document(self, obj):
        return {"pods": [{"index": 0, "outcome": "failed", "reason": "NoReward", "message": "no reward event", "pod": "p0"},
                         {"index": 1, "outcome": "lost", "reason": "Evicted", "message": "node drained", "pod": "p1"},
                         {"index": 2, "outcome": "failed", "reason": "NoReward", "message": "exit 3", "pod": "p2"}]}


def _run(capsys, monkeypatch, client, *argv):
    """``rolloutbatch *argv`` against ``client``: (exit code, stdout, stderr)."""
    for module in (batches, follow, logs, export):
        monkeypatch.setattr(module, "make_client", lambda args: client)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cleanup_takes_several_names_and_ignore_not_found(capsys, monkeypatch):
    client = FakeClient({"a": _obj("a", {}), "b": _obj("b", {})})
    code, out, err = _run(capsys, monkeypatch, client, "cleanup", "a", "b", "c")
    assert code == 1 and 'rolloutbatch "c" not found' in err and len(err.splitlines()) == 1
    assert [d for d in client.deleted if not d[1]] == [("a", False), ("b", False)]   # both requested first
    client = FakeClient({"a": _obj("a", {})})
    code, out, err = _run(capsys, monkeypatch, client, "cleanup", "a", "c", "--ignore-not-found")
    assert code == 0 and "rolloutbatch.rl.agentruntime.io/a deleted" in out and err == ""


def test_cleanup_by_a_user_who_may_not_read_namespaces_exits_0(capsys, monkeypatch):
    """cleanup waits (by default) for the batch and its sandbox namespace; a user with namespace
    rights only cannot read the latter (Forbidden): the batch gone answers, not exit 1."""
    from rolloutbatch.sdk import Client
    from tests.unit.test_sdk_build import _namespace_level_user_api

    api = _namespace_level_user_api()
    code, out, err = _run(capsys, monkeypatch, Client(api=api, namespace="team"), "cleanup", "b", "--timeout", "5")
    assert code == 0 and err == "", err
    assert api.get_object("RolloutBatch", "b", "team") is None


def test_cleanup_removes_retained_results_once_their_batch_is_gone(capsys, monkeypatch):
    client = FakeClient({"a": _obj("a", {})}, retained={"a": ["a-results"], "gone": ["gone-results", "gone-results-0"]})
    code, out, err = _run(capsys, monkeypatch, client, "cleanup", "a", "gone")
    assert code == 0 and err == "", err
    assert "retained results of gone deleted: configmap/gone-results, configmap/gone-results-0" in out
    assert "retained results of a deleted: configmap/a-results" in out and not client.retained
    assert _run(capsys, monkeypatch, client, "cleanup", "gone")[0] == 1      # nothing of that name is left
    kept = FakeClient({}, retained={"gone": ["gone-results"]})
    code, out, err = _run(capsys, monkeypatch, kept, "cleanup", "gone", "--keep-results")
    assert code == 1 and kept.retained == {"gone": {"uid-gone": ["gone-results"]}}
    waiting = FakeClient({"a": _obj("a", {})}, retained={"a": ["a-results"]})
    code, out, err = _run(capsys, monkeypatch, waiting, "cleanup", "a", "--no-wait")
    # the batch may still write them while it goes: they stay, and the command says so
    assert code == 0 and waiting.retained == {"a": {"uid-a": ["a-results"]}} and "run cleanup again" in out


@pytest.mark.parametrize("newer", ["running", "deleted too"])
def test_cleanup_removes_a_batchs_results_and_earlier_ones_but_never_a_newer_namesakes(capsys, monkeypatch, newer):
    # A stalled batch "a" beside the results an earlier "a" retained (what its message says
    # cleanup removes); while cleanup waits for it to go, a new "a" is created and writes its
    # own (and may be gone again by the time cleanup removes results): not the ones asked for.
    client = FakeClient({"a": _obj("a", {"phase": "Failed"})}, retained={"a": {"uid-old": ["a-results", "a-results-0"]}})

    def delete(obj, wait=True, timeout=300, interval=1.0):
        client.deleted.append((obj["metadata"]["name"], wait))
        if wait:
            client.objects.pop("a")
            client.retained["a"]["uid-new"] = ["a-results-1"]
            if newer == "running":
                client.objects["a"] = {"metadata": {"name": "a", "namespace": "n", "uid": "uid-new"}}

    client.delete = delete
    code, out, err = _run(capsys, monkeypatch, client, "cleanup", "a")
    assert code == 0 and err == "", err
    assert "retained results of a deleted: configmap/a-results, configmap/a-results-0" in out
    assert client.retained == {"a": {"uid-new": ["a-results-1"]}}


def test_stop_asks_running_batches_and_leaves_ended_ones(capsys, monkeypatch):
    client = FakeClient({"run": _obj("run", {"phase": "Running"}), "done": _obj("done", {"phase": "Succeeded"})})
    code, out, err = _run(capsys, monkeypatch, client, "stop", "run", "done")
    assert code == 0 and client.stopped == ["run"]
    assert "rolloutbatch.rl.agentruntime.io/run stop requested" in out
    assert "rolloutbatch.rl.agentruntime.io/done already ended (Succeeded): nothing to stop" in out


class FlakyClient(FakeClient):
    """After the first read, the API server fails ``failures`` reads (a 503, then a dropped
    connection, in turn), then answers with the batch's status ``then``."""

    def __init__(self, name, failures, then):
        super().__init__({name: _obj(name, {"phase": "Running"})})
        self.failures, self.then, self.reads = failures, then, 0

    def get(self, name, namespace=None):
        from rolloutbatch.kube.errors import Unavailable

        self.reads += 1
        if self.reads > 1 and self.failures:
            self.failures -= 1
            raise Unavailable("get RolloutBatch n/a: 503 Service Unavailable", status=503) if self.failures % 2 \
                else Unavailable("get RolloutBatch n/a: connection reset by peer")
        if self.reads > 1:
            self.objects[name] = _obj(name, self.then)
        return super().get(name, namespace)


def test_watch_retries_a_transient_api_failure_and_says_so(capsys, monkeypatch):
    """A 5xx or a dropped connection during the watch is no outcome: the batch runs on, so the watch
    retries (a line on stderr each time) and exits by the batch's end (it exited 1, as Failed)."""
    import rolloutbatch.cli.watch as cli_watch

    monkeypatch.setattr(cli_watch, "RETRY_FIRST", 0.0)
    code, out, err = _run(capsys, monkeypatch, FlakyClient("a", 2, {"phase": "Succeeded"}), "watch", "a")
    assert code == 0, err
    lines = err.splitlines()
    assert len(lines) == 3 and "503 Service Unavailable); retrying in 0s, for up to 120s in all" in lines[0], err
    assert "connection reset by peer" in lines[1] and lines[2] == "rolloutbatch: the API server answers again"


def test_watch_that_loses_the_api_server_exits_3_not_1(capsys, monkeypatch):
    """Failing past the grace, the outcome is unknown: exit 3 (the batch keeps running, re-attach),
    as a timed-out watch, not 1 (a failed batch)."""
    import rolloutbatch.cli.watch as cli_watch

    monkeypatch.setattr(cli_watch, "OUTAGE_GRACE", 0.0)
    code, out, err = _run(capsys, monkeypatch, FlakyClient("a", 10**6, {"phase": "Succeeded"}), "watch", "a")
    assert code == follow.EXIT_TIMEOUT == 3, err
    assert err.startswith("rolloutbatch: the API server failed every read for 0s (get RolloutBatch n/a: ") and \
        "re-attach with: rolloutbatch watch a -n n" in err and len(err.splitlines()) == 1, err


def test_watch_exit_codes_timeout_differs_from_failure(capsys, monkeypatch):
    import rolloutbatch.cli.watch as cli_watch

    def timing_out(handles, console, timeout=3600, interval=1.0):
        raise TimeoutError("still running when the watch timed out: n/a")

    monkeypatch.setattr(cli_watch, "follow", timing_out)
    code, out, err = _run(capsys, monkeypatch, FakeClient({"a": _obj("a", {"phase": "Running"})}), "watch", "a")
    assert code == follow.EXIT_TIMEOUT == 3
    assert "re-attach with: rolloutbatch watch a -n n" in err

    def interrupted(handles, console, timeout=3600, interval=1.0):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_watch, "follow", interrupted)
    code, out, err = _run(capsys, monkeypatch, FakeClient({"a": _obj("a", {"phase": "Running"})}), "watch", "a")
    assert code == 130 and "interrupted; the batch keeps running; re-attach with: rolloutbatch watch a -n n" in err

    monkeypatch.setattr(cli_watch, "follow", lambda handles, console, timeout=3600, interval=1.0: None)
    failed = _obj("a", {"phase": "Failed", "failedEpisodes": 2, "lostEpisodes": 1})
    code, out, err = _run(capsys, monkeypatch, FakeClient({"a": failed}), "watch", "a")
    assert code == 1
    assert "2  failed NoReward" in out and "1  lost Evicted" in out
    assert "episode 0 (p0): no reward event" in out and "episode 2 (p2): exit 3" in out
    code, out, _ = _run(capsys, monkeypatch, FakeClient({"a": _obj("a", {"phase": "Succeeded"})}), "watch", "a")
    assert code == 0 and "by reason" not in out


def test_watch_of_a_batch_replaced_by_a_namesake_fails_in_one_line(capsys, monkeypatch):
    """The batch was deleted and a namesake made, which succeeds: not this batch's success."""
    import rolloutbatch.cli.watch as cli_watch

    client = FakeClient({"a": _obj("a", {"phase": "Running"})})
    real_follow = cli_watch.follow

    def replaced_then_followed(handles, console, timeout=3600, interval=1.0):
        namesake = _obj("a", {"phase": "Succeeded"})
        client.objects["a"] = {**namesake, "metadata": {**namesake["metadata"], "uid": "uid-new"}}
        return real_follow(handles, console, timeout=5, interval=0)

    monkeypatch.setattr(cli_watch, "follow", replaced_then_followed)
    code, out, err = _run(capsys, monkeypatch, client, "watch", "a")
    assert code == 1 and out == ""
    assert err == 'rolloutbatch: error: rolloutbatch "a" in namespace n was replaced by a namesake (uid uid-a -> uid-new)\n'


@pytest.mark.parametrize("argv, expected", [
    (["operator"], True), (["-n", "x", "operator", "--verbose"], True), (["--kubeconfig", "operator", "list"], False),
    (["list"], False), (["get", "operator"], False), ([], False)])
def test_only_the_operator_command_loads_kopf(argv, expected):
    assert (_command(argv) == "operator") is expected


def test_version_is_answered_before_any_subcommand_module_is_imported():
    code = ("import sys; from rolloutbatch.cli.main import main; main(['--version']);"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('requests', 'pykube', 'yaml', 'kopf')"
            " or m.startswith('rolloutbatch.sdk')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [f"rolloutbatch {__version__}", "[]"]


def test_cli_commands_do_not_import_kopf():
    code = ("import sys; from rolloutbatch.cli.main import build_parser; build_parser(operator=False)"
            ".parse_args(['list']); import rolloutbatch.cli.batches, rolloutbatch.cli.export, rolloutbatch.sdk;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kopf', 'aiohttp', 'kubernetes')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
