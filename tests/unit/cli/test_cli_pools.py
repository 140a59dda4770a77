"""`rolloutbatch pools`, `pool create|get|scale|delete` and `submit --pool`, against the API in memory."""
from __future__ import annotations

import datetime
import json
import pathlib

import pytest
import yaml

from rolloutbatch import GROUP, POOL_KIND, VERSION, crdgen
from rolloutbatch.cli import batches, pools, render
from rolloutbatch.cli.main import build_parser
from rolloutbatch.core import defaults as d
from rolloutbatch.sdk import Client
from tests.support.memory_api import MemoryApi
from tests.unit.cli.cli_runner import run

ROOT = pathlib.Path(__file__).resolve().parents[3]
NS = "team"
NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture
def api(monkeypatch) -> MemoryApi:
    """The API in memory with the namespace, and every command's client on it."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for module in (pools, batches):
        monkeypatch.setattr(module, "make_client", lambda args: Client(api=api, namespace=args.namespace or NS))
    return api


@pytest.fixture
def task_files(tmp_path) -> list[str]:
    (tmp_path / "requirements.txt").write_text("requests\n")
    (tmp_path / "setup.sh").write_text("pip install -r /task/requirements.txt\n")
    return ["--task-file", str(tmp_path / "requirements.txt"), "--task-file", str(tmp_path / "setup.sh")]


def test_the_arguments():
    parser = build_parser(operator=False)
    args = parser.parse_args(["pool", "create", "warm", "--size", "3", "--task-file", "a.py", "--task-file", "b.sh",
                              "--prepare", "sh -c 'make deps'", "--env", "A=1", "--env", "B=x=y", "-n", "ns"])
    assert (args.name, args.size, args.task_files, args.namespace) == ("warm", 3, ["a.py", "b.sh"], "ns")
    assert args.env == [("A", "1"), ("B", "x=y")] and args.prepare == "sh -c 'make deps'"
    args = parser.parse_args(["pool", "scale", "warm", "0"])
    assert (args.pool_command, args.name, args.size) == ("scale", "warm", 0)
    assert parser.parse_args(["pool", "delete", "warm", "--no-wait"]).wait is False
    assert parser.parse_args(["pools", "-A", "-o", "wide"]).all_namespaces
    assert parser.parse_args(["submit", "-f", "b.yaml", "--pool", "warm"]).pool == "warm"


@pytest.mark.parametrize("argv", [
    ["-n", "ns", "--kubeconfig", "/k", "pool", "scale", "warm", "3"],
    ["pool", "-n", "ns", "--kubeconfig", "/k", "scale", "warm", "3"],     # README: "before or after the subcommand"
    ["pool", "scale", "warm", "3", "-n", "ns", "--kubeconfig", "/k"],
    ["-n", "other", "pool", "--namespace", "ns", "--kubeconfig=/k", "scale", "warm", "3"],   # the last one given
])
def test_the_global_options_go_anywhere_in_a_pool_command(argv):
    args = build_parser(operator=False).parse_args(argv)
    assert (args.pool_command, args.name, args.size, args.namespace, args.global_kubeconfig) == \
        ("scale", "warm", 3, "ns", "/k")


def test_pool_scale_with_the_namespace_before_its_action(capsys, api, task_files):
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rl"}})
    assert run(capsys, "pool", "create", "warm", "--size", "1", *task_files, "-n", "rl")[0] == 0
    code, _, err = run(capsys, "pool", "-n", "rl", "scale", "warm", "2")
    assert (code, err) == (0, "") and api.get_object(POOL_KIND, "warm", "rl")["spec"]["size"] == 2


@pytest.mark.parametrize("argv, said", [
    (["pool"], "ACTION"),
    (["pool", "create", "warm", "--task-file", "a"], "--size"),
    (["pool", "create", "warm", "--size", "2"], "--task-file"),
    (["pool", "create", "warm", "--size", "-2", "--task-file", "a"], "must be at least 0"),
    (["pool", "create", "warm", "--size", "2", "--task-file", "a", "--env", "NOVALUE"], "NAME=VALUE"),
    (["pool", "create", "warm", "--size", "2", "--task-file", "a", "--network", "Open"], "invalid choice"),
    (["pool", "scale", "warm", "many"], "not a whole number"),
])
def test_bad_arguments_are_one_line(capsys, argv, said):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and said in err, err


def test_create_list_get_scale_delete(capsys, api, task_files):
    code, out, err = run(capsys, "pool", "create", "warm", "--size", "2", "--max-size", "4", *task_files,
                         "--prepare", "sh /task/setup.sh", "--env", "MODE=fast", "--network", "AllowEgress")
    assert (code, out, err) == (0, f"rolloutpool.{GROUP}/warm created (namespace {NS})\n", "")
    spec = api.get_object(POOL_KIND, "warm", NS)["spec"]
    assert spec == {"size": 2, "image": d.IMAGE, "maxSize": 4, "env": [{"name": "MODE", "value": "fast"}],
                    "task": {"files": {"requirements.txt": "requests\n",
                                       "setup.sh": "pip install -r /task/requirements.txt\n"}},
                    "prepare": {"command": ["sh", "/task/setup.sh"]}, "network": "AllowEgress"}

    code, out, _ = run(capsys, "pools")
    assert code == 0 and out.splitlines()[0].split() == ["NAME", "SIZE", "READY", "STARTING", "CLAIMED", "STATUS", "AGE"]
    assert out.splitlines()[1].split()[:2] == ["warm", "2"]
    code, out, _ = run(capsys, "pool", "get", "warm", "-o", "json")
    assert code == 0 and json.loads(out)["spec"]["maxSize"] == 4

    assert run(capsys, "pool", "scale", "warm", "3")[:2] == (0, f"rolloutpool.{GROUP}/warm scaled to 3\n")
    assert api.get_object(POOL_KIND, "warm", NS)["spec"]["size"] == 3

    assert run(capsys, "pool", "delete", "warm")[:2] == (0, f"rolloutpool.{GROUP}/warm deleted\n")
    assert api.get_object(POOL_KIND, "warm", NS) is None
    code, out, err = run(capsys, "pools")
    assert code == 0 and out == "" and err == f"No RolloutPools found in namespace {NS}.\n"
    code, _, err = run(capsys, "pool", "delete", "warm")
    assert code == 1 and err == f'rolloutbatch: error: rolloutpool "warm" not found in namespace {NS}\n'


@pytest.mark.parametrize("extra, said", [
    (["--size", "5", "--max-size", "4"], "spec.size"),
    (["--size", "1", "--env", "EPISODE_INDEX=3"], "spec.env"),
    (["--size", "1", "--prepare", "sh -c 'unterminated"], "--prepare"),
    (["--size", "1", "--prepare", "sh /task/setup.sh", "--prepare-timeout", str(d.MAX_PREPARE_TIMEOUT_SECONDS + 1)],
     "spec.prepare.timeoutSeconds"),
])
def test_what_the_operator_would_refuse_is_one_line_and_nothing_is_sent(capsys, api, task_files, extra, said):
    code, out, err = run(capsys, "pool", "create", "warm", *task_files, *extra)
    assert code == 1 and out == "" and err.startswith("rolloutbatch: error: ") and said in err, err
    assert len(err.splitlines()) == 1 and api.get_object(POOL_KIND, "warm", NS) is None


@pytest.mark.parametrize("flag", ["--max-size", "--prepare-timeout"])
def test_a_bound_or_time_below_one_is_a_bad_argument(capsys, api, task_files, flag):
    """The CRD starts both at 1: like any bad argument, exit 2 before anything is sent."""
    code, out, err = run(capsys, "pool", "create", "warm", "--size", "0", *task_files, flag, "0")
    assert code == 2 and out == "" and f"{flag}: must be at least 1" in err, err
    assert api.get_object(POOL_KIND, "warm", NS) is None


def test_a_missing_or_twice_named_task_file_is_one_line(capsys, api, tmp_path, task_files):
    code, _, err = run(capsys, "pool", "create", "warm", "--size", "1", "--task-file", str(tmp_path / "nope"))
    assert code == 1 and "no such file" in err
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "setup.sh").write_text("again")
    code, _, err = run(capsys, "pool", "create", "warm", "--size", "1", *task_files, "--task-file",
                       str(tmp_path / "sub" / "setup.sh"))
    assert code == 1 and "a second file named setup.sh" in err


def test_submit_on_a_pool_sends_none_of_the_pools_fields(capsys, api, tmp_path):
    # a batch written to run cold: the pool's pods replace its image, task and isolation (the pool
    # not made yet: the batch waits for it, so nothing compares the two)
    batch = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RolloutBatch", "metadata": {"name": "on-pool"},
             "spec": {"episodes": 2, "image": "python:3.12-slim", "command": ["python", "/task/episode.py"],
                      "task": {"files": {"episode.py": "print(1)"}}, "isolation": {"namespace": "Shared"},
                      "poolRef": {"name": "warm", "whenEmpty": "Wait"}}}
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(batch))
    code, out, err = run(capsys, "submit", "-f", str(path), "--pool", "warm")
    assert code == 0, err
    assert out == f"rolloutbatch.{GROUP}/on-pool created (namespace {NS})\n"
    stored = api.get_object("RolloutBatch", "on-pool", NS)["spec"]
    assert stored == {"episodes": 2, "command": ["python", "/task/episode.py"],
                      "poolRef": {"name": "warm", "whenEmpty": "Wait"}}
    code, _, err = run(capsys, "submit", "-f", str(path), "--pool", "Not A Name")
    assert code == 1 and err.startswith("rolloutbatch: error: --pool:") and len(err.splitlines()) == 1


def test_submit_on_a_pool_refuses_a_manifest_that_names_another_sandbox(capsys, api, tmp_path, task_files):
    """`--pool` leaves the manifest's image and task out: where they are not the pool's, the
    episodes would run the pool's task on its image without a word. Refused, nothing created."""
    code, _, err = run(capsys, "pool", "create", "warm", "--size", "1", *task_files)
    assert code == 0, err
    files = {"requirements.txt": "requests\n", "setup.sh": "pip install -r /task/requirements.txt\n"}

    def submit(name: str, **spec) -> tuple[int, str]:
        batch = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RolloutBatch", "metadata": {"name": name},
                 "spec": {"episodes": 2, "command": ["sh", "/task/setup.sh"], "isolation": {"namespace": "Shared"},
                          **spec}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(batch))
        code, _, err = run(capsys, "submit", "-f", str(tmp_path / f"{name}.yaml"), "--pool", "warm")
        return code, err

    code, err = submit("v2", task={"files": {**files, "setup.sh": "pip install v2\n"}})
    assert code == 1 and "spec.task.files are not the pool's (setup.sh differ)" in err and len(err.splitlines()) == 1
    code, err = submit("slim", task={"files": files}, image="python:3.12-slim")
    assert code == 1 and 'spec.image "python:3.12-slim" is not the pool\'s' in err
    code, err = submit("big", task={"files": files}, resources={"limits": {"memory": "8Gi"}})
    assert code == 1 and "spec.resources" in err
    code, err = submit("spelt", task={"files": files}, resources={"requests": {"cpu": "0.1", "memory": "64Mi"},
                                                                 "limits": {"cpu": 0.5, "memory": "128Mi"}})
    assert code == 0, err   # the pool's amounts, spelt otherwise: not a conflict
    assert api.get_object("RolloutBatch", "v2", NS) is None and api.get_object("RolloutBatch", "slim", NS) is None
    code, err = submit("same", task={"files": files})   # the pool's own task: runs, its fields left out
    assert code == 0, err
    assert api.get_object("RolloutBatch", "same", NS)["spec"]["poolRef"] == {"name": "warm"}


