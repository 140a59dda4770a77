"""The `rolloutbatch` command end to end, run as a user would (a subprocess) against the devcluster."""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from tests.support.kube import kubeconfig_path

pytestmark = pytest.mark.cluster

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rolloutbatch.cli.main", "--kubeconfig", str(kubeconfig_path()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_submit_watch_results_get_cleanup(operator_process, namespace, tmp_path):
    run = cli("submit", "-f", "examples/shipping-fix-parallel.yaml", "--watch", "-n", namespace)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "rolloutbatch.rl.agentruntime.io/shipping-fix-parallel created" in out
    for metric in ("successful_episodes", "reward_sum", "batch_to_all_ready_seconds", "pod_to_ready_p95_seconds",
                   "client_job_complete_seconds"):
        assert metric in out, out
    assert "shipping-fix-parallel: Succeeded" in out
    # the last timing lands a moment after the phase: the watch waits for it (it showed an empty cell)
    assert re.search(r"client_job_complete_seconds\W+\d", out), out

    got = cli("get", "shipping-fix-parallel", "-n", namespace, "-o", "json")
    assert got.returncode == 0, got.stderr
    obj = json.loads(got.stdout)
    assert obj["status"]["phase"] == "Succeeded" and obj["status"]["rewardSum"] == 10

    table = cli("list", "-n", namespace)
    assert table.returncode == 0
    assert table.stdout.split()[:9] == ["NAME", "STATUS", "PROGRESS", "RUNNING", "SUCCEEDED", "FAILED", "LOST",
                                        "REWARD", "AGE"]
    assert "Succeeded" in table.stdout and "10/10" in table.stdout

    target = tmp_path / "rl-parallel-10"
    res = cli("results", "shipping-fix-parallel", "-n", namespace, "--output", str(target))
    assert res.returncode == 0, res.stdout + res.stderr
    names = {p.name for p in target.iterdir()}
    assert {"results.json", "job.json", "pods.json", "events.txt", "receipt.json"} <= names
    document = json.loads((target / "results.json").read_text())
    assert document["successful_episodes"] == 10 and len(document["pods"]) == 10
    receipt = json.loads((target / "receipt.json").read_text())
    assert receipt["namespace"] == namespace and receipt["batch_uid"] == obj["metadata"]["uid"]
    # the sandbox the export saw: DeleteOnSuccess may have removed it (and its name from the
    # status) between `get` and `results`
    assert receipt["sandbox_namespace"] in (obj["status"]["sandboxNamespace"], None) and receipt["context"]
    # Pods may already be gone (DeleteOnSuccess); when they exist each has a log next to it.
    pods = json.loads((target / "pods.json").read_text())
    assert {p["metadata"]["name"] + ".log" for p in pods} <= names

    again = cli("results", "shipping-fix-parallel", "-n", namespace, "--output", str(target))
    assert again.returncode == 1 and "already exists" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    gone = cli("cleanup", "shipping-fix-parallel", "-n", namespace, "--timeout", "120")
    assert gone.returncode == 0, gone.stderr
    missing = cli("get", "shipping-fix-parallel", "-n", namespace)
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_failed_batch_exits_1(operator_process, namespace, tmp_path):
    f = tmp_path / "fail.yaml"
    f.write_text(json.dumps({
        "apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": "fails"},
        "spec": {"episodes": 2, "command": ["python", "/task/episode.py"],
                 "task": {"files": {"episode.py": "raise SystemExit(3)"}},
                 "episodeTimeoutSeconds": 60, "activeDeadlineSeconds": 120}}))
    run = cli("submit", "-f", str(f), "-w", "-n", namespace)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "fails: Failed" in run.stdout


