"""One real devcluster node: containerd and kubelet in a mount namespace of their own.

    nsenter --net=/run/netns/<node netns> unshare -m --propagation slave \\
        python -m devcluster.realnode <node dir>/launch.json

cluster.py writes launch.json (the binds, both argvs, the images to load) and the config files
(nodeconfig.py); this process only does what must happen inside the node's namespaces:

1. bind mounts, visible to this node alone: kubelet's fixed `/var/log` (for /var/log/containers),
   containerd's fixed `/run/containerd` (shim sockets), and files holding kubelet's wanted kernel
   tunables over `/proc/sys/...`, so kubelet never rewrites the host's own;
2. containerd, then the images built here (`ctr images import`, pinned against image GC), then
   kubelet; if either exits, the node is down and this process exits too; the node's loops
   (policy seals, the Node's podCIDR) run in a child process (`--loops`), restarted if it dies;
3. on SIGTERM, a power-off: kubelet, every process in the node's cgroups (containers and gVisor
   sandboxes), containerd and every shim (this process is their subreaper), then the node's
   cgroups. The mount namespace, with every overlay, shm and tmpfs mount of the node's pods,
   goes away with its last process: nothing is left mounted on the host.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from devcluster import policy_seal

PR_SET_CHILD_SUBREAPER = 36
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")


def cgroup_hierarchies() -> list[Path]:
    """The v1 hierarchies of this machine (hybrid: the unified one is left alone)."""
    return sorted(p for p in CGROUP_V1_ROOT.iterdir()
                  if p.is_dir() and p.name != "unified" and (p / "cgroup.procs").exists())


def make_cgroup_root(name: str) -> None:
    """kubelet requires its cgroupRoot to exist in every hierarchy; a new cpuset cgroup holds
    no CPU or memory node until given its parent's."""
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / name.strip("/")
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (path / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((hierarchy / knob).read_text())


def cgroup_pids(name: str) -> set[int]:
    found: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / name.strip("/")
        for procs in root.rglob("cgroup.procs") if root.exists() else ():
            try:
                found.update(int(x) for x in procs.read_text().split())
            except (OSError, ValueError):
                continue
    return found


def remove_cgroup_root(name: str) -> None:
    """rmdir deepest first (a cgroup directory goes only once empty of processes and children)."""
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / name.strip("/")
        if not root.exists():
            continue
        for path in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                           reverse=True) + [root]:
            try:
                path.rmdir()
            except OSError:
                pass


def kill_cgroup(name: str, timeout: float = 10.0) -> None:
    """SIGKILL every process of the node's cgroups until none is left (a fork may race one)."""
    deadline = time.monotonic() + timeout
    while (pids := cgroup_pids(name) - {os.getpid()}) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2:].split()[1] == me:
                found.add(int(entry))
    return found


def kill_descendants(timeout: float = 10.0) -> None:
    """SIGKILL our children until none is left: orphans (shims, runsc) re-parent to us, the
    subreaper, as their parents die."""
    deadline = time.monotonic() + timeout
    while (kids := _children()) and time.monotonic() < deadline:
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.05)


