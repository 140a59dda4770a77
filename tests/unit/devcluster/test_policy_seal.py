"""The real node's policy seal: which rules seal an address, and when kube-router's are in place."""
from __future__ import annotations

import json

import pytest

from devcluster import nodeconfig, policy_seal
from tests.unit.devcluster.test_nodeconfig import NODE

FILTER = """*filter
-A FORWARD -j KUBE-ROUTER-FORWARD
-A KUBE-ROUTER-FORWARD -s 10.9.128.5/32 -m comment --comment "rule to jump traffic from POD name:p1 namespace: ns to chain KUBE-POD-FW-ABC" -j KUBE-POD-FW-ABC
COMMIT
"""
P1, P2 = policy_seal.pod_key("ns", "p1"), policy_seal.pod_key("ns", "p2")
RAW = f"""*raw
:RB-SEAL - [0:0]
-A PREROUTING -j RB-SEAL
-A RB-SEAL -s 10.9.128.5/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.5 of pod {P1} until its policy is programmed" -j DROP
-A RB-SEAL -d 10.9.128.5/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.5 of pod {P1} until its policy is programmed" -j DROP
-A RB-SEAL -s 10.9.128.6/32 -m comment --comment "rolloutbatch devcluster: 10.9.128.6 of pod {P2} until its policy is programmed" -j DROP
COMMIT
"""
SAVE = FILTER + RAW


def test_programmed_pods_are_those_kube_router_jumps_for():
    assert policy_seal.programmed_pods(SAVE) == {("10.9.128.5", P1)}
    assert policy_seal.unsealable(policy_seal.seal_rules(SAVE), policy_seal.programmed_pods(SAVE)) == {"10.9.128.5"}


def test_a_jump_for_another_pod_at_the_same_address_leaves_the_seal():
    """kube-router keys a node's pods by address: a deleted pod whose object still shows the
    address the node gave a new pod keeps its jump, with its own policies, for a while."""
    other = FILTER.replace("name:p1 namespace: ns", "name:old namespace: open")
    sealed = policy_seal.seal_rules(RAW)
    assert policy_seal.unsealable(sealed, policy_seal.programmed_pods(other)) == set()
    assert policy_seal.unsealable(sealed, policy_seal.programmed_pods(FILTER)) == {"10.9.128.5"}


def test_a_seal_naming_no_pod_goes_with_any_jump_for_its_address():
    """Seals a node made before they named their pod (a node restarted on newer code)."""
    old = RAW.replace(f" of pod {P1}", "")
    other = FILTER.replace("name:p1 namespace: ns", "name:old namespace: open")
    assert policy_seal.unsealable(policy_seal.seal_rules(old), policy_seal.programmed_pods(other)) == {"10.9.128.5"}


def test_the_pod_comes_from_the_runtimes_cni_args():
    args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=ep-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u"
    assert policy_seal.cni_pod(args) == ("team-a", "ep-0")
    key = policy_seal.pod_key("team-a", "x" * 253)
    assert all(len(a[-3]) < 256 for a in policy_seal.seal_args("10.9.128.7", ("team-a", "x" * 253)))
    assert key in policy_seal.seal_args("10.9.128.7", ("team-a", "x" * 253))[0][-3]


@pytest.mark.parametrize("args", ["", "IgnoreUnknown=1", "K8S_POD_NAMESPACE=ns", "K8S_POD_NAME=p;K8S_POD_NAMESPACE="])
def test_a_seal_without_its_pod_in_cni_args_is_lifted_by_any_jump_for_its_address(args):
    """Never a seal no jump could lift: the pod would be cut off for its whole life."""
    assert policy_seal.cni_pod(args) is None
    rules = "*raw\n" + "\n".join(" ".join(json.dumps(a) if " " in a else a for a in argv)
                                  for argv in policy_seal.seal_args("10.9.128.5", None)) + "\n"
    sealed = policy_seal.seal_rules(rules)
    other = FILTER.replace("name:p1 namespace: ns", "name:any namespace: other")
    assert policy_seal.unsealable(sealed, policy_seal.programmed_pods(other)) == {"10.9.128.5"}


def test_seal_rules_group_both_directions_by_address():
    sealed = policy_seal.seal_rules(SAVE)
    assert set(sealed) == {"10.9.128.5", "10.9.128.6"}
    assert len(sealed["10.9.128.5"]) == 2


def test_a_saved_seal_line_deletes_exactly_that_rule():
    line = policy_seal.seal_rules(SAVE)["10.9.128.5"][0]
    assert policy_seal.delete_args(line) == [
        "-D", "RB-SEAL", "-s", "10.9.128.5/32", "-m", "comment", "--comment",
        f"rolloutbatch devcluster: 10.9.128.5 of pod {P1} until its policy is programmed", "-j", "DROP"]


def test_seal_args_round_trip_through_the_save_format():
    for args in policy_seal.seal_args("10.9.128.7", ("ns", "p7")):
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
    policy_seal._iptables(policy_seal.seal_args("10.9.128.7", ("ns", "p7"))[0])
    assert calls[-1][:4] == ["iptables", "-w", "-t", "raw"]
    assert policy_seal.TABLE == "raw"
    assert ["-I", "PREROUTING", "1", "-j", policy_seal.CHAIN] in policy_seal.chain_setup_args()
    assert not any("FORWARD" in args or "INPUT" in args for args in policy_seal.chain_setup_args())
    assert policy_seal.seal_rules(FILTER) == {} and set(policy_seal.seal_rules(RAW)) == {"10.9.128.5", "10.9.128.6"}