def test_bad_file_and_bad_spec_are_one_line(operator_process, namespace, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: rl.agentruntime.io/v1alpha1\nkind: RolloutBatch\nmetadata: {name: x\n")
    run = cli("submit", "-f", str(bad), "-n", namespace)
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1 and "not valid YAML" in run.stderr
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(json.dumps({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
                                   "metadata": {"name": "x"},
                                   "spec": {"episodes": 2, "parallelism": 5, "task": {"files": {"e.py": ""}}}}))
    run = cli("submit", "-f", str(invalid), "-n", namespace)
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1
    assert "parallelism must be less than or equal to spec.episodes" in run.stderr
    assert "Traceback" not in run.stderr


def _kubectl(*args: str) -> subprocess.CompletedProcess:
    from tests.support.operator import kubectl

    return kubectl(*args, check=False)


def test_submit_refuses_a_misspelt_field_like_kubectl(operator_process, namespace, tmp_path):
    """Strict field validation: a typo is refused with the API's message, and nothing is created."""
    typo = tmp_path / "typo.yaml"
    typo.write_text(json.dumps({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
                                "metadata": {"name": "typo"},
                                "spec": {"episodes": 2, "paralellism": 2,
                                         "task": {"files": {"episode.py": ""}, "mountpath": "/t"}}}))
    run = cli("submit", "-f", str(typo), "-n", namespace)
    assert run.returncode == 1, run.stdout + run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert 'unknown field "spec.paralellism"' in run.stderr and 'unknown field "spec.task.mountpath"' in run.stderr
    listed = _kubectl("get", "rolloutbatches", "-n", namespace, "-o", "name")
    assert listed.returncode == 0 and listed.stdout.strip() == ""
    # kubectl says the same (its server-side validation is the same check).
    ours = _kubectl("create", "-f", str(typo), "-n", namespace)
    assert ours.returncode != 0 and "spec.paralellism" in ours.stderr


@pytest.mark.parametrize("path", ["rolloutbatch.spec", "rolloutbatch.spec.task", "rolloutbatch.spec.isolation",
                                  "rolloutbatch.spec.cleanup", "rolloutbatch.spec.podTemplate",
                                  "rolloutbatch.spec.workspace", "rolloutbatch.spec.retries",
                                  "rolloutbatch.status", "rolloutbatch.status.podToReadySeconds",
                                  "rolloutbatch.status.conditions"])
def test_kubectl_explain_describes_every_field(path):
    from tests.support.operator import install_crd

    install_crd()
    run = _kubectl("explain", path)
    assert run.returncode == 0, run.stderr
    assert "<no description>" not in run.stdout, run.stdout
    assert "FIELDS:" in run.stdout


def test_wide_listing_has_one_namespace_column(operator_process, namespace, tmp_path):
    f = tmp_path / "one.yaml"
    f.write_text(json.dumps({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
                             "metadata": {"name": "wide"},
                             "spec": {"episodes": 1, "task": {"files": {"episode.py": "raise SystemExit(1)"}},
                                      "cleanup": {"sandbox": "Never"}}}))
    assert cli("submit", "-f", str(f), "-n", namespace).returncode == 0
    wait = _kubectl("wait", "--for=jsonpath={.status.sandboxNamespace}", "rb/wide", "-n", namespace, "--timeout=60s")
    assert wait.returncode == 0, wait.stderr
    for run in (_kubectl("get", "rb", "-A", "-o", "wide"), cli("list", "-A", "-o", "wide")):
        assert run.returncode == 0, run.stderr
        header, *rows = run.stdout.splitlines()
        assert header.split().count("NAMESPACE") == 1 and "SANDBOX" in header.split(), header
        (mine,) = [r for r in rows if r.split()[:2] == [namespace, "wide"]]
        assert " rb-" in mine, mine


def test_submit_of_several_objects_is_all_or_nothing(operator_process, namespace, tmp_path):
    good = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": "first"},
            "spec": {"episodes": 1, "task": {"files": {"episode.py": ""}}}}
    typo = {**good, "metadata": {"name": "second"}, "spec": {**good["spec"], "episodez": 1}}
    f = tmp_path / "two.yaml"
    f.write_text(json.dumps(good) + "\n---\n" + json.dumps(typo))
    run = cli("submit", "-f", str(f), "-n", namespace)
    assert run.returncode == 1 and 'unknown field "spec.episodez"' in run.stderr, run.stdout + run.stderr
    assert "created" not in run.stdout
    listed = _kubectl("get", "rolloutbatches", "-n", namespace, "-o", "name")
    assert listed.returncode == 0 and listed.stdout.strip() == ""


def _episode_batch(name: str, source: str, episodes: int = 2) -> dict:
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch", "metadata": {"name": name},
            "spec": {"episodes": episodes, "command": ["python", "/task/episode.py"],
                     "task": {"files": {"episode.py": source}},
                     "episodeTimeoutSeconds": 120, "activeDeadlineSeconds": 240}}


