"""A real node's pods are sealed from their first packet until kube-router has programmed them.

kube-router learns a pod's address from its status, which kubelet writes only after the pod's
network exists; the containers start at the same time, so without a gate a fresh pod talks
unfiltered until kube-router's next sync (measured on a real node: a pod under default-deny
reached the apiserver 0.02 s after start). Calico's CNI waits for policy the same way
(`policy_setup_timeout_seconds`). Two halves:

* a chained CNI plugin (`python -m devcluster.policy_seal`, after `bridge` in the node's
  conflist): on ADD it appends DROP rules for the pod's addresses to the node's `RB-SEAL` chain
  in the `raw` table (jumped to first thing from PREROUTING, which every packet from or to a
  pod passes on its way to FORWARD or INPUT, bridged ones too) and marks the node pending; on
  DEL it removes them;
* `unseal_loop`, in the node launcher: while seals are pending it reads the node's filter table
  and deletes the seal of every pod kube-router has a pod chain jump for (written in one
  iptables-restore with all of that pod's rules). The jump must name the sealed pod, not only
  its address: kube-router keys a node's pods by address (netpol's getLocalPods), so while a
  deleted pod's object still shows an address the node has given to a new pod, its jump (and
  its policies) are for the old pod, and the new one would be unsealed under them.

Why `raw` and not `filter`: kube-router's policy sync saves the whole filter table, rebuilds it
and restores it without --noflush (netpol's fullPolicySync), so a seal appended to the filter
table between its save and its restore is wiped while the pod is not yet in its rules: the
pod then runs unsealed and unprogrammed until the next sync. Nothing of kube-router or
kube-proxy replaces the raw table.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

CHAIN = "RB-SEAL"
TABLE = "raw"
#: kube-router's jump into a pod's chain: "-A KUBE-ROUTER-FORWARD -s IP/32 ... rule to jump
#: traffic from POD name:NAME namespace: NS to chain KUBE-POD-FW-..."
POD_JUMP = re.compile(r"^-A KUBE-ROUTER-FORWARD -s (\S+)/32 .*from POD name:(\S+) namespace: (\S+) to chain")
_SEAL = re.compile(rf"^-A {CHAIN} (?:-s|-d) (\S+)/32 ")
_SEAL_POD = re.compile(r"rolloutbatch devcluster: \S+ of pod ([0-9a-f]{16}) until")
PENDING_FILE = "policy-seal-pending"


def pod_key(namespace: str, name: str) -> str:
    """A pod's name in a seal's comment: fixed length, as a comment holds 256 bytes and a pod's
    name alone may be 253."""
    return hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:16]


def programmed_pods(rules: str) -> set[tuple[str, str]]:
    """(address, pod_key) of the pods kube-router has programmed, from `iptables-save -t filter`."""
    return {(m.group(1), pod_key(m.group(3), m.group(2))) for m in map(POD_JUMP.match, rules.splitlines()) if m}


def unsealable(sealed: dict[str, list[str]], programmed: set[tuple[str, str]]) -> set[str]:
    """The sealed addresses whose own pod kube-router has programmed (a seal that names no pod:
    any pod at its address)."""
    addresses = {address for address, _ in programmed}
    ready = set()
    for address, lines in sealed.items():
        named = _SEAL_POD.search(lines[0])
        if (address, named.group(1)) in programmed if named else address in addresses:
            ready.add(address)
    return ready


def seal_rules(rules: str) -> dict[str, list[str]]:
    """address -> the `iptables-save` lines of its seal rules."""
    found: dict[str, list[str]] = {}
    for line in rules.splitlines():
        m = _SEAL.match(line)
        if m:
            found.setdefault(m.group(1), []).append(line)
    return found


def seal_args(address: str, pod: tuple[str, str] | None) -> list[list[str]]:
    """The iptables argvs (after `iptables -w`) that seal one pod's address; ``pod`` (namespace,
    name) None: a seal naming no pod, which any jump for its address lifts (never one that no
    jump could ever lift)."""
    named = f" of pod {pod_key(*pod)}" if pod else ""
    comment = ["-m", "comment", "--comment", f"rolloutbatch devcluster: {address}{named} until its policy is programmed"]
    return [["-A", CHAIN, "-s", f"{address}/32", *comment, "-j", "DROP"],
            ["-A", CHAIN, "-d", f"{address}/32", *comment, "-j", "DROP"]]


def delete_args(save_line: str) -> list[str]:
    """`-A CHAIN ...` from iptables-save as the argv that deletes that rule."""
    words = shlex.split(save_line)
    return ["-D", *words[1:]]


def chain_setup_args() -> list[list[str]]:
    """In TABLE: the seal chain, jumped to before anything else sees a packet."""
    return [["-N", CHAIN], ["-I", "PREROUTING", "1", "-j", CHAIN]]


def _iptables(args: list[str]) -> subprocess.CompletedProcess:
    """An iptables command on the seal's table."""
    return subprocess.run(["iptables", "-w", "-t", TABLE, *args], capture_output=True, text=True)


