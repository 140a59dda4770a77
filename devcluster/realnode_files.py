"""Write one real node's files (nodeconfig.py's contents) and the launch.json realnode.py runs.

Called by cluster.py before each start of a `kubelet-<node>` component; everything lands in the
node's directory, which `down` wipes with the rest of the cluster data.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from devcluster import nodeconfig
from devcluster.pki import Pki

SYSCTL_ROOT = Path("/proc/sys")
ROOT = Path(__file__).resolve().parent.parent


def runtime_binaries(runtime_bin: Path) -> list[Path]:
    """What `make runtime` builds and a real node needs."""
    names = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "runsc", "containerd-shim-runsc-v1")
    return [runtime_bin / n for n in names]


def _tunable_binds(paths: nodeconfig.NodePaths) -> list[dict]:
    """A read-only file over each kernel tunable whose host value differs from kubelet's."""
    binds = []
    paths.sysctl_dir.mkdir(parents=True, exist_ok=True)
    for name, wanted in nodeconfig.KERNEL_TUNABLES.items():
        target = SYSCTL_ROOT / name
        try:
            current = target.read_text().strip()
        except OSError:
            continue   # not on this kernel: kubelet skips it too
        if current == wanted:
            continue
        source = paths.sysctl_dir / name.replace("/", ".")
        source.write_text(wanted + "\n")
        binds.append({"source": str(source), "target": str(target), "readOnly": True})
    return binds


def write(node: nodeconfig.Node, *, state_node_kubeconfig: Path, localkube: Path, pki: Pki,
          runtime_bin: Path, cni_bin: Path, images: list[Path], containerd_log: Path) -> Path:
    p = node.paths
    for d in (p.root, p.containerd_root, p.containerd_state, p.cni_conf_dir, p.kubelet_dir,
              p.pod_logs, p.log_dir / "containers", p.runsc_root, p.certs_dir / "_default", p.netns_dir,
              p.cni_plugin_dir):
        d.mkdir(parents=True, exist_ok=True)
    p.containerd_config.write_text(nodeconfig.containerd_config(node, cni_bin, runtime_bin))
    p.runsc_config.write_text(nodeconfig.runsc_config(node, runtime_bin))
    (p.certs_dir / "_default" / "hosts.toml").write_text(nodeconfig.registry_refusal())
    (p.cni_conf_dir / "10-devcluster.conflist").write_text(json.dumps(nodeconfig.cni_conflist(node), indent=2))
    p.resolv_conf.write_text("")
    seal = p.cni_plugin_dir / nodeconfig.SEAL_PLUGIN
    seal.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.quote(sys.executable)} "
                    "-m devcluster.policy_seal\n")
    seal.chmod(0o755)
    cgroup_v1 = nodeconfig.is_cgroup_v1(Path("/proc/mounts").read_text())
    config = nodeconfig.kubelet_config(node, pki.ca_crt, pki.kubelet_crt, pki.kubelet_key, cgroup_v1)
    p.kubelet_config.write_text(json.dumps(config, indent=2) + "\n")   # JSON is YAML
    # containerd's shim sockets live under the fixed /run/containerd: an empty mount point on
    # the host, this node's directory inside the node
    Path("/run/containerd").mkdir(exist_ok=True)
    binds = [{"source": str(p.containerd_state), "target": "/run/containerd"},
             # containerd's CRI names pods' network namespaces in the fixed /var/run/netns
             {"source": str(p.netns_dir), "target": "/run/netns"},
             {"source": str(p.log_dir), "target": "/var/log"}] + _tunable_binds(p)
    path_env = f"{runtime_bin}:{cni_bin}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    launch = {
        "binds": binds,
        "cgroupRoot": node.cgroup_root,
        "containerdSocket": str(p.containerd_socket),
        "containerdLog": str(containerd_log),
        "containerd": ["env", f"PATH={path_env}", str(runtime_bin / "containerd"),
                       "--config", str(p.containerd_config)],
        "ctr": [str(runtime_bin / "ctr"), "--address", str(p.containerd_socket), "--namespace", "k8s.io"],
        "images": [str(i) for i in images],
        "node": node.name,
        "nodeDir": str(p.root),
        "podCIDR": node.pod_cidr,
        "kubectl": [str(localkube), "kubectl", f"--kubeconfig={state_node_kubeconfig}",
                    "--request-timeout=10s"],
        "kubelet": [str(localkube), "kubelet",
                    f"--config={p.kubelet_config}",
                    f"--kubeconfig={state_node_kubeconfig}",
                    f"--hostname-override={node.name}",
                    f"--node-ip={node.ip}",
                    f"--root-dir={p.kubelet_dir}",
                    "--v=1"],
    }
    path = p.root / "launch.json"
    path.write_text(json.dumps(launch, indent=2) + "\n")
    return path