REWARD_AFTER = """
import json, os, sys, time
def emit(event, **f):
    print(json.dumps({"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **f}), flush=True)
emit("ready")
if os.environ["EPISODE_INDEX"] == "0":
    print("giving up on purpose", flush=True)
    sys.exit(3)
time.sleep(8)
emit("reward", reward=1.0)
"""


def test_watch_logs_cleanup_exit_codes(operator_process, namespace, tmp_path):
    f = tmp_path / "b.yaml"
    f.write_text(json.dumps(_episode_batch("longrun", REWARD_AFTER)))
    assert cli("submit", "-f", str(f), "-n", namespace).returncode == 0
    early = cli("watch", "longrun", "-n", namespace, "--timeout", "2")
    assert early.returncode == 3, early.stdout + early.stderr
    assert f"re-attach with: rolloutbatch watch longrun -n {namespace}" in early.stderr
    done = cli("watch", "longrun", "-n", namespace, "--timeout", "200")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "longrun: Failed" in done.stdout and "by reason" in done.stdout and "episode 0" in done.stdout
    log = cli("logs", "longrun", "-n", namespace, "--index", "0")
    assert log.returncode == 0 and "giving up on purpose" in log.stdout, log.stdout + log.stderr
    assert cli("logs", "longrun", "-n", namespace, "--index", "7").returncode == 1
    gone = cli("cleanup", "longrun", "never-was", "-n", namespace, "--ignore-not-found", "--timeout", "120")
    assert gone.returncode == 0, gone.stderr
    assert cli("cleanup", "longrun", "-n", namespace).returncode == 1


def test_logs_and_results_of_a_batch_whose_sandbox_is_gone(operator_process, namespace, tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text(json.dumps(_episode_batch("okgone", REWARD_AFTER.replace('"0"', '"none"').replace("8", "0"))))
    run = cli("submit", "-f", str(f), "-n", namespace, "--watch", "--timeout", "200")
    assert run.returncode == 0, run.stdout + run.stderr
    import time

    deadline = time.monotonic() + 60       # DeleteOnSuccess: the sandbox goes soon after
    while "sandboxNamespace" in json.loads(cli("get", "okgone", "-n", namespace, "-o", "json").stdout)["status"]:
        assert time.monotonic() < deadline, "the sandbox of a succeeded batch was not deleted"
        time.sleep(1)
    log = cli("logs", "okgone", "-n", namespace, "--index", "1")
    # the pod is gone, its row keeps the end of its log: shown, said to be the kept tail, exit 0
    assert log.returncode == 0, log.stdout + log.stderr
    assert "no pod of okgone" in log.stderr and "Only cleanup.sandbox: Never keeps" in log.stderr
    assert "episode 1: succeeded" in log.stdout and "as its results row keeps them" in log.stdout
    assert '"event": "reward"' in log.stdout
    res = cli("results", "okgone", "-n", namespace, "--output", str(tmp_path / "out"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "empty: job.json, pods.json" in res.stdout and "is gone" in res.stdout
    assert "job.json" not in res.stdout.splitlines()[0]      # not listed as written and as empty
