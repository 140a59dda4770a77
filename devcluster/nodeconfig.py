"""The real node's configuration files, as pure functions of one node's paths and addresses.

A real devcluster node is containerd + kubelet in the node's network namespace and in a mount
namespace of its own (realnode.py runs them). Everything either writes lives under
`.devcluster/nodes/<node>/`:

    containerd.toml   containerd's config (version 3): the CRI plugin with runtimes `runc` and
                      `cube` (gVisor's runsc, systrap platform), the local pause image, a
                      registry that refuses every pull at once
    runsc.toml        runsc's flags for the `cube` runtime
    certs.d/          containerd's registry hosts: `_default` points at 127.0.0.1:9 (discard)
    net.d/            the CNI conflist (bridge + host-local on the node's podCIDR)
    kubelet.yaml      KubeletConfiguration
    resolv.conf       the upstream resolv.conf kubelet gives pods: empty (no host resolver)
    sysctl/           files bind-mounted over the host sysctls kubelet would rewrite

Three things differ from a stock node, each because of this machine (docs/real-node.md):
the cgroup v1 hierarchy needs `failCgroupV1: false` (KEP-5573), no CAP_SYS_RESOURCE means
containerd must not ask for a lower oom_score_adj (`restrict_oom_score_adj`), and kubelet's
kernel tunables are served from files so the host's own stay as they are.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: The sandbox (pause) image every pod starts with; built here (devcluster/images.py).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"

#: kubelet's container manager sets these on start (pkg/kubelet/cm/container_manager_linux.go,
#: setupKernelTunables) when they differ; each is served from a file holding the wanted value.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}

#: Where kubelet rotates a running container's log (its default; see kubelet_config).
CONTAINER_LOG_MAX_SIZE = "10Mi"

#: Processes and threads one pod may hold (kubelet's podPidsLimit, the pod cgroup's pids.max).
#: Without it one episode's fork bomb takes the node's whole pid space (this machine's
#: kernel.pid_max is 32768), and every neighbour, the kubelet and the runtime fail to fork: a
#: hostile episode must fail only itself. A cluster that runs episodes needs a limit there too
#: (docs/real-node.md).
POD_PIDS_LIMIT = 1024

#: The RuntimeClass handlers every real node serves.
HANDLER_RUNC = "runc"
HANDLER_CUBE = "cube"


@dataclass(frozen=True)
class NodePaths:
    """Where one node keeps everything (all under .devcluster/nodes/<node>/)."""

    root: Path

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "run" / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def runsc_config(self) -> Path:
        return self.root / "runsc.toml"

    @property
    def certs_dir(self) -> Path:
        return self.root / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "net.d"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.root / "log" / "pods"

    @property
    def log_dir(self) -> Path:
        """Bound over /var/log inside the node: kubelet's /var/log/containers is fixed."""
        return self.root / "log"

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"

    @property
    def sysctl_dir(self) -> Path:
        return self.root / "sysctl"

    @property
    def cni_plugin_dir(self) -> Path:
        """The node's own CNI plugin (the policy seal, policy_seal.py)."""
        return self.root / "cni-bin"

    @property
    def netns_dir(self) -> Path:
        return self.root / "run" / "netns"

    @property
    def runsc_root(self) -> Path:
        return self.root / "run" / "runsc"



@dataclass(frozen=True)
class Node:
    name: str
    ip: str
    pod_cidr: str
    port: int                 # kubelet's HTTPS port (logs, exec, port-forward)
    healthz_port: int
    max_pods: int
    cgroup_root: str          # e.g. /rb1a2b3-devnode-1: every pod cgroup of this node below it
    cluster_dns: str
    paths: NodePaths


def _toml_str(value: str | Path) -> str:
    """A TOML basic string (JSON's escapes are a subset TOML accepts)."""
    return json.dumps(str(value))