def sweep(node_root: Path, cgroup_root: str) -> None:
    """What a node killed without its power-off left: containers (in its cgroups), shims and
    sandboxes (their command lines name the node's directory), then the cgroups themselves."""
    kill_cgroup(cgroup_root)
    needle = str(node_root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except ProcessLookupError:
                pass
    kill_cgroup(cgroup_root)
    remove_cgroup_root(cgroup_root)


def keep_pod_cidr(kubectl: list[str], node: str, pod_cidr: str, stop: threading.Event) -> None:
    """Give the Node its spec.podCIDR, the range this node's CNI config hands out, as KCM's
    node-ipam would (which the devcluster does not run: its ranges are planned per node,
    network.py). Checked again later: a deleted Node comes back without one."""
    patch = json.dumps({"spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}})
    while not stop.is_set():
        got = subprocess.run(kubectl + ["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"],
                             capture_output=True, text=True)
        if got.returncode == 0 and not got.stdout.strip():
            subprocess.run(kubectl + ["patch", "node", node, "-p", patch],
                           capture_output=True, text=True)
            continue
        stop.wait(1 if got.returncode else 10)


def reap_orphans(keep: set[int]) -> None:
    """Reap exited processes re-parented to us (a shim daemon whose pod ended), leaving the
    children whose status Popen collects itself. Every other child of ours must be such an
    orphan: a thread of ours running a subprocess would race this reap for its child (its
    waitpid or ours fails with ECHILD), which is why the node's loops run in a process of their
    own (run_loops)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in keep:
            return
        os.waitpid(info.si_pid, 0)


def bind(source: str, target: str, read_only: bool = False) -> None:
    subprocess.run(["mount", "--bind", source, target], check=True)
    if read_only:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)


def wait_for_socket(path: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"containerd exited with {proc.returncode} during start-up")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"containerd socket {path} not up after {timeout:.0f}s")


def load_images(ctr: list[str], archives: list[str]) -> None:
    for archive in archives:
        t0 = time.monotonic()
        out = subprocess.run(ctr + ["images", "import", "--label", "io.cri-containerd.pinned=pinned",
                                    archive], check=True, capture_output=True, text=True).stdout
        print(f"realnode: imported {archive} in {time.monotonic() - t0:.1f}s: "
              f"{' '.join(out.split())[:200]}", flush=True)


def run_loops(launch: dict) -> int:
    """The node's two loops (policy seals, the Node's podCIDR), in a child process: their
    kubectl and iptables runs are its children, not the subreaper's."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    threading.Thread(target=policy_seal.unseal_loop, daemon=True,
                     args=(Path(launch["nodeDir"]), stop)).start()
    keep_pod_cidr(launch["kubectl"], launch["node"], launch["podCIDR"], stop)
    return 0


def start_loops(launch_file: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "devcluster.realnode", "--loops", launch_file],
                            stdin=subprocess.DEVNULL)


def run(launch_file: str) -> int:
    launch = json.loads(Path(launch_file).read_text())
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for b in launch["binds"]:
        bind(b["source"], b["target"], b.get("readOnly", False))
    make_cgroup_root(launch["cgroupRoot"])
    policy_seal.setup_chain()
    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    with open(launch["containerdLog"], "a") as containerd_log:
        containerd = subprocess.Popen(launch["containerd"], stdin=subprocess.DEVNULL,
                                      stdout=containerd_log, stderr=subprocess.STDOUT)
    kubelet = loops = None
    try:
        wait_for_socket(launch["containerdSocket"], containerd, 60)
        load_images(launch["ctr"], launch["images"])
        kubelet = subprocess.Popen(launch["kubelet"], stdin=subprocess.DEVNULL)
        loops = start_loops(launch_file)
        while not stopping:
            for name, proc in (("containerd", containerd), ("kubelet", kubelet)):
                if proc.poll() is not None:
                    print(f"realnode: {name} exited with {proc.returncode}", flush=True)
                    stopping = True
            if loops.poll() is not None and not stopping:
                print(f"realnode: the node's loops exited with {loops.returncode}; restarted", flush=True)
                loops = start_loops(launch_file)
            reap_orphans({containerd.pid, kubelet.pid, loops.pid})
            time.sleep(0.2)
    finally:
        power_off(launch["cgroupRoot"], loops, kubelet, containerd)
    return 0


def power_off(cgroup_root: str, loops: subprocess.Popen | None, kubelet: subprocess.Popen | None,
              containerd: subprocess.Popen) -> None:
    for proc in (loops, kubelet, containerd):
        if proc is None or proc.poll() is not None:
            continue
        if proc is containerd:
            kill_cgroup(cgroup_root)   # containers first: containerd would only restart them
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    kill_cgroup(cgroup_root)
    kill_descendants()
    remove_cgroup_root(cgroup_root)


if __name__ == "__main__":
    if sys.argv[1] == "--loops":
        sys.exit(run_loops(json.loads(Path(sys.argv[2]).read_text())))
    sys.exit(run(sys.argv[1]))
