"""Rendering (tables, summaries, events) and the results export, against an in-memory API."""
from __future__ import annotations

import copy
import datetime
import json
import pathlib
import tempfile

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.cli import batches, common, render
from rolloutbatch.cli.export import export
from rolloutbatch.core.results import configmap_digest
from rolloutbatch.kube.errors import NotFound
from rolloutbatch.sdk import Client, CRDNotInstalled, ResultsNotReady
from tests.support.memory_api import MemoryApi
from tests.unit.cli.cli_runner import run

ROOT = pathlib.Path(__file__).resolve().parents[3]
NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)

BATCH = {
    "apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
    "metadata": {"name": "ship", "namespace": "team", "uid": "u-1", "creationTimestamp": "2026-01-01T11:59:15Z"},
    "spec": {"episodes": 3},
    "status": {"phase": "Succeeded", "progress": "3/3", "episodes": 3, "runningEpisodes": 0, "succeededEpisodes": 3,
               "failedEpisodes": 0, "lostEpisodes": 0, "readyEpisodes": 3, "rewardSum": 3.0, "rewardMean": 1.0,
               "batchToAllReadySeconds": 2.5, "batchToAllRewardsSeconds": 4.25, "jobCompleteSeconds": 6.0,
               "podToReadySeconds": {"p50": 1.5, "p95": 1.9, "max": 2.0},
               "sandboxNamespace": "rb-u1", "jobName": "rb-u1", "resultsConfigMap": "ship-results",
               "message": "3 of 3 episodes succeeded"},
}


class FakeApi:
    """Just enough of kube.client.Api: objects by path."""

    url = "https://fake:6443"

    def __init__(self, objects: dict[str, dict], crd: bool = True) -> None:
        self.objects, self.crd = objects, crd

    def get(self, path, what, **params):
        if path == "/apis/rl.agentruntime.io/v1alpha1":
            if self.crd:
                return {"kind": "APIResourceList", "resources": [{"name": "rolloutbatches", "kind": "RolloutBatch"}]}
            raise NotFound(what, status=404)
        if path in self.objects:
            return self.objects[path]
        raise NotFound(what, status=404)

    def raw(self, path, what, **params):
        log = self.objects.get(path)
        if log is None:
            raise NotFound(what, status=404)

        class Response:
            def iter_content(self, chunk_size):
                yield log["text"].encode()

            def close(self):
                pass
        return Response()