def test_submit_pool_of_a_json_file_with_the_pools_own_files_is_not_refused(capsys, api, tmp_path):
    """`submit --pool` refuses a batch whose task files are "not the pool's". The pool's own
    files, written by json.dump (an emoji as its two escaped UTF-16 halves), were read by the YAML
    reader as two lone surrogates, and so "differed": refused, exit 1."""
    files = {"a.py": "print('done \U0001F600')"}
    Client(api=api, namespace=NS).create_pool("warm", 1, task_files=files, image="python:3.12")
    batch = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RolloutBatch", "metadata": {"name": "pooled"},
             "spec": {"episodes": 2, "image": "python:3.12", "command": ["python", "/task/a.py"],
                      "task": {"files": files}}}
    (tmp_path / "batch.json").write_text(json.dumps(batch))
    code, out, err = run(capsys, "submit", "-f", str(tmp_path / "batch.json"), "--pool", "warm")
    assert code == 0, (out, err)
    assert api.get_object("RolloutBatch", "pooled", NS)["spec"]["poolRef"] == {"name": "warm"}


def test_task_files_go_as_on_disk(capsys, api, tmp_path):
    (tmp_path / "table.csv").write_bytes(b"id,answer\r\n1,42\r\n")
    (tmp_path / "old.txt").write_bytes(b"a\rb")
    code, _, err = run(capsys, "pool", "create", "warm", "--size", "1", "--task-file", str(tmp_path / "table.csv"),
                       "--task-file", str(tmp_path / "old.txt"))
    assert code == 0, err
    assert api.get_object(POOL_KIND, "warm", NS)["spec"]["task"]["files"] == {"table.csv": "id,answer\r\n1,42\r\n",
                                                                               "old.txt": "a\rb"}