def containerd_config(node: Node, cni_bin: Path, runtime_bin: Path) -> str:
    """containerd v2's config (version 3: its CRI plugin is split into images and runtime)."""
    p = node.paths
    return f"""version = 3
root = {_toml_str(p.containerd_root)}
state = {_toml_str(p.containerd_state)}

[grpc]
  address = {_toml_str(p.containerd_socket)}

[ttrpc]
  address = {_toml_str(str(p.containerd_socket) + ".ttrpc")}

[plugins."io.containerd.nri.v1.nri"]
  # NRI's socket is a fixed host path (/var/run/nri/nri.sock) that every node's containerd
  # would bind: the second one's CRI plugin fails with EADDRINUSE. No NRI plugin runs here.
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # pulled images are never garbage-collected behind our back: they were built here
  discard_unpacked_layers = false

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = {_toml_str(PAUSE_IMAGE)}

[plugins."io.containerd.cri.v1.images".registry]
  # _default/hosts.toml points every registry at 127.0.0.1:9: a pull of an image that was not
  # loaded here fails at once and never leaves the machine
  config_path = {_toml_str(p.certs_dir)}

[plugins."io.containerd.cri.v1.runtime"]
  # no CAP_SYS_RESOURCE on this machine: a lower oom_score_adj than containerd's own is refused
  restrict_oom_score_adj = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [{_toml_str(cni_bin)}, {_toml_str(p.cni_plugin_dir)}]
  conf_dir = {_toml_str(p.cni_conf_dir)}
  max_conf_num = 1

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = {_toml_str(HANDLER_RUNC)}

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{HANDLER_RUNC}]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{HANDLER_RUNC}.options]
  BinaryName = {_toml_str(runtime_bin / "runc")}
  Root = {_toml_str(p.root / "run" / "runc")}

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{HANDLER_CUBE}]
  runtime_type = "io.containerd.runsc.v1"
  runtime_path = {_toml_str(runtime_bin / "containerd-shim-runsc-v1")}

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{HANDLER_CUBE}.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = {_toml_str(p.runsc_config)}
"""


def runsc_config(node: Node, runtime_bin: Path) -> str:
    """The `cube` shim's options file (gVisor's pkg/shim/v1/runsc Options) and runsc's flags:
    systrap (this host has /dev/kvm but no vmx/svm, and gVisor's KVM platform hangs there), its
    own network stack in the pod's netns."""
    return f"""binary_name = {_toml_str(runtime_bin / "runsc")}
root = {_toml_str(node.paths.runsc_root)}

[runsc_config]
  platform = "systrap"
  network = "sandbox"
"""


def registry_refusal() -> str:
    """certs.d/_default/hosts.toml: every registry is 127.0.0.1:9 (nothing listens there)."""
    return 'server = "http://127.0.0.1:9"\n\n[host."http://127.0.0.1:9"]\n  capabilities = ["pull", "resolve"]\n'


#: The chained CNI plugin that seals a pod until its NetworkPolicy is programmed (policy_seal.py).
SEAL_PLUGIN = "rolloutbatch-policy-seal"


def cni_conflist(node: Node) -> dict:
    """The same pod network the cluster had before: a bridge per node, no masquerade, no
    default route beyond the node (network.py), host-local on the node's podCIDR; then the
    policy seal, so a pod sends nothing before kube-router has programmed it."""
    return {
        "cniVersion": "1.0.0",
        "name": "devcluster",
        "plugins": [{
            "type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
            "hairpinMode": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]],
                     "routes": [{"dst": "0.0.0.0/0"}],
                     "dataDir": str(node.paths.root / "cni-ipam")},
        }, {"type": SEAL_PLUGIN, "nodeDir": str(node.paths.root)}],
    }


def kubelet_config(node: Node, client_ca: Path, tls_cert: Path, tls_key: Path,
                   cgroup_v1: bool) -> dict:
    """KubeletConfiguration (kubelet.config.k8s.io/v1beta1) for one node.

    Eviction and image GC thresholds are relaxed: this machine's disk is shared with
    everything else and its images cannot be pulled again once collected.
    """
    p = node.paths
    config: dict = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "port": node.port,
        "readOnlyPort": 0,
        "healthzBindAddress": node.ip,
        "healthzPort": node.healthz_port,
        "authentication": {"anonymous": {"enabled": False},
                           "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(tls_cert),
        "tlsPrivateKeyFile": str(tls_key),
        "containerRuntimeEndpoint": f"unix://{p.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "clusterDNS": [node.cluster_dns],
        "clusterDomain": "cluster.local",
        "resolvConf": str(p.resolv_conf),
        "maxPods": node.max_pods,
        "podPidsLimit": POD_PIDS_LIMIT,
        "podLogsDir": str(p.pod_logs),
        # kubelet's defaults, said here because tests depend on them: a running container's log
        # is rotated past 10 MiB and only the file since then is served (the hostile-episode
        # suite's 8 MiB and 50 MiB cases, docs/design.md §4)
        "containerLogMaxSize": CONTAINER_LOG_MAX_SIZE,
        "containerLogMaxFiles": 5,
        "failSwapOn": False,
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "oomScoreAdj": 0,   # kubelet's default -999 needs CAP_SYS_RESOURCE
        "nodeStatusUpdateFrequency": "4s",
        "nodeStatusReportFrequency": "10s",
        "shutdownGracePeriod": "0s",
    }
    if cgroup_v1:
        config["failCgroupV1"] = False   # 1.35+ refuses cgroup v1 otherwise (KEP-5573)
    return config


def is_cgroup_v1(mounts: str) -> bool:
    """True unless /sys/fs/cgroup itself is the unified (v2) hierarchy (`mounts`: the text of
    /proc/mounts)."""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[1] == "/sys/fs/cgroup":
            return fields[2] != "cgroup2"
    return True
