"""The real node's config files: containerd's TOML, runsc's options, kubelet's config, CNI."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from devcluster import nodeconfig

NODE = nodeconfig.Node(
    name="devnode-1", ip="10.77.0.11", pod_cidr="10.77.128.0/23", port=41000, healthz_port=10248,
    max_pods=250, cgroup_root="/rbabcde-devnode-1", cluster_dns="10.77.1.10",
    paths=nodeconfig.NodePaths(Path("/x/.devcluster/nodes/devnode-1")),
)
BIN = Path("/x/.devcluster/bin/runtime")


@pytest.fixture(scope="module")
def containerd() -> dict:
    return tomllib.loads(nodeconfig.containerd_config(NODE, Path("/x/cni"), BIN))


def test_containerd_state_lives_in_the_node_directory(containerd):
    assert containerd["version"] == 3
    for key in ("root", "state"):
        assert containerd[key].startswith(str(NODE.paths.root) + "/")
    assert containerd["grpc"]["address"] == str(NODE.paths.containerd_socket)


def test_containerd_opens_no_socket_outside_the_node_directory(containerd):
    """Two nodes' containerds share the host's /var/run: NRI's fixed socket there made the
    second one fail (EADDRINUSE), so NRI is off; every socket is the node's own."""
    assert containerd["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    assert containerd["ttrpc"]["address"].startswith(str(NODE.paths.root) + "/")


def test_containerd_refuses_every_pull_and_runs_the_local_pause_image(containerd):
    images = containerd["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == nodeconfig.PAUSE_IMAGE
    assert images["registry"]["config_path"] == str(NODE.paths.certs_dir)
    hosts = tomllib.loads(nodeconfig.registry_refusal())
    assert hosts["server"] == "http://127.0.0.1:9"
    assert list(hosts["host"]) == ["http://127.0.0.1:9"]


def test_containerd_serves_runc_and_cube(containerd):
    runtime = containerd["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    runtimes = runtime["containerd"]["runtimes"]
    assert set(runtimes) == {nodeconfig.HANDLER_RUNC, nodeconfig.HANDLER_CUBE}
    assert runtimes["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["runc"]["options"]["BinaryName"] == str(BIN / "runc")
    cube = runtimes["cube"]
    assert cube["runtime_type"] == "io.containerd.runsc.v1"
    assert cube["runtime_path"] == str(BIN / "containerd-shim-runsc-v1")
    assert cube["options"]["ConfigPath"] == str(NODE.paths.runsc_config)
    assert runtime["cni"]["conf_dir"] == str(NODE.paths.cni_conf_dir)


def test_runsc_uses_systrap_and_the_node_root():
    options = tomllib.loads(nodeconfig.runsc_config(NODE, BIN))
    assert options["binary_name"] == str(BIN / "runsc")
    assert options["root"] == str(NODE.paths.runsc_root)
    assert options["runsc_config"]["platform"] == "systrap"


def test_paths_with_quotes_stay_valid_toml():
    odd = nodeconfig.Node(**{**NODE.__dict__, "paths": nodeconfig.NodePaths(Path('/a "b"\\c'))})
    parsed = tomllib.loads(nodeconfig.containerd_config(odd, Path("/cni"), BIN))
    assert parsed["root"] == '/a "b"\\c/containerd'


@pytest.mark.parametrize("v1", [True, False])
def test_kubelet_config_sets_fail_cgroup_v1_only_on_v1(v1):
    config = nodeconfig.kubelet_config(NODE, Path("/ca"), Path("/crt"), Path("/key"), v1)
    assert ("failCgroupV1" in config) is v1
    if v1:
        assert config["failCgroupV1"] is False
    assert config["cgroupRoot"] == NODE.cgroup_root
    assert config["address"] == NODE.ip and config["port"] == NODE.port
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["readOnlyPort"] == 0
    assert config["containerRuntimeEndpoint"] == f"unix://{NODE.paths.containerd_socket}"
    assert config["podLogsDir"].startswith(str(NODE.paths.root))


def test_cgroup_version_is_read_from_the_mount_table():
    hybrid = ("tmpfs /sys/fs/cgroup tmpfs rw 0 0\n"
              "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    unified = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"
    assert nodeconfig.is_cgroup_v1(hybrid)
    assert not nodeconfig.is_cgroup_v1(unified)


def test_pod_network_is_the_node_cidr_without_masquerade():
    conf = nodeconfig.cni_conflist(NODE)
    bridge = conf["plugins"][0]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": NODE.pod_cidr}]]


def test_kubelet_rotates_logs_at_its_default_size():
    """The hostile-episode suite's 8 MiB case relies on no rotation below 10 MiB."""
    config = nodeconfig.kubelet_config(NODE, Path("/ca"), Path("/crt"), Path("/key"), cgroup_v1=True)
    assert (config["containerLogMaxSize"], config["containerLogMaxFiles"]) == ("10Mi", 5)


def test_kubelet_caps_each_pods_processes():
    """One pod's fork bomb must not take the node's pid space (kernel.pid_max is 32768 here)."""
    config = nodeconfig.kubelet_config(NODE, Path("/ca"), Path("/crt"), Path("/key"), cgroup_v1=True)
    assert config["podPidsLimit"] == nodeconfig.POD_PIDS_LIMIT
    assert 256 <= nodeconfig.POD_PIDS_LIMIT <= 4096