def test_columns_match_the_crd():
    crd = yaml.safe_load((ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml").read_text())
    cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    ours = [(h, "." + p, wide) for h, p, wide in render.COLUMNS]
    theirs = [(c["name"].upper(), c["jsonPath"], c.get("priority", 0) > 0) for c in cols]
    assert ours == theirs


def test_table_like_kubectl():
    text = render.table([BATCH], now=NOW)
    header, line = text.splitlines()
    assert header.split() == ["NAME", "STATUS", "PROGRESS", "RUNNING", "SUCCEEDED", "FAILED", "LOST", "REWARD", "AGE"]
    assert line.split() == ["ship", "Succeeded", "3/3", "0", "3", "0", "0", "3", "45s"]
    wide = render.table([BATCH], wide=True, now=NOW).splitlines()
    assert wide[0].split()[-4:] == ["P50-READY", "P95-READY", "SANDBOX", "MESSAGE"]
    # -A adds the batch's NAMESPACE in front; the sandbox column must not repeat that header.
    all_wide = render.table([BATCH], wide=True, all_namespaces=True, now=NOW).splitlines()[0].split()
    assert all_wide.count("NAMESPACE") == 1 and all_wide[0] == "NAMESPACE"
    assert "1.5" in wide[1] and "rb-u1" in wide[1] and "3 of 3 episodes succeeded" in wide[1]
    empty = {"metadata": {"name": "new", "creationTimestamp": "2026-01-01T11:00:00Z"}}
    assert render.table([empty], now=NOW).splitlines()[1].split() == ["new", "Pending", "60m"]   # no status yet
    assert render.table([BATCH], all_namespaces=True, now=NOW).splitlines()[1].startswith("team ")


@pytest.mark.parametrize("seconds, text", [(5, "5s"), (119, "119s"), (125, "2m5s"), (600, "10m"),
                                           (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"), (3 * 86400, "3d"),
                                           (20 * 86400, "20d")])
def test_age(seconds, text):
    then = (NOW - datetime.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
    assert render.age(then, NOW) == text


def test_numbers():
    assert render.number(None) == "" and render.number(3.0) == "3" and render.number(0.12345) == "0.123"
    assert render.number(2) == "2" and render.number("x") == "x"


def test_serialize():
    assert json.loads(render.serialize([BATCH], "json", single=True))["metadata"]["name"] == "ship"
    listed = yaml.safe_load(render.serialize([BATCH, BATCH], "yaml", single=False))
    assert listed["kind"] == "List" and len(listed["items"]) == 2


def _saved_and_read(tmp_path, text: str) -> dict:
    saved = tmp_path / "saved.yaml"
    saved.write_text(text)
    (read,) = common.load_documents(str(saved))
    return read


@pytest.mark.parametrize("value", ["1e-3", "1e3", "+2E5", "08", "0o17", "y", "N", "+Inf", "-nan", "0x1p-2"])
def test_get_o_yaml_reads_back_as_the_object(monkeypatch, tmp_path, capsys, value):
    """`get -o yaml` (and submit/list/pool -o yaml) dumped with PyYAML's YAML 1.1 resolver, which
    leaves `1e-3` plain: kubectl's reader (go-yaml) and this CLI's own `submit -f` (cli.common's
    loader, "numbers read as kubectl's reader reads them") read it back as the number 0.001. A
    learning rate in spec.env ({name: LR, value: "1e-3"}) saved with `get -o yaml` and submitted
    again became a number, which an env value cannot be. Quoted too: what YAML 1.2 (`0o17`) and
    go-yaml (`y`, `+Inf`, `0x1p-2`) read as no string."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    monkeypatch.setattr(batches, "make_client", lambda args: Client(api=api, namespace="team"))
    batch = {**copy.deepcopy(BATCH), "spec": {"episodes": 1, "task": {"files": {"a.py": "x"}},
                                              "env": [{"name": "LR", "value": value}]}}
    del batch["status"], batch["metadata"]["uid"]
    api.create("/apis/rl.agentruntime.io/v1alpha1/namespaces/team/rolloutbatches", batch, "create")
    code, out, err = run(capsys, "get", "ship", "-o", "yaml")
    assert code == 0, err
    assert _saved_and_read(tmp_path, out)["spec"]["env"] == [{"name": "LR", "value": value}], out


# any text, and text shaped as the numbers, booleans and nulls some YAML reader reads
_STRINGS = st.one_of(st.text(), st.from_regex(r"[-+]?(0[xob])?[0-9a-fA-F_.]{0,6}([eEpP][-+]?[0-9]{1,3})?", fullmatch=True),
                     st.from_regex(r"[-+]?[.]?(?i:inf|infinity|nan|null|true|false|yes|no|on|off|y|n|~)", fullmatch=True))


@settings(max_examples=150)
@given(st.lists(_STRINGS, min_size=1, max_size=4), st.dictionaries(_STRINGS, _STRINGS, max_size=3))
def test_every_string_o_yaml_writes_reads_back_as_that_string(values, keys):
    """Whatever a string is, `-o yaml` writes it so that `submit -f` reads it back as it was, as a
    value and as a key."""
    batch = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": "s"},
             "spec": {"episodes": 1, "args": values, "inputs": [keys]}}
    with tempfile.TemporaryDirectory() as directory:
        read = _saved_and_read(pathlib.Path(directory), render.serialize([batch], "yaml", single=True))
    assert read == batch


def test_summary_uses_the_guides_names():
    values = render.summary(BATCH["status"])
    assert list(values)[:5] == ["phase", "episodes", "successful_episodes", "failed_episodes", "reward_sum"]
    assert values["pod_to_ready_p95_seconds"] == 1.9
    assert values["client_job_complete_seconds"] == 6.0
    assert values["batch_to_all_rewards_seconds"] == 4.25
    filled = render.summary({}, {"reward_sum": 7})
    assert filled["reward_sum"] == 7 and filled["phase"] is None

    from rich.console import Console
    console = Console(width=120, record=True)
    render.print_summary(console, [("parallel", values), ("serial", values)])
    text = console.export_text()
    assert "batch_to_all_ready_seconds" in text and "parallel" in text and "serial" in text


def test_a_batch_waiting_to_start_says_why_in_its_progress():
    """`submit --watch` of a batch waiting for its pool showed only `Provisioning 0/2` until its
    timeout, though the status said WaitingForPool and what to do (a new user's review)."""
    waiting = {"phase": "Provisioning", "episodes": 2, "reason": "WaitingForPool",
               "message": "waiting for RolloutPool empty: 0 of the 2 warm pods\x1b[31m are ready;\nscale it"}
    line = render.progress_line("waits", waiting)
    assert line.endswith("(WaitingForPool: waiting for RolloutPool empty: 0 of the 2 warm pods\\x1b[31m are ready; "
                         "scale it)"), line
    from rolloutbatch.cli import progress_board
    lines = progress_board.plain_lines([("waits", waiting)], 60)
    assert len(lines) == 2 and lines[1].startswith("  WaitingForPool: waiting") and len(lines[1]) <= 60
    running = dict(waiting, phase="Running", reason="EpisodesRunning", message="Episodes are running")
    assert "(" not in render.progress_line("runs", running) and len(progress_board.plain_lines([("r", running)], 60)) == 1


def test_a_running_batch_whose_later_episodes_wait_says_why_in_its_progress():
    waits = {"phase": "Running", "episodes": 4, "runningEpisodes": 1, "reason": "WaitingForPool",
             "message": "1 later episode(s) wait for a warm pod of RolloutPool warm (spec.poolRef.whenEmpty: Wait; indexes 2)"}
    assert render.progress_line("w", waits).endswith("(WaitingForPool: 1 later episode(s) wait for a warm pod of "
                                                     "RolloutPool warm (spec.poolRef.whenEmpty: Wait; indexes 2))")
    unplaced = dict(waits, reason="EpisodesUnschedulable", message="1 episode pod(s) cannot be scheduled: 0/2 nodes are available")
    assert render.waiting_note(unplaced) == "EpisodesUnschedulable: 1 episode pod(s) cannot be scheduled: 0/2 nodes are available"

def test_summary_shows_the_claim_figures_of_a_pooled_batch_only():
    pooled = {**BATCH["status"], "pool": {"hits": 18, "misses": 2, "claimSeconds": {"p50": 0.21, "p95": 0.4}}}
    values = render.summary(pooled)
    assert [values[k] for k in ("pool_hits", "pool_misses", "claim_p50_seconds", "claim_p95_seconds")] == \
        [18, 2, 0.21, 0.4]
    assert "pool_hits" not in render.summary(BATCH["status"])
    assert render.summary({}, {"pool_hits": 3, "pool_misses": 0})["pool_hits"] == 3    # from the results

def test_progress_line():
    assert render.progress_line("ship", BATCH["status"]) == \
        "ship: Succeeded 3/3 finished, running 0, failed 0, lost 0, reward 3"
    assert render.progress_line("x", None) == "x: Pending 0/? finished, running 0, failed 0, lost 0, reward 0"
    # the live count of running episodes, not readyEpisodes (which trails until pods end)
    assert render.progress_line("r", {"phase": "Running", "episodes": 8, "runningEpisodes": 8, "readyEpisodes": 0}) \
        == "r: Running 0/8 finished, running 8, failed 0, lost 0, reward 0"


def test_progress_counts_lost_episodes_as_finished():
    # status.progress counts succeeded + failed + lost; the CLI must say the same.
    status = {"phase": "Failed", "progress": "4/4", "episodes": 4, "succeededEpisodes": 1,
              "failedEpisodes": 1, "lostEpisodes": 2, "readyEpisodes": 2, "rewardSum": 1}
    assert render.finished_count(status) == 4
    assert render.progress_line("b", status) == "b: Failed 4/4 finished, running 0, failed 1, lost 2, reward 1"
    assert render.finished_count({}) == 0 and render.finished_count(None) == 0


def test_events():
    events = [{"lastTimestamp": "2026-01-01T00:00:02Z", "type": "Warning", "reason": "Failed",
               "involvedObject": {"kind": "Pod", "name": "p"}, "message": "bad\nthing"},
              {"lastTimestamp": "2026-01-01T00:00:01Z", "type": "Normal", "reason": "Created",
               "involvedObject": {"kind": "Job", "name": "j"}, "message": "ok"}]
    lines = render.format_events(events).splitlines()
    assert lines[0].split()[:3] == ["LAST", "SEEN", "TYPE"]
    assert "job/j" in lines[1] and lines[2].endswith("bad thing")


HOSTILE = "\x1b[2J\x1b[H\x1b]0;pwned\x07\x9b1A\u2028\u202e"   # clear, home, title; C1 CSI; U+2028; bidi
SHOWN = "\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\x9b1A \\u202e"        # U+2028 is whitespace: one space


def test_events_cannot_move_the_terminal_cursor():
    """An Event can come from anything with create on events, and the operator's own quote episode
    text (a dropped reward extra's name): every field is printed escaped, on one line."""
    from rolloutbatch.core.verdict import judge_episode
    from rolloutbatch.core.pod_reading import pod_facts
    from rolloutbatch.service.transitions import extras_dropped_message
    from tests.unit.core.test_verdict import READY, REWARD, log_of, pod_json
    judged = judge_episode(pod_facts(pod_json()), log_of(READY, {**REWARD, HOSTILE: "a" * 5000}))
    ours = {"type": "Warning", "reason": "RewardExtrasDropped", "message": extras_dropped_message(judged),
            "involvedObject": {"kind": "RolloutBatch", "name": "b"}, "lastTimestamp": "2026-01-01T00:00:01Z"}
    forged = {"type": f"Normal{HOSTILE}", "reason": f"Created{HOSTILE}", "note": f"ok{HOSTILE}",
              "regarding": {"kind": "Pod", "name": f"p{HOSTILE}"}, "eventTime": f"2026-01-01T00:00:02Z{HOSTILE}"}
    text = render.format_events([ours, forged])
    assert all(line.isprintable() for line in text.splitlines()) and len(text.splitlines()) == 3, repr(text)
    assert text.count("\\x9b1A\\u2028\\u202e") == 1    # the operator's: escaped at its source, U+2028 too
    assert text.count(SHOWN) == 5, repr(text)


def test_a_status_message_in_the_table_cannot_move_the_terminal_cursor():
    hostile = copy.deepcopy(BATCH)
    hostile["status"]["message"] = f"3 of 3{HOSTILE}\nforged-batch   Succeeded"
    text = render.table([hostile], wide=True, now=NOW)
    assert len(text.splitlines()) == 2 and all(line.isprintable() for line in text.splitlines()), repr(text)
    assert text.splitlines()[1].endswith(f"3 of 3{SHOWN} forged-batch Succeeded")


def _objects(with_results: bool = True) -> dict[str, dict]:
    doc = {"batch": "ship", "episodes": 3, "successful_episodes": 3, "reward_sum": 3,
           "pods": [{"pod": f"rb-u1-{i}-x", "index": i, "reward": 1, "outcome": "succeeded"} for i in range(3)]}
    pod = lambda i: {"metadata": {"name": f"rb-u1-{i}-x"}}  # noqa: E731
    results_cm = {"metadata": {"name": "ship-results"}, "data": {"results.json": json.dumps(doc)}}
    batch = copy.deepcopy(BATCH)   # the operator records what it wrote: the reader checks it
    batch["status"]["resultsDigests"] = {"ship-results": configmap_digest(results_cm)}
    objects = {
        "/apis/rl.agentruntime.io/v1alpha1/namespaces/team/rolloutbatches/ship": batch,
        "/apis/batch/v1/namespaces/rb-u1/jobs/rb-u1": {"kind": "Job", "metadata": {"name": "rb-u1"}},
        "/api/v1/namespaces/rb-u1/pods": {"items": [pod(2), pod(0), {"metadata": {"name": "../evil"}}]},
        "/api/v1/namespaces/team/events": {"items": []},
        "/api/v1/namespaces/rb-u1/events": {"items": [{"type": "Normal", "reason": "Created", "message": "m",
                                                       "involvedObject": {"kind": "Pod", "name": "rb-u1-0-x"}}]},
        "/api/v1/namespaces/rb-u1/pods/rb-u1-0-x/log": {"text": "x" * 100},
    }
    if with_results:
        objects["/api/v1/namespaces/team/configmaps/ship-results"] = results_cm
    return objects


def test_export_writes_the_guides_layout(tmp_path):
    client = Client(api=FakeApi(_objects()), namespace="team")
    out = tmp_path / "run"
    written = export(client, client.get("ship"), out, log_limit_bytes=10)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["events.txt", "job.json", "pods.json", "rb-u1-0-x.log", "rb-u1-2-x.log", "receipt.json",
                     "results.json", "rolloutbatch.json"]
    assert written["results"] and written["logs"] == 2
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["batch_uid"] == "u-1" and receipt["sandbox_namespace"] == "rb-u1"
    assert receipt["namespace"] == "team" and "context" in receipt
    assert len(json.loads((out / "results.json").read_text())["pods"]) == 3
    log0 = (out / "rb-u1-0-x.log").read_text()
    assert log0.startswith("x" * 10 + "\n(log truncated at 10 bytes)")
    assert "log unavailable" in (out / "rb-u1-2-x.log").read_text()
    assert "rb-u1-0-x" in (out / "events.txt").read_text()
    with pytest.raises(FileExistsError):
        export(client, client.get("ship"), out)


def test_export_without_results(tmp_path):
    client = Client(api=FakeApi(_objects(with_results=False)), namespace="team")
    written = export(client, client.get("ship"), tmp_path / "r")
    assert not written["results"] and "no results yet" in written["results_error"]
    assert not (tmp_path / "r" / "results.json").exists()


def test_results_exits_non_zero_when_a_listed_shard_is_gone(tmp_path, capsys, monkeypatch):
    """A neighbour deleted shard 0 of a finished sharded batch: results.json is written with what
    could be read (naming what it lacks), and the command says so and exits 1."""
    from rolloutbatch.cli import export as export_cli
    from rolloutbatch.cli.main import main
    from rolloutbatch.sdk import result_ops

    monkeypatch.setattr(result_ops, "STATUS_REREADS", tuple(0.0 for _ in result_ops.STATUS_REREADS))
    rows = [{"pod": f"rb-u1-{i}-x", "index": i, "reward": 1, "outcome": "succeeded"} for i in range(3)]
    head = {"batch": "ship", "uid": "u-1", "episodes": 3,
            "shards": [{"name": "ship-results-0", "rows": 2, "full": True},
                       {"name": "ship-results-1", "rows": 1, "full": False}]}
    cms = [{"metadata": {"name": n}, "data": {"results.json": json.dumps(d)}} for n, d in (
        ("ship-results", head), ("ship-results-0", {"uid": "u-1", "shard": 0, "pods": rows[:2]}),
        ("ship-results-1", {"uid": "u-1", "shard": 1, "pods": rows[2:]}))]
    objects = _objects(with_results=False)
    objects["/apis/rl.agentruntime.io/v1alpha1/namespaces/team/rolloutbatches/ship"]["status"]["resultsDigests"] = {
        c["metadata"]["name"]: configmap_digest(c) for c in cms}
    objects["/api/v1/namespaces/team/configmaps/ship-results"] = cms[0]
    objects["/api/v1/namespaces/team/configmaps/ship-results-1"] = cms[2]     # ship-results-0: deleted
    monkeypatch.setattr(export_cli, "make_client", lambda args: Client(api=FakeApi(objects), namespace="team"))
    out = tmp_path / "run"
    assert main(["results", "ship", "-O", str(out)]) == 1
    stdout = capsys.readouterr().out
    assert "results.json is incomplete" in stdout and "ship-results-0 deleted" in stdout
    written = json.loads((out / "results.json").read_text())
    assert [r["index"] for r in written["pods"]] == [2] and written["missing_shards"] == ["ship-results-0"]


def test_results_into_a_directory_that_cannot_be_made_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """--output under a file (a typo, a notes file): the path and the reason, exit 1, no traceback."""
    from rolloutbatch.cli import export as export_cli
    from rolloutbatch.cli.main import main

    monkeypatch.setattr(export_cli, "make_client", lambda args: Client(api=FakeApi(_objects()), namespace="team"))
    (tmp_path / "notes.txt").write_text("my notes\n")
    out = tmp_path / "notes.txt" / "run1"
    assert main(["results", "ship", "-O", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"rolloutbatch: error: {out}: Not a directory\n", err


def test_not_found_vs_crd_missing():
    client = Client(api=FakeApi({}), namespace="team")
    with pytest.raises(NotFound, match='rolloutbatch "x" not found in namespace team'):
        client.get("x")
    client = Client(api=FakeApi({}, crd=False), namespace="team")
    with pytest.raises(CRDNotInstalled, match="CRD is not installed: kubectl apply -k manifests/default"):
        client.get("x")
    with pytest.raises(ResultsNotReady):
        Client(api=FakeApi({}), namespace="team").results_document(BATCH)



# Plain scalars kubectl's YAML reader (go.yaml.in/yaml/v2 resolve.go: `_`s removed, then Go's
# strconv.ParseInt(text, 0, 64) / ParseUint / a "YAML-style" ParseFloat) reads as numbers.
KUBECTL_NUMBERS = {"0X1F": 31, "0XFF": 255, "0o17": 15, "0B11": 3, "010": 8, "08": 8.0, "1_000": 1000,
                   "1e1_0": 1e10, "1.5e1_0": 1.5e10, "-0b11": -3, ".5": 0.5, "+0x10": 16,
                   "18446744073709551615": 2**64 - 1, "18446744073709551616": 2.0**64, "1_": 1}
KUBECTL_TEXT = ["1:30", "0x", "abc", "1e999", "0x1p-2", "2001-12-14", "+.5e", "0b", "1e"]


@pytest.mark.parametrize("text", sorted(KUBECTL_NUMBERS))
def test_a_string_kubectl_reads_as_a_number_is_quoted_and_a_number_read_as_kubectl_reads_it(tmp_path, text):
    """-o yaml quotes it (an env value saved and applied with kubectl stays a string), and submit -f
    reads the plain scalar as the number kubectl makes of it."""
    out = render.serialize([{"value": text}], "yaml", single=True)
    assert f"value: {text}\n" not in out, out
    path = tmp_path / "b.yaml"
    path.write_text(f"v: {text}\n")
    got = yaml.load(path.read_text(), Loader=common._Loader)["v"]
    assert got == KUBECTL_NUMBERS[text] and type(got) is type(KUBECTL_NUMBERS[text]), (text, got)


@pytest.mark.parametrize("text", KUBECTL_TEXT)
def test_what_kubectl_reads_as_text_is_text(text):
    assert yaml.load(f"v: {text}\n", Loader=common._Loader)["v"] == text
