"""The bubblewrap command line for one container (pure; no I/O).

Sandbox layout:
  /usr (ro, the host's), /bin /sbin /lib /lib64 as on the host (symlinks into /usr on a merged-usr
  system, else read-only binds), a few read-only files from /etc (TLS roots, passwd/group,
  ld.so cache, timezone, Python's site config), the pod's own /etc/hosts and /etc/hostname,
  the runtime's bin directory at /usr/local/bin (e.g. `python` -> /usr/bin/python3.11),
  a fresh /proc (own PID namespace), a minimal /dev, private tmpfs /tmp (1777) and /dev/shm,
  then the pod's volumes at their mountPaths (read-only when asked), and finally the root
  tmpfs is remounted read-only.
Namespaces: mount, PID, IPC, UTS (hostname = pod hostname), and network: the pod's own netns
(made by the CNI plugins, entered with nsenter, shared by the pod's containers) when the agent
has pod networking, else a fresh loopback-only one per container.
`--die-with-parent` ties the sandbox to the agent; `--new-session` detaches the terminal.
Users: bwrap runs as root (the agent); a non-root runAsUser/runAsGroup is applied inside by
`setpriv`, which also clears the capability bounding set. Root containers get Docker's
default capability set, adjusted by securityContext.capabilities.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

BWRAP = "bwrap"
SETPRIV = "/usr/bin/setpriv"

# Docker/containerd default capabilities for root containers.
DEFAULT_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
                "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
                "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE")

# Read-only files/dirs from the host's /etc (bound when they exist).
ETC_PATHS = ("/etc/alternatives", "/etc/ssl", "/etc/ca-certificates", "/etc/ld.so.cache",
             "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/nsswitch.conf",
             "/etc/passwd", "/etc/group", "/etc/protocols", "/etc/services", "/etc/mime.types",
             "/etc/python3", "/etc/python3.11", "/etc/timezone", "/etc/debian_version",
             "/etc/os-release")

# Top-level host paths besides /usr: symlink (merged usr) or read-only bind.
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")


@dataclass(frozen=True)
class Mount:
    source: str          # host path
    dest: str            # path in the sandbox
    readonly: bool = False


@dataclass
class SandboxSpec:
    argv: list[str]                      # the command, already resolved and expanded
    hostname: str
    runtime_bin: str | None = None       # host dir bound read-only at /usr/local/bin
    mounts: list[Mount] = field(default_factory=list)
    etc_files: dict = field(default_factory=dict)   # sandbox path -> host file (hosts, hostname)
    working_dir: str | None = None
    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()
    no_new_privs: bool = False
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    # host layout: path -> symlink target (e.g. "/lib" -> "usr/lib") or "" when a real dir;
    # paths absent from the dict do not exist on the host.
    root_layout: dict = field(default_factory=dict)
    host_network: bool = False           # pod.spec.hostNetwork: keep the agent's network namespace
    netns: str | None = None             # path of a netns to run in (the pod's, or the node's)
    etc_paths: tuple[str, ...] = ETC_PATHS


def _cap_name(cap: str) -> str:
    cap = cap.upper()
    return cap if cap.startswith("CAP_") else "CAP_" + cap


def effective_caps(add=(), drop=()) -> list[str]:
    """Root container capability set: Docker's defaults + add - drop ("ALL" honoured)."""
    drop_n = {_cap_name(c) for c in drop}
    add_n = [_cap_name(c) for c in add]
    base = [] if "CAP_ALL" in drop_n else [c for c in DEFAULT_CAPS if c not in drop_n]
    if "CAP_ALL" in add_n:
        return ["ALL"]
    for c in add_n:
        if c not in base:
            base.append(c)
    return base


def _under(path: str, parent: str) -> bool:
    path, parent = posixpath.normpath(path), posixpath.normpath(parent)
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _ancestors(path: str) -> list[str]:
    parts = posixpath.normpath(path).strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def build_argv(spec: SandboxSpec) -> list[str]:
    # bwrap creates missing parents of mount points with mode 0700, which a non-root user cannot
    # traverse: create every parent explicitly with 0755 before binding below it.
    made: set[str] = {"/", "/usr", "/proc", "/dev", "/tmp"} | set(spec.root_layout)

    def parents(dest: str) -> list[str]:
        out = []
        for d in _ancestors(dest):
            if d in made or any(_under(d, x) for x in ("/usr", "/proc", "/dev", "/tmp")):
                continue
            made.add(d)
            out += ["--perms", "0755", "--dir", d]
        return out

    a = ["nsenter", f"--net={spec.netns}"] if spec.netns else []
    a += [BWRAP, "--die-with-parent", "--new-session", "--unshare-pid"]
    if not spec.host_network and not spec.netns:
        a.append("--unshare-net")
    a += ["--unshare-ipc", "--unshare-uts", "--hostname", spec.hostname,
         "--ro-bind", "/usr", "/usr"]
    for p in ROOT_LINKS:
        if p not in spec.root_layout:
            continue
        target = spec.root_layout[p]
        if target:
            a += ["--symlink", target, p]
        else:
            a += ["--ro-bind", p, p]
    for p in spec.etc_paths:
        if p in spec.etc_files:
            continue
        a += parents(p) + ["--ro-bind-try", p, p]
    for dest, src in sorted(spec.etc_files.items()):
        a += parents(dest) + ["--ro-bind", src, dest]
    if spec.runtime_bin:
        a += ["--ro-bind", spec.runtime_bin, "/usr/local/bin"]
    a += ["--proc", "/proc", "--dev", "/dev",
          "--perms", "1777", "--tmpfs", "/dev/shm",
          "--perms", "1777", "--tmpfs", "/tmp"]
    wd = spec.working_dir
    if wd and wd != "/" and not any(_under(wd, m.dest) for m in spec.mounts) \
            and not _under(wd, "/tmp") and not _under(wd, "/usr"):
        a += parents(wd + "/x")
    # parents before children, so nested mountPaths work
    for m in sorted(spec.mounts, key=lambda m: (posixpath.normpath(m.dest).count("/"), m.dest)):
        a += parents(m.dest)
        made.add(posixpath.normpath(m.dest))
        a += ["--ro-bind" if m.readonly else "--bind", m.source, m.dest]
    a += ["--remount-ro", "/"]
    if wd:
        a += ["--chdir", wd]
    a += ["--cap-drop", "ALL"]
    if spec.uid != 0 or spec.gid != 0 or spec.groups:
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
            a += ["--cap-add", cap]
        a.append("--")
        a += [SETPRIV, f"--reuid={spec.uid}", f"--regid={spec.gid}"]
        if spec.groups:
            a.append("--groups=" + ",".join(str(g) for g in spec.groups))
        else:
            a.append("--clear-groups")
        a += ["--inh-caps=-all", "--bounding-set=-all"]
        if spec.no_new_privs:
            a.append("--no-new-privs")
        a.append("--")
    else:
        for cap in effective_caps(spec.cap_add, spec.cap_drop):
            a += ["--cap-add", cap]
        a.append("--")
    a += list(spec.argv)
    return a


def host_root_layout() -> dict:
    """Describe /bin, /lib... on this host for SandboxSpec.root_layout (the only impure helper)."""
    import os
    out = {}
    for p in ROOT_LINKS:
        if os.path.islink(p):
            out[p] = os.readlink(p)
        elif os.path.isdir(p):
            out[p] = ""
    return out
