"""Pod volumes on the host, bind-mounted into sandboxes at their mountPaths.

  configMap, secret     files from data/binaryData (secret: data/stringData) under the pod's
                        state dir, honouring items (key -> path, mode), defaultMode, optional.
  downwardAPI           fieldRef / resourceFieldRef items.
  projected             serviceAccountToken (TokenRequest API, bound to the pod), configMap,
                        secret and downwardAPI sources in one directory.
  emptyDir              a directory (0777; group fsGroup + setgid when fsGroup is set).
                        medium: Memory or a sizeLimit -> a host tmpfs mounted with size=<limit>
                        (writes beyond the limit fail with ENOSPC instead of evicting the pod);
                        unmounted when the pod is removed and when the agent exits.
  hostPath              the host path itself (DirectoryOrCreate/FileOrCreate honoured).
Files of atomic-writer volumes are owned by root; with fsGroup they get group fsGroup and group
read; when every container of the pod runs as the same non-root runAsUser the files are owned by
that user (as the kubelet does for projected service-account tokens), so mode 0400 stays readable.
ConfigMap/Secret content is written once at pod start (updates are not propagated).
Anything else (persistentVolumeClaim, ephemeral, csi, ...) is a mount error.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import posixpath

from rolloutbatch.core.k8s_rules import parse_quantity

from .envvars import ConfigError, field_value, resource_value

log = logging.getLogger("nodeagent.volumes")


class VolumeError(Exception):
    """A volume cannot be set up yet (the pod stays ContainerCreating and is retried)."""


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
MNT_DETACH = 2


def mount_tmpfs(target: str, size_bytes: int | None, mode: int = 0o1777) -> None:
    opts = f"mode={mode:o}" + (f",size={size_bytes}" if size_bytes else "")
    if _libc.mount(b"tmpfs", target.encode(), b"tmpfs", 0, opts.encode()) != 0:
        err = ctypes.get_errno()
        raise VolumeError(f"mount tmpfs on {target}: {os.strerror(err)}")


def unmount(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        log.warning("umount %s: %s", target, os.strerror(ctypes.get_errno()))


def mounts_under(prefix: str) -> list[str]:
    """Mount points below prefix (deepest first), from /proc/self/mountinfo."""
    prefix = prefix.rstrip("/") + "/"
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mp = line.split()[4].replace("\\040", " ")
                if mp.startswith(prefix):
                    out.append(mp)
    except OSError:
        pass
    return sorted(out, key=len, reverse=True)


def unmount_all(prefix: str) -> None:
    for mp in mounts_under(prefix):
        unmount(mp)


def _safe_join(base: str, rel: str) -> str:
    rel = posixpath.normpath(rel)
    if rel.startswith("/") or rel == ".." or rel.startswith("../"):
        raise VolumeError(f"invalid path {rel!r} in volume")
    return os.path.join(base, rel)


class FileWriter:
    """Writes atomic-writer style volume files with the pod's ownership rules."""

    def __init__(self, owner_uid: int | None, fs_group: int | None):
        self.owner_uid = owner_uid
        self.fs_group = fs_group

    def write(self, base: str, rel: str, data: bytes, mode: int) -> None:
        path = _safe_join(base, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        if self.fs_group is not None:
            mode |= 0o040
        os.chmod(tmp, mode & 0o7777)
        if self.owner_uid is not None or self.fs_group is not None:
            os.chown(tmp, self.owner_uid if self.owner_uid is not None else -1,
                     self.fs_group if self.fs_group is not None else -1)
        os.replace(tmp, path)


def _project_keys(obj: dict | None, kind: str, items, optional: bool, name: str) -> dict[str, tuple[bytes, int | None]]:
    """-> relative path -> (content, item mode or None)."""
    if obj is None:
        if optional:
            return {}
        raise VolumeError(f'{kind} "{name}" not found')
    if kind == "configmap":
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        import base64
        for k, v in (obj.get("binaryData") or {}).items():
            data[k] = base64.b64decode(v)
    else:
        import base64
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        for k, v in (obj.get("stringData") or {}).items():
            data[k] = v.encode()
    out = {}
    if items:
        for it in items:
            if it["key"] not in data:
                if optional:
                    continue
                raise VolumeError(f'configmap/secret "{name}": key "{it["key"]}" not found')
            out[it["path"]] = (data[it["key"]], it.get("mode"))
    else:
        for k, v in data.items():
            out[k] = (v, None)
    return out


def _downward_files(pod: dict, items, pod_ip, host_ip, allocatable) -> dict[str, tuple[bytes, int | None]]:
    out = {}
    containers = {c["name"]: c for c in pod["spec"].get("containers", [])}
    for it in items or []:
        if "fieldRef" in it:
            try:
                val = field_value(pod, it["fieldRef"]["fieldPath"], pod_ip, host_ip)
            except ConfigError as e:
                raise VolumeError(str(e)) from None
        elif "resourceFieldRef" in it:
            r = it["resourceFieldRef"]
            c = containers.get(r.get("containerName")) or next(iter(containers.values()), {})
            val = resource_value(c, r["resource"], r.get("divisor"), allocatable)
        else:
            continue
        out[it["path"]] = (val.encode(), it.get("mode"))
    return out


def pod_owner_uid(pod: dict) -> int | None:
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    uids = set()
    for c in (spec.get("initContainers") or []) + spec.get("containers", []):
        sc = c.get("securityContext") or {}
        uids.add(sc.get("runAsUser", psc.get("runAsUser", 0)))
    if len(uids) == 1:
        u = uids.pop()
        return u if u else None
    return None


async def prepare(api, pod: dict, pod_dir: str, *, configmaps: dict, secrets: dict,
                  pod_ip: str | None, host_ip: str, allocatable: dict, mounted: list[str]) -> dict[str, str]:
    """Materialise every volume of the pod; return volume name -> host path.

    mounted: tmpfs mount points created here are appended (the caller unmounts them)."""
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    fs_group = psc.get("fsGroup")
    writer = FileWriter(pod_owner_uid(pod), fs_group)
    out: dict[str, str] = {}
    for v in spec.get("volumes") or []:
        name = v["name"]
        base = os.path.join(pod_dir, "volumes", name)
        if "hostPath" in v:
            hp = v["hostPath"]
            path, typ = hp["path"], hp.get("type", "")
            if typ == "DirectoryOrCreate" or (typ == "" and not os.path.exists(path)):
                os.makedirs(path, mode=0o755, exist_ok=True)
            elif typ == "FileOrCreate" and not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()
            elif not os.path.exists(path):
                raise VolumeError(f"hostPath {path} does not exist")
            out[name] = path
            continue
        if "emptyDir" in v:
            ed = v["emptyDir"] or {}
            os.makedirs(base, exist_ok=True)
            size = ed.get("sizeLimit")
            if (ed.get("medium") == "Memory" or size) and base not in mounted \
                    and base not in mounts_under(os.path.dirname(base)):
                mount_tmpfs(base, int(parse_quantity(size)) if size else None)
                mounted.append(base)
            if fs_group is not None:
                os.chown(base, -1, fs_group)
                os.chmod(base, 0o2777)
            else:
                os.chmod(base, 0o777)
            out[name] = base
            continue
        os.makedirs(base, mode=0o755, exist_ok=True)
        os.chmod(base, 0o755)
        files: dict[str, tuple[bytes, int | None]] = {}
        default_mode = 0o644
        if "configMap" in v:
            src = v["configMap"]
            default_mode = src.get("defaultMode", 0o644)
            files = _project_keys(configmaps.get(src["name"]), "configmap", src.get("items"),
                                  src.get("optional", False), src["name"])
        elif "secret" in v:
            src = v["secret"]
            default_mode = src.get("defaultMode", 0o644)
            files = _project_keys(secrets.get(src["secretName"]), "secret", src.get("items"),
                                  src.get("optional", False), src["secretName"])
        elif "downwardAPI" in v:
            src = v["downwardAPI"]
            default_mode = src.get("defaultMode", 0o644)
            files = _downward_files(pod, src.get("items"), pod_ip, host_ip, allocatable)
        elif "projected" in v:
            src = v["projected"]
            default_mode = src.get("defaultMode", 0o644)
            for s in src.get("sources") or []:
                if "configMap" in s:
                    c = s["configMap"]
                    files.update(_project_keys(configmaps.get(c["name"]), "configmap", c.get("items"),
                                               c.get("optional", False), c["name"]))
                elif "secret" in s:
                    c = s["secret"]
                    files.update(_project_keys(secrets.get(c["name"]), "secret", c.get("items"),
                                               c.get("optional", False), c["name"]))
                elif "downwardAPI" in s:
                    files.update(_downward_files(pod, s["downwardAPI"].get("items"), pod_ip, host_ip,
                                                 allocatable))
                elif "serviceAccountToken" in s:
                    t = s["serviceAccountToken"]
                    token = await request_token(api, pod, t.get("audience"), t.get("expirationSeconds", 3600))
                    files[t["path"]] = (token.encode(), 0o600 if writer.owner_uid else None)
                elif "clusterTrustBundle" in s or "podCertificate" in s:
                    raise VolumeError(f"volume {name}: projected source {list(s)} not supported")
        else:
            kinds = [k for k in v if k != "name"]
            raise VolumeError(f"volume {name}: type {kinds} is not supported by this node")
        for rel, (data, mode) in files.items():
            writer.write(base, rel, data, mode if mode is not None else default_mode)
        out[name] = base
    return out


async def request_token(api, pod: dict, audience: str | None, expiration: int) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    sa = spec.get("serviceAccountName") or "default"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [audience] if audience else [],
                     "expirationSeconds": int(expiration),
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                        "uid": meta["uid"]}}}
    from .kubeapi import ApiError
    try:
        out = await api.post(f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token", body)
    except ApiError as e:
        raise VolumeError(f"serviceaccount token for {sa}: {e}") from None
    return out["status"]["token"]


def container_mounts(container: dict, volume_paths: dict[str, str], pod: dict, env: dict) -> list:
    """volumeMounts -> sandbox Mounts (subPath/subPathExpr honoured)."""
    from .envvars import expand
    from .sandbox import Mount
    always_ro = set()
    for v in pod["spec"].get("volumes") or []:
        if any(k in v for k in ("configMap", "secret", "downwardAPI", "projected")):
            always_ro.add(v["name"])
    mounts = []
    for vm in container.get("volumeMounts") or []:
        src = volume_paths.get(vm["name"])
        if src is None:
            raise VolumeError(f"volumeMount {vm['name']}: no such volume")
        sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
        if sub:
            src = _safe_join(src, sub)
            if not os.path.exists(src):
                os.makedirs(src, mode=0o777, exist_ok=True)
        ro = bool(vm.get("readOnly")) or vm["name"] in always_ro
        mounts.append(Mount(src, vm["mountPath"], ro))
    return mounts
