"""devcluster.nodeagent.volumes: files of configMap/secret/downwardAPI/emptyDir volumes."""
from __future__ import annotations

import asyncio
import base64
import os
import stat

import pytest

from devcluster.nodeagent import volumes
from devcluster.nodeagent.sandbox import Mount


def _pod(volumes_, sc=None, containers=None):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}},
            "spec": {"securityContext": sc or {}, "volumes": volumes_,
                     "containers": containers or [{"name": "main", "resources": {"limits": {"memory": "64Mi"}}}]}}


def _prepare(pod, tmp_path, cms=None, secs=None, mounted=None):
    return asyncio.run(volumes.prepare(None, pod, str(tmp_path), configmaps=cms or {}, secrets=secs or {},
                                       pod_ip="10.244.1.2", host_ip="127.0.0.1", allocatable={},
                                       mounted=mounted if mounted is not None else []))


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_configmap_items_modes_and_secret(tmp_path):
    pod = _pod([{"name": "c", "configMap": {"name": "cm", "defaultMode": 0o400,
                                            "items": [{"key": "a", "path": "dir/a.txt", "mode": 0o600}, {"key": "b", "path": "b"}]}},
                {"name": "s", "secret": {"secretName": "sec"}}])
    cms = {"cm": {"data": {"a": "A", "b": "B", "unused": "x"}}}
    secs = {"sec": {"data": {"t": base64.b64encode(b"T").decode()}}}
    paths = _prepare(pod, tmp_path, cms, secs)
    assert open(os.path.join(paths["c"], "dir/a.txt")).read() == "A"
    assert _mode(os.path.join(paths["c"], "dir/a.txt")) == 0o600
    assert _mode(os.path.join(paths["c"], "b")) == 0o400
    assert not os.path.exists(os.path.join(paths["c"], "unused"))
    assert open(os.path.join(paths["s"], "t")).read() == "T"
    assert _mode(os.path.join(paths["s"], "t")) == 0o644


def test_missing_configmap_and_optional(tmp_path):
    with pytest.raises(volumes.VolumeError, match='"cm" not found'):
        _prepare(_pod([{"name": "c", "configMap": {"name": "cm"}}]), tmp_path)
    paths = _prepare(_pod([{"name": "c", "configMap": {"name": "cm", "optional": True}}]), tmp_path)
    assert os.listdir(paths["c"]) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_ownership_fsgroup_and_run_as_user(tmp_path):
    pod = _pod([{"name": "c", "configMap": {"name": "cm", "defaultMode": 0o400}}, {"name": "e", "emptyDir": {}}],
               sc={"runAsUser": 1000, "fsGroup": 2000})
    paths = _prepare(pod, tmp_path, {"cm": {"data": {"k": "v"}}})
    st = os.stat(os.path.join(paths["c"], "k"))
    assert (st.st_uid, st.st_gid) == (1000, 2000) and stat.S_IMODE(st.st_mode) == 0o440
    st = os.stat(paths["e"])
    assert st.st_gid == 2000 and stat.S_IMODE(st.st_mode) == 0o2777


def test_downward_api(tmp_path):
    pod = _pod([{"name": "d", "downwardAPI": {"items": [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}}]}}])
    paths = _prepare(pod, tmp_path)
    read = lambda n: open(os.path.join(paths["d"], n)).read()  # noqa: E731
    assert read("labels") == 'a="b"' and read("name") == "p" and read("mem") == "64"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_emptydir_size_limit_is_a_tmpfs(tmp_path):
    mounted = []
    paths = _prepare(_pod([{"name": "e", "emptyDir": {"sizeLimit": "1Mi"}}]), tmp_path, mounted=mounted)
    try:
        assert mounted == [paths["e"]] and paths["e"] in volumes.mounts_under(str(tmp_path))
        with pytest.raises(OSError):
            with open(os.path.join(paths["e"], "big"), "wb") as f:
                f.write(b"\0" * (2 << 20))
    finally:
        volumes.unmount_all(str(tmp_path))
    assert volumes.mounts_under(str(tmp_path)) == []


def test_container_mounts(tmp_path):
    pod = _pod([{"name": "c", "configMap": {"name": "x"}}, {"name": "e", "emptyDir": {}}])
    c = {"volumeMounts": [{"name": "c", "mountPath": "/c"}, {"name": "e", "mountPath": "/e", "subPath": "sub"},
                          {"name": "e", "mountPath": "/r", "readOnly": True}]}
    ms = volumes.container_mounts(c, {"c": str(tmp_path / "c"), "e": str(tmp_path / "e")}, pod, {})
    assert ms[0] == Mount(str(tmp_path / "c"), "/c", True)  # configMap always read-only
    assert ms[1] == Mount(str(tmp_path / "e" / "sub"), "/e", False) and os.path.isdir(ms[1].source)
    assert ms[2].readonly
    with pytest.raises(volumes.VolumeError):
        volumes.container_mounts({"volumeMounts": [{"name": "zz", "mountPath": "/z"}]}, {}, pod, {})
