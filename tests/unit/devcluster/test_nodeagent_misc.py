"""devcluster.nodeagent: quantities, pod IPs, node objects."""
from __future__ import annotations

from decimal import Decimal

from devcluster.nodeagent.ipam import PodIPs, node_index
from devcluster.nodeagent.node import lease_body, node_status
from devcluster.nodeagent.quantity import ceil_div
from rolloutbatch.core.k8s_rules import parse_quantity


def test_quantities():
    assert parse_quantity("100m") == Decimal("0.1")
    assert parse_quantity("64Gi") == 64 * 2**30
    assert parse_quantity("1k") == 1000 and parse_quantity("2") == 2 and parse_quantity("1e3") == 1000
    assert ceil_div(parse_quantity("250m"), Decimal(1)) == 1


def test_pod_ips():
    assert node_index("devnode-2") == 2
    ips = PodIPs("devnode-1")
    a, b = ips.allocate(), ips.allocate()
    assert (a, b) == ("10.244.1.2", "10.244.1.3")
    ips.release(a)
    assert ips.allocate() == a
    many = {ips.allocate() for _ in range(300)}
    assert len(many) == 300 and all(ip.split(".")[2] == "1" for ip in many)


def test_node_status_fields():
    st = node_status("devnode-0", port=12345, capacity={"cpu": "32", "memory": "64Gi", "pods": "250",
                                                         "ephemeral-storage": "100Gi"}, now=1_800_000_000)
    assert st["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 12345}}
    assert st["allocatable"]["pods"] == "250"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in st["addresses"]
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert ready["status"] == "True" and ready["reason"] == "KubeletReady"
    assert st["nodeInfo"]["kubeletVersion"] == "v1.37.2"


def test_lease_body():
    b = lease_body("n", "uid-1", 1_800_000_000.5, rv="7")
    assert b["spec"]["leaseDurationSeconds"] == 40 and b["spec"]["holderIdentity"] == "n"
    assert b["metadata"]["namespace"] == "kube-node-lease" and b["metadata"]["resourceVersion"] == "7"
    assert b["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert b["spec"]["renewTime"].endswith(".500000Z")
