"""runner: a busy metrics or liveness port ends the operator with one line and exit 1."""
from __future__ import annotations

import argparse
import gc
import pathlib
import socket
import subprocess
import sys

import pytest

from rolloutbatch import runner

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture()
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args(["--metrics-address", "127.0.0.1"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_check_port(busy_port):
    runner.check_port("127.0.0.1", _free_port(), "--metrics-port")
    runner.check_port("127.0.0.1", 0, "--metrics-port")
    with pytest.raises(runner.StartupError, match=f"--liveness-port {busy_port}: address 127.0.0.1:{busy_port} "
                                                  "is already in use"):
        runner.check_port("127.0.0.1", busy_port, "--liveness-port")
    with pytest.raises(runner.StartupError, match=f"address \\*:{busy_port} is already in use"):
        runner.check_port(None, busy_port, "--liveness-port")   # the default, every address, covers it
    runner.check_port(None, _free_port(), "--metrics-port")
    with pytest.raises(runner.StartupError, match="cannot resolve"):
        runner.check_port("no-such-host.invalid", 8080, "--metrics-port")


@pytest.mark.parametrize("which", ["metrics_port", "liveness_port"])
def test_run_refuses_a_busy_port_in_one_line(which, busy_port, capsys, monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("must not get this far")

    monkeypatch.setattr(runner, "load_config", never)
    monkeypatch.setattr(runner.kopf, "run", never)
    ports = {"metrics_port": _free_port(), "liveness_port": _free_port(), which: busy_port}
    assert runner.run(_args(**ports)) == 1
    err = capsys.readouterr().err
    option = "--" + which.replace("_", "-")
    assert err == (f"rolloutbatch operator: error: {option} {busy_port}: address 127.0.0.1:{busy_port} is already "
                   "in use (is another operator running? choose another port)\n")


def test_run_refuses_one_port_for_both(capsys):
    port = _free_port()
    assert runner.run(_args(metrics_port=port, liveness_port=port)) == 1
    assert "must differ" in capsys.readouterr().err


def test_run_reports_a_wrong_kubeconfig_in_one_line(tmp_path, capsys):
    args = _args(metrics_port=_free_port(), liveness_port=_free_port(), kubeconfig=str(tmp_path / "nope"))
    assert runner.run(args) == 1
    assert capsys.readouterr().err == f"rolloutbatch operator: error: cannot load the kubeconfig {tmp_path}/nope: " \
                                      "no such file\n"


def test_the_command_exits_with_one_line(busy_port, tmp_path):
    """As a user starts it: no traceback, exit code 1."""
    proc = subprocess.run([sys.executable, "-m", "rolloutbatch.cli.main", "operator", "--metrics-address",
                           "127.0.0.1", "--metrics-port", str(busy_port), "--liveness-port", str(_free_port()),
                           "--kubeconfig", str(tmp_path / "unused")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"--metrics-port {busy_port}: address 127.0.0.1:{busy_port} is already in use" in proc.stderr


def _unreachable_kubeconfig(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                          "users: [{name: u, user: {token: t}}]\n"
                          "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
    return kubeconfig


def test_results_shard_rows_flag_defaults_to_the_setting_and_refuses_zero(capsys, tmp_path):
    from rolloutbatch.service.context import Settings

    assert _args().results_shard_rows == Settings().results_shard_rows
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    assert parser.parse_args(["--results-shard-rows", "250"]).results_shard_rows == 250
    kubeconfig = _unreachable_kubeconfig(tmp_path)
    args = _args(results_shard_rows=0, kubeconfig=str(kubeconfig), metrics_port=0, liveness_port=_free_port())
    assert runner.run(args) == 1
    assert "--results-shard-rows must be a whole number in [1, " in capsys.readouterr().err


def test_cluster_dns_discovery_retries_an_unavailable_api_and_says_what_it_found(monkeypatch, caplog):
    import logging

    from rolloutbatch.kube.errors import Forbidden, Unavailable
    answers = [Unavailable("restarting", status=503), Unavailable("restarting", status=503),
               [{"addressType": "IPv4", "endpoints": [{"addresses": ["10.9.0.1"]}]}]]

    def slices(api):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(runner.resources, "dns_endpoint_slices", slices)
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    log = logging.getLogger("t")
    with caplog.at_level(logging.INFO, "t"):
        assert runner.cluster_dns_cidrs(None, log) == ("10.9.0.1/32",)
        answers[:] = [Forbidden("no", status=403)]
        assert runner.cluster_dns_cidrs(None, log) == ()            # not ours to read: not retried
        answers[:] = [[]]
        assert runner.cluster_dns_cidrs(None, log) == ()
        answers[:] = [Unavailable("down", status=503)] * 6
        assert runner.cluster_dns_cidrs(None, log) == ()            # bounded
    text = caplog.text
    assert "10.9.0.1/32" in text and "not read" in text and "no kube-dns endpoint outside pods" in text


@pytest.mark.parametrize("flag", ["--status-interval", "--status-max-interval", "--results-interval",
                                  "--results-max-interval"])
@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_progress_intervals_must_be_finite_seconds(flag, value, capsys, tmp_path):
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    kubeconfig = _unreachable_kubeconfig(tmp_path)
    args = parser.parse_args([f"{flag}={value}", "--kubeconfig", str(kubeconfig), "--metrics-port", "0",
                              "--liveness-port", str(_free_port())])
    assert runner.run(args) == 1
    assert f"{flag} must be seconds in [0, 86400)" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["status", "results"])
def test_the_shortest_progress_interval_may_not_exceed_the_longest(kind, capsys, tmp_path):
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args([f"--{kind}-interval=30", f"--{kind}-max-interval=5",
                              "--kubeconfig", str(_unreachable_kubeconfig(tmp_path)), "--metrics-port", "0",
                              "--liveness-port", str(_free_port())])
    assert runner.run(args) == 1
    assert f"--{kind}-interval must not exceed --{kind}-max-interval" in capsys.readouterr().err


def test_a_service_cidr_that_is_not_one_is_refused(capsys, tmp_path):
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    assert parser.parse_args(["--service-cidr", "10.96.0.0/12", "--service-cidr", "fd00::/108"]).service_cidr == \
        ["10.96.0.0/12", "fd00::/108"]
    args = parser.parse_args(["--service-cidr", "10.96.0.0/33", "--kubeconfig", str(_unreachable_kubeconfig(tmp_path)),
                              "--metrics-port", "0", "--liveness-port", str(_free_port())])
    assert runner.run(args) == 1
    assert "--service-cidr '10.96.0.0/33' is not a CIDR" in capsys.readouterr().err


@pytest.mark.parametrize("flags, clusterwide, namespaces", [
    ([], True, ()),
    (["--watch-namespace", "team-a", "--watch-namespace", "team-b"], False, ("team-a", "team-b")),
])
def test_watch_namespace_runs_kopf_and_the_settings_namespaced(flags, clusterwide, namespaces, monkeypatch, tmp_path,
                                                                caplog):
    seen = {}

    async def fake_operator(**kwargs):
        seen.update(kwargs)
    monkeypatch.setattr(runner.kopf, "operator", fake_operator)
    monkeypatch.setattr(runner, "cluster_dns_cidrs", lambda api, log: ())
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args([*flags, "--no-leader-elect", "--kubeconfig", str(_unreachable_kubeconfig(tmp_path)), "--metrics-port", "0",
                              "--liveness-port", str(_free_port()), "--metrics-address", "127.0.0.1"])
    gc.unfreeze()
    try:
        with caplog.at_level("INFO", logger="rolloutbatch"):
            assert runner.run(args) == 0
        # what was loaded before kopf starts is out of the collector's full passes (runner.freeze_loaded)
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()   # this test process's heap is the collector's again
    assert seen["clusterwide"] is clusterwide and tuple(seen["namespaces"]) == namespaces
    settings = seen["memo"].ctx.settings
    assert settings.watch_namespaces == namespaces and settings.scope.clusterwide is clusterwide
    # the namespaced install says once what it does without cluster-wide rights
    assert ("without cluster-wide rights" in caplog.text) is not clusterwide


def test_a_watch_namespace_that_is_not_a_namespace_name_is_refused(capsys, tmp_path):
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args(["--watch-namespace", "Team_A", "--kubeconfig", str(_unreachable_kubeconfig(tmp_path)),
                              "--metrics-port", "0", "--liveness-port", str(_free_port())])
    assert runner.run(args) == 1
    assert "--watch-namespace 'Team_A' is not a namespace name" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [
    ("--pod-create-grace", "nan"),       # never stalls PodsNotCreated (every comparison with nan is False)
    ("--pod-create-grace", "-5"),        # stalls every batch at once
    ("--pod-create-grace", "0"),         # as good as -5: no pod exists the moment the Job does
    ("--unschedulable-grace", "inf"),
    ("--read-concurrency", "0"),         # asyncio.Semaphore(0): no log is ever read, batches hang
    ("--read-concurrency", "-1"),        # asyncio.Semaphore(-1): a ValueError traceback
    ("--read-concurrency", "100000000"),  # urllib3 fills its connection pool's queue up front
    ("--log-limit-bytes", "0"),          # every log read is 'truncated' at 0 bytes: LogLimitExceeded for all
    ("--results-shard-rows", "-3"),
    ("--metrics-port", "-1"),            # getaddrinfo's 'Servname not supported', not a port
    ("--liveness-port", "70000"),        # getaddrinfo wraps it to 4464
])
def test_operator_refuses_unusable_numeric_flags_in_one_line(flag, value, capsys, tmp_path, monkeypatch):
    reached = []

    async def fake_operator(**kwargs):
        reached.append(kwargs)
    monkeypatch.setattr(runner.kopf, "operator", fake_operator)
    monkeypatch.setattr(runner, "cluster_dns_cidrs", lambda api, log: ())
    ports = {"--metrics-port": "0", "--liveness-port": str(_free_port()), flag: value}
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args([f"{flag}={value}", "--no-leader-elect", "--metrics-address", "127.0.0.1",
                              "--kubeconfig", str(_unreachable_kubeconfig(tmp_path)),
                              *(f"{name}={port}" for name, port in ports.items() if name != flag)])
    assert runner.run(args) == 1 and not reached, f"{flag}={value} accepted"
    err = capsys.readouterr().err
    assert err.startswith(f"rolloutbatch operator: error: {flag} must be ") and err.count("\n") == 1, err


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def _status(url: str) -> int:
    import urllib.request
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status


def test_by_default_health_and_metrics_answer_on_ipv4_and_ipv6(monkeypatch, tmp_path):
    """The default listen address was 0.0.0.0: on an IPv6 single-stack cluster the kubelet probes
    the pod's IPv6 address, so liveness failed forever and /metrics was unreachable. Without
    --metrics-address both servers listen on every address of both families."""
    import asyncio
    loopbacks = ["127.0.0.1"] + (["[::1]"] if _has_ipv6_loopback() else [])
    liveness = _free_port()
    answers: dict = {}

    async def fake_operator(*, memo, ready_flag, **kwargs):
        ready_flag.set()
        for host in loopbacks:
            for port, path in ((liveness, "/healthz"), (memo.metrics.server_port, "/metrics")):
                answers[host, path] = await asyncio.to_thread(_status, f"http://{host}:{port}{path}")
    monkeypatch.setattr(runner.kopf, "operator", fake_operator)
    monkeypatch.setattr(runner, "cluster_dns_cidrs", lambda api, log: ())
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args(["--no-leader-elect", "--kubeconfig", str(_unreachable_kubeconfig(tmp_path)),
                              "--metrics-port", "0", "--liveness-port", str(liveness)])
    assert runner.run(args) == 0
    assert answers == {(host, path): 200 for host in loopbacks for path in ("/healthz", "/metrics")}


def test_results_shard_rows_past_what_one_document_holds_is_refused_at_start(capsys, tmp_path):
    """--results-shard-rows took any value above 0: at 100000 a batch of 20,000 episodes was one
    unsharded results document whose gzip, every field shed, the API refused (1 MiB): the batch
    stalled and every row was lost. The flag is bounded by what one document holds."""
    from rolloutbatch.core.results import MAX_DOCUMENT_ROWS

    kubeconfig = _unreachable_kubeconfig(tmp_path)
    args = _args(results_shard_rows=MAX_DOCUMENT_ROWS + 1, kubeconfig=str(kubeconfig), metrics_port=0,
                 liveness_port=_free_port())
    assert runner.run(args) == 1
    assert f"--results-shard-rows must be a whole number in [1, {MAX_DOCUMENT_ROWS}]" in capsys.readouterr().err
