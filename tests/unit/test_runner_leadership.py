"""runner's leader election: flags, the Lease's namespace for a local operator, and the operator's
life over an in-memory API server: /readyz tells the standby from the leader, and kopf starts
only in the leader."""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import urllib.error
import urllib.request

import kopf
import pytest

from rolloutbatch import runner
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.core import leadership as L
from rolloutbatch.health import readiness
from rolloutbatch.kube.errors import Forbidden
from rolloutbatch.service.leadership import Elector
from tests.support.memory_api import MemoryApi

NS = L.DEFAULT_NAMESPACE


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return parser.parse_args(["--metrics-address", "127.0.0.1", *argv])


def test_flags_default_to_client_gos_timing_and_leader_election_on():
    args = _args()
    assert args.leader_elect and args.leader_election_namespace is None
    assert (args.leader_election_lease_duration, args.leader_election_renew_deadline,
            args.leader_election_retry_period) == (15, 10, 2)
    assert not _args("--no-leader-elect").leader_elect


def test_a_bad_timing_and_a_namespace_the_kubeconfig_may_not_create_are_startup_errors(monkeypatch):
    log = runner.logging.getLogger("t")
    with pytest.raises(runner.StartupError, match="longer than the renew deadline"):
        runner.leader_elector(_args("--leader-election-lease-duration", "5"), None, log)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr(runner, "Api", lambda config, **kw: "api")

    def forbidden(api, name, labels):
        raise Forbidden('namespaces "rolloutbatch-system" is forbidden', status=403)
    monkeypatch.setattr(runner.leases, "ensure_namespace", forbidden)
    with pytest.raises(runner.StartupError, match="namespace rolloutbatch-system cannot be read or created with "
                                                  "this kubeconfig .*--no-leader-elect"):
        runner.leader_elector(_args(), None, log)
    assert runner.leader_elector(_args("--no-leader-elect"), None, log) is None