@pytest.mark.parametrize("extra, said", [
    (["--env", "A=1", "--env", "A=2"], "--env A given twice"),
    (["--verifier-image", ""], "--verifier-image: an empty image"),
])
def test_an_ambiguous_option_is_refused(capsys, api, task_files, extra, said):
    code, out, err = run(capsys, "pool", "create", "warm", "--size", "1", *task_files, *extra)
    assert code == 1 and said in err and len(err.splitlines()) == 1
    assert api.get_object(POOL_KIND, "warm", NS) is None


def test_pool_columns_match_the_crd():
    crd = yaml.safe_load((ROOT / "crds" / crdgen.POOL_FILE).read_text())
    cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    ours = [(h, "." + p, wide) for h, p, wide in render.POOL_COLUMNS]
    assert ours == [(c["name"].upper(), c["jsonPath"], c.get("priority", 0) > 0) for c in cols]


def test_the_pool_table_like_kubectl():
    pool = {"metadata": {"name": "warm", "namespace": NS, "creationTimestamp": "2026-01-01T11:58:00Z"},
            "spec": {"size": 4},
            "status": {"readyPods": 3, "startingPods": 1, "claimedPods": 12, "sandboxNamespace": "rp-0123456789",
                       "message": "3/4 warm",
                       "conditions": [{"type": "Stalled", "status": "False", "reason": "PoolFilling"},
                                      {"type": "Ready", "status": "False", "reason": "PoolFilling"}]}}
    header, line = render.table([pool], now=NOW, columns=render.POOL_COLUMNS).splitlines()
    assert line.split() == ["warm", "4", "3", "1", "12", "PoolFilling", "2m"]
    wide = render.table([pool], wide=True, all_namespaces=True, now=NOW, columns=render.POOL_COLUMNS).splitlines()
    assert wide[0].split() == ["NAMESPACE", "NAME", "SIZE", "READY", "STARTING", "CLAIMED", "STATUS", "AGE", "SANDBOX",
                               "MESSAGE"]
    assert wide[1].split()[-3:] == ["rp-0123456789", "3/4", "warm"]


def test_a_pool_with_a_verifier_container(capsys, api, task_files):
    code, _, err = run(capsys, "pool", "create", "graded", "--size", "1", *task_files, "--verifier")
    assert (code, err) == (0, "")
    assert api.get_object(POOL_KIND, "graded", NS)["spec"]["verifier"] == {}
    code, _, err = run(capsys, "pool", "create", "graded2", "--size", "1", *task_files, "--verifier-image", "grader:1")
    assert (code, err) == (0, "")
    assert api.get_object(POOL_KIND, "graded2", NS)["spec"]["verifier"] == {"image": "grader:1"}
