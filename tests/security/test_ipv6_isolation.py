"""Neighbour episodes over IPv6 link-local. The pods' network is IPv4 (host-local IPAM,
kube-router's IPv4 policies), but a kernel gives every interface an fe80:: address, and nothing
filters IPv6: two episodes of a DenyAll batch on one node found each other without help (ARP for
every address of the pod subnet, which no policy drops, then the EUI-64 link-local of each MAC)
and connected to each other's listener, under runc and gVisor. The node's CNI now turns IPv6 off
in each pod (devcluster/policy_seal.py). The attack still runs: the ARP discovery finds the node
and the neighbour, and the node's IPv4 stays denied (the policy is in force)."""
from __future__ import annotations

import json

import pytest

from tests.support.batches import apply, episode_batch, results, unique, wait_finished

pytestmark = [pytest.mark.cluster]

NODE = "devnode-1"
HEALTH_PORT = 20244      # kube-router-netpol --health-port on every node, bound to all addresses

NEIGHBOUR = r'''
import json, os, socket, struct, threading, time
knocks = []
def listen():
    srv = socket.socket(socket.AF_INET6)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", 8081)); srv.listen(16)
    while True:
        conn, addr = srv.accept(); knocks.append(addr[0]); conn.close()
threading.Thread(target=listen, daemon=True).start()
idx = socket.if_nametoindex("eth0")
try:
    v6 = [l.split()[0] for l in open("/proc/net/if_inet6") if l.split()[-1] != "lo"]
except OSError:
    v6 = []
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
found, reached, node_ipv4 = set(), [], None
# Discovery without privilege: a datagram to every address of the pod subnet makes the kernel ARP
# for it (ARP is not IP: no policy drops it); each answering MAC gives its EUI-64 link-local.
import ipaddress
me = [l.split() for l in open("/proc/net/route").readlines()[1:] if l.split()[0] == "eth0" and l.split()[1] != "00000000"][0]
net = ipaddress.IPv4Network((socket.inet_ntoa(struct.pack("<I", int(me[1], 16))), bin(int(me[7], 16)).count("1")))
deadline = time.time() + 40
while time.time() < deadline and not reached:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for h in net.hosts():
        try:
            u.sendto(b"x", (str(h), 9))
        except OSError:
            pass
    time.sleep(2)
    for line in open("/proc/net/arp").readlines()[1:]:
        f = line.split()
        if f[2] != "0x2":
            continue
        b = bytes.fromhex(f[3].replace(":", ""))
        eui = bytes([b[0] ^ 2]) + b[1:3] + b"\xff\xfe" + b[3:]
        found.add(str(ipaddress.IPv6Address(b"\xfe\x80" + b"\0" * 6 + eui)))
    for a in sorted(found):
        if a in reached:
            continue
        try:
            c = socket.socket(socket.AF_INET6); c.settimeout(1); c.connect((a, 8081, 0, idx)); c.close()
            reached.append(a)
        except Exception:
            pass
try:
    socket.create_connection((os.environ["NODE4"], int(os.environ["PORT"])), timeout=3).close(); node_ipv4 = True
except Exception:
    node_ipv4 = False
time.sleep(float(os.environ["LINGER"]))
emit("reward", reward=1, found=sorted(found), reached=reached, node_ipv4=node_ipv4, v6=v6,
     knocks=[k for k in knocks if k not in ("::1", "127.0.0.1", "::ffff:127.0.0.1")])
'''


@pytest.mark.parametrize("runtime", ["runc", "cube"])
def test_neighbour_episodes_of_a_denyall_batch_cannot_reach_each_other_over_ipv6(operator_process, namespace, core,
                                                                               runtime):
    """Two runc episodes of one DenyAll batch on one node find each other without help (ARP for
    every address of the pod subnet, EUI-64 of each MAC) and connect to each other's listener over
    IPv6 link-local."""
    node_ip = next(a.address for a in core.read_node(NODE).status.addresses if a.type == "InternalIP")
    env = [{"name": "NODE4", "value": node_ip}, {"name": "PORT", "value": str(HEALTH_PORT)},
           {"name": "LINGER", "value": "15"}]
    name = unique("v6n")
    apply(episode_batch(name, NEIGHBOUR, episodes=2, env=env, runtimeClassName=runtime,
                        isolation={"network": "DenyAll"},
                        podTemplate={"nodeSelector": {"kubernetes.io/hostname": NODE}}), namespace)
    body = wait_finished(name, namespace, timeout=200, operator=operator_process)
    rows = results(name, namespace)["pods"]
    assert len(rows) == 2 and all("found" in (r.get("extra") or {}) for r in rows), (body.get("status"), rows)
    extras = [r["extra"] for r in rows]
    # The attack ran: the episodes saw the link (their node's bridge, each other) and IPv4 is denied.
    if runtime == "runc":   # gVisor's /proc/net/arp shows nothing: there, no IPv6 address is the proof
        assert all(len(e["found"]) >= 2 for e in extras), extras   # the gateway and the neighbour
    assert [e["node_ipv4"] for e in extras] == [False, False], extras
    # Neighbour episodes must stay out of each other's reach (design §5.2: denied on both ends):
    # the pods have no IPv6 address at all (the node's CNI turns IPv6 off in each pod).
    assert [(e["reached"], e["knocks"], e["v6"]) for e in extras] == [([], [], []), ([], [], [])], extras
