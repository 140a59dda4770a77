"""The real node's policy seal: which rules seal an address, and when kube-router's are in place."""
from __future__ import annotations

import json

from devcluster import nodeconfig, policy_seal
from tests.unit.devcluster.test_nodeconfig import NODE

FILTER = """*filter
-A FORWARD -j KUBE-ROUTER-FORWARD
-A KUBE-ROUTER-FORWARD -s 10.9.128.5/32 -m comment --comment "rule to jump traffic from POD name:p1 namespace: ns to chain KUBE-POD-FW-ABC" -j KUBE-POD-FW-ABC
COMMIT
"""
RAW = """*raw
:RB-SEAL - [0:0]
-A PREROUTING -j RB-SEAL
-A RB-SEAL -s 10.9.128.5/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.5 until its policy is programmed" -j DROP
-A RB-SEAL -d 10.9.128.5/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.5 until its policy is programmed" -j DROP
-A RB-SEAL -s 10.9.128.6/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.6 until its policy is programmed" -j DROP
COMMIT
"""
SAVE = FILTER + RAW


def test_programmed_addresses_are_those_kube_router_jumps_for():
    assert policy_seal.programmed_addresses(SAVE) == {"10.9.128.5"}


def test_seal_rules_group_both_directions_by_address():
    sealed = policy_seal.seal_rules(SAVE)
    assert set(sealed) == {"10.9.128.5", "10.9.128.6"}
    assert len(sealed["10.9.128.5"]) == 2


def test_a_saved_seal_line_deletes_exactly_that_rule():
    line = policy_seal.seal_rules(SAVE)["10.9.128.5"][0]
    assert policy_seal.delete_args(line) == [
        "-D", "RB-SEAL", "-s", "10.9.128.5/32", "-m", "comment", "--comment",
        "rolloutbatch devcluster: 10.9.128.5 until its policy is programmed", "-j", "DROP"]


def test_seal_args_round_trip_through_the_save_format():
    for args in policy_seal.seal_args("10.9.128.7"):
        saved = " ".join(a if " " not in a else json.dumps(a) for a in args)
        assert policy_seal.seal_rules(saved) == {"10.9.128.7": [saved]}
        assert policy_seal.delete_args(saved) == ["-D", *args[1:]]


def test_the_seal_runs_after_the_bridge_in_every_node_conflist():
    plugins = nodeconfig.cni_conflist(NODE)["plugins"]
    assert [p["type"] for p in plugins] == ["bridge", nodeconfig.SEAL_PLUGIN]
    assert plugins[1]["nodeDir"] == str(NODE.paths.root)


def test_version_and_unknown_commands_need_no_iptables(tmp_path):
    assert "1.0.0" in policy_seal._plugin("VERSION", {}, tmp_path)["supportedVersions"]
    assert policy_seal._plugin("CHECK", {}, tmp_path) is None


def test_the_seal_lives_where_kube_routers_restore_of_the_filter_table_cannot_wipe_it(monkeypatch):
    """kube-router restores the whole filter table it saved (no --noflush): a seal added to it
    in between would vanish. Every seal command names the raw table, hooked at PREROUTING."""
    calls = []
    monkeypatch.setattr(policy_seal.subprocess, "run", lambda argv, **kw: calls.append(argv) or
                        policy_seal.subprocess.CompletedProcess(argv, 1, "", ""))
    policy_seal._iptables(policy_seal.seal_args("10.9.128.7")[0])
    assert calls[-1][:4] == ["iptables", "-w", "-t", "raw"]
    assert policy_seal.TABLE == "raw"
    assert ["-I", "PREROUTING", "1", "-j", policy_seal.CHAIN] in policy_seal.chain_setup_args()
    assert not any("FORWARD" in args or "INPUT" in args for args in policy_seal.chain_setup_args())
    assert policy_seal.seal_rules(FILTER) == {} and set(policy_seal.seal_rules(RAW)) == {"10.9.128.5", "10.9.128.6"}