def _save(table: str) -> str:
    return subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True).stdout


def setup_chain() -> None:
    """In the node's network namespace, before its first pod (a restarted node keeps its chain)."""
    if _iptables(["-S", CHAIN]).returncode == 0:
        return
    for args in chain_setup_args():
        out = _iptables(args)
        if out.returncode:
            raise RuntimeError(f"iptables {' '.join(args)}: {out.stderr.strip()}")


def unseal_once() -> int:
    """Remove the seals of programmed addresses; returns how many addresses stay sealed."""
    sealed = seal_rules(_save(TABLE))
    for address in unsealable(sealed, programmed_pods(_save("filter"))):
        for line in sealed.pop(address):
            _iptables(delete_args(line))
    return len(sealed)


def unseal_loop(node_dir: Path, stop: threading.Event, interval: float = 0.1) -> None:
    pending = node_dir / PENDING_FILE
    while not stop.is_set():
        if pending.exists():
            pending.unlink(missing_ok=True)
            while unseal_once() and not stop.is_set():   # a seal added meanwhile is seen here
                stop.wait(interval)
        stop.wait(interval)


def cni_pod(cni_args: str) -> tuple[str, str] | None:
    """(namespace, name) of the pod from CNI_ARGS, as the kubelet's runtime passes them
    ("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=name;..."), or None without them."""
    pairs = dict(part.split("=", 1) for part in cni_args.split(";") if "=" in part)
    namespace, name = pairs.get("K8S_POD_NAMESPACE"), pairs.get("K8S_POD_NAME")
    return (namespace, name) if namespace and name else None


# IPv6 off in the pod's network namespace: the pod network is IPv4 (its bridge, host-local ranges
# and kube-router's policies), but a kernel gives every interface an IPv6 link-local address, and
# nothing filters IPv6: pods on one node reached each other and the node over fe80::, past their
# NetworkPolicy (a hostile episode found its neighbours' addresses from the ARP table).
_NO_IPV6 = 'for f in /proc/sys/net/ipv6/conf/*/disable_ipv6; do echo 1 > "$f" || exit 1; done'


def _no_ipv6(netns: str) -> None:
    out = subprocess.run(["nsenter", f"--net={netns}", "sh", "-c", _NO_IPV6], capture_output=True, text=True)
    if out.returncode and "No such file" not in out.stderr:   # a kernel without IPv6 has nothing to turn off
        raise RuntimeError(f"turning IPv6 off in {netns}: {out.stderr.strip()}")


def _plugin(command: str, conf: dict, node_dir: Path, cni_args: str = "", netns: str = "") -> dict | None:
    """One CNI call (CNI spec: a chained plugin passes its prevResult on at ADD)."""
    result = conf.get("prevResult") or {}
    addresses = [ip["address"].split("/")[0] for ip in result.get("ips") or [] if "." in ip.get("address", "")]
    if command == "ADD":
        if netns:
            _no_ipv6(netns)
        node_dir.joinpath(PENDING_FILE).touch()
        for address in addresses:
            for args in seal_args(address, cni_pod(cni_args)):
                out = _iptables(args)
                if out.returncode:
                    raise RuntimeError(f"iptables {' '.join(args)}: {out.stderr.strip()}")
        return result
    if command == "DEL":
        sealed = seal_rules(_save(TABLE))
        for address in addresses:
            for line in sealed.get(address, []):
                _iptables(delete_args(line))
    if command == "VERSION":
        return {"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"]}
    return None


def main() -> int:
    command = os.environ.get("CNI_COMMAND", "")
    conf = json.loads(sys.stdin.read() or "{}")
    try:
        out = _plugin(command, conf, Path(conf.get("nodeDir") or "."), os.environ.get("CNI_ARGS", ""),
                      os.environ.get("CNI_NETNS", ""))
    except Exception as exc:  # noqa: BLE001 - every failure is a CNI error result, never a traceback
        print(json.dumps({"cniVersion": conf.get("cniVersion", "1.0.0"), "code": 999,
                          "msg": "policy seal failed", "details": str(exc)}))
        return 1
    if out is not None:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
