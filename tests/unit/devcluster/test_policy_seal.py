"""The real node's policy seal: which rules seal an address, and when kube-router's are in place."""
from __future__ import annotations

import json

from devcluster import nodeconfig, policy_seal
from tests.unit.devcluster.test_nodeconfig import NODE

SAVE = """*filter
:RB-SEAL - [0:0]
-A FORWARD -j KUBE-ROUTER-FORWARD
-A RB-SEAL -s 10.9.128.5/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.5 until its policy is programmed" -j DROP
-A RB-SEAL -d 10.9.128.5/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.5 until its policy is programmed" -j DROP
-A RB-SEAL -s 10.9.128.6/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.6 until its policy is programmed" -j DROP
-A KUBE-ROUTER-FORWARD -s 10.9.128.5/32 -m comment --comment "rule to jump traffic from POD name:p1 namespace: ns to chain KUBE-POD-FW-ABC" -j KUBE-POD-FW-ABC
COMMIT
"""


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