def test_in_a_pod_the_identity_is_the_pod_name_and_the_namespace_the_pods(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    monkeypatch.setenv("POD_NAME", "rolloutbatch-operator-7c9-x2x")
    monkeypatch.setattr(runner, "Api", lambda config, **kw: "api")
    monkeypatch.setattr(runner.leases, "ensure_namespace", lambda *a: pytest.fail("not outside a pod"))
    one, two = (runner.leader_elector(_args(), None, runner.logging.getLogger("t")) for _ in range(2))
    assert one.namespace == "ops" and L.holder_pod(one.identity) == "rolloutbatch-operator-7c9-x2x"
    assert one.identity != two.identity   # a restarted process is a new candidate


def test_readiness_is_200_for_a_standby_and_a_reconciling_leader_only():
    assert readiness({"role": "standby"}, False)[0] == 200
    # a standby that cannot read the Lease could never lead: not ready, and the body says why
    assert readiness({"role": "standby", "error": "leases is forbidden"}, False) == (
        503, {"role": "standby", "error": "leases is forbidden", "reconciling": False})
    assert readiness({"role": "leader"}, True) == (200, {"role": "leader", "reconciling": True})
    assert readiness({"role": "leader"}, False)[0] == 503     # its reconciler is starting
    assert readiness({"role": "starting"}, False)[0] == 503
    assert readiness({"role": "stopped"}, False)[0] == 503


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_standby_serves_health_and_starts_kopf_only_once_it_holds_the_lease(monkeypatch):
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    timing = L.Timing(lease_duration=3, renew_deadline=2, retry_period=0.2)
    leader = Elector(api, NS, "installed-pod_1", timing)
    assert leader.try_once()
    started: list = []

    async def fake_kopf(*, stop_flag, ready_flag, **kwargs):
        started.append(api.get_object("Lease", L.LEASE_NAME, NS)["spec"]["holderIdentity"])
        ready_flag.set()
        await stop_flag.wait()
    monkeypatch.setattr(runner.kopf, "operator", fake_kopf)
    port = _free_port()
    args = _args("--liveness-port", str(port))
    local = Elector(api, NS, "laptop_2", timing)

    async def main() -> None:
        serving = asyncio.create_task(runner._serve(args, kopf.Memo(), local, CLUSTERWIDE))
        for _ in range(50):
            await asyncio.sleep(0.1)
            code, body = await asyncio.to_thread(_get, port, "/readyz")
            if code == 200:
                break
        assert json.loads(body)["role"] == "standby" and json.loads(body)["holder"] == "installed-pod_1"
        assert (await asyncio.to_thread(_get, port, "/healthz"))[0] == 200
        await asyncio.sleep(1)                  # the lease stays held (renewed by hand below)
        assert leader.try_once() and started == []
        leader.stop(release=True)               # the installed operator is stopped gracefully
        for _ in range(50):
            await asyncio.sleep(0.1)
            code, body = await asyncio.to_thread(_get, port, "/readyz")
            if json.loads(body)["role"] == "leader" and code == 200:
                break
        assert started == ["laptop_2"] and json.loads(body)["reconciling"]
        signal.raise_signal(signal.SIGTERM)   # as `kill` would: kopf (here, ours) stops
        await asyncio.wait_for(serving, 10)
    asyncio.run(main())
    assert api.get_object("Lease", L.LEASE_NAME, NS)["spec"]["holderIdentity"] == ""   # released on the way out


def test_the_demo_sees_a_live_leader_and_none_once_it_released_or_expired(monkeypatch):
    from rolloutbatch import demo

    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert demo.live_leader(api) is None                       # no Lease: the demo starts its own
    installed = Elector(api, NS, "rolloutbatch-operator-5d8-abcde_1f2e", L.Timing())
    installed.try_once()
    assert demo.live_leader(api) == "rolloutbatch-operator-5d8-abcde_1f2e"
    installed.stop(release=True)
    assert demo.live_leader(api) is None


def test_kopfs_own_stop_on_a_signal_raises_the_operators_stop_flag_too():
    """kopf stops on SIGTERM by its own handler and then waits 5 s for its task watching our stop
    flag unless the flag is raised: the cleanup handler raises it (a graceful stop took 5 s more)."""
    from rolloutbatch.handlers import lifecycle
    cleanups = [h.fn for h in kopf.get_default_registry()._activities.get_all_handlers()
                if h.activity.value == "cleanup"]
    assert lifecycle.raise_stop_flag in cleanups
    assert asyncio.iscoroutinefunction(lifecycle.raise_stop_flag)   # on the loop: asyncio.Event is not thread-safe

    async def main() -> None:
        stop = asyncio.Event()
        await lifecycle.raise_stop_flag(memo=kopf.Memo(stop=stop))
        assert stop.is_set()
        await lifecycle.raise_stop_flag(memo=kopf.Memo())   # a memo without one (kopf run without ours)
    asyncio.run(main())


def test_without_leader_election_the_only_operator_exports_leader_1_while_it_reconciles(monkeypatch, tmp_path):
    """With --no-leader-elect the process reconciles alone, yet rolloutbatch_leader stayed 0: the
    gauge was hooked to the elector only, so the dashboard's sum(rolloutbatch_leader) said nobody
    reconciled while /readyz said leader. It is 1 while kopf runs and 0 once it stopped."""
    seen: list = []

    async def fake_kopf(*, memo, ready_flag, **kwargs):
        seen.append(memo.metrics.registry.get_sample_value("rolloutbatch_leader"))
        ready_flag.set()
    monkeypatch.setattr(runner.kopf, "operator", fake_kopf)
    monkeypatch.setattr(runner, "cluster_dns_cidrs", lambda api, log: ())
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                          "users: [{name: u, user: {token: t}}]\n"
                          "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
    memos: list = []
    memo_type = kopf.Memo
    monkeypatch.setattr(runner.kopf, "Memo", lambda **kw: memos.append(memo_type(**kw)) or memos[-1])
    args = _args("--no-leader-elect", "--kubeconfig", str(kubeconfig), "--metrics-port", "0",
                 "--liveness-port", str(_free_port()))
    assert runner.run(args) == 0
    assert seen == [1.0]
    assert memos[0].metrics.registry.get_sample_value("rolloutbatch_leader") == 0.0
