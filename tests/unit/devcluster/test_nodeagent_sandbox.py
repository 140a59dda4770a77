"""devcluster.nodeagent.sandbox: the bwrap argv (pure), plus one real sandbox run when possible."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from devcluster.nodeagent import images
from devcluster.nodeagent.sandbox import Mount, SandboxSpec, build_argv, effective_caps, host_root_layout

MERGED = {"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"}


def _pairs(argv, flag):
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_namespaces_and_lifetime_flags():
    argv = build_argv(SandboxSpec(argv=["python", "-c", "1"], hostname="p", root_layout=MERGED))
    assert argv[0] == "bwrap"
    for flag in ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
                 "--unshare-ipc", "--unshare-uts"):
        assert flag in argv
    assert argv[argv.index("--hostname") + 1] == "p"
    assert ("/usr", "/usr") in _pairs(argv, "--ro-bind")
    assert ("usr/lib", "/lib") in _pairs(argv, "--symlink")
    assert argv[-4:] == ["--", "python", "-c", "1"]
    # the root is made read-only after everything is mounted
    assert argv.index("--remount-ro") > max(i for i, a in enumerate(argv) if a in ("--bind", "--ro-bind"))


def test_root_container_gets_default_caps_and_no_setpriv():
    argv = build_argv(SandboxSpec(argv=["sh"], hostname="p", cap_drop=("NET_RAW",), cap_add=("SYS_PTRACE",)))
    assert "/usr/bin/setpriv" not in argv
    caps = [argv[i + 1] for i, a in enumerate(argv) if a == "--cap-add"]
    assert "CAP_CHOWN" in caps and "CAP_SYS_PTRACE" in caps and "CAP_NET_RAW" not in caps
    assert argv[argv.index("--cap-drop") + 1] == "ALL"


def test_effective_caps_all():
    assert effective_caps(drop=("ALL",)) == []
    assert effective_caps(add=("ALL",)) == ["ALL"]


def test_non_root_uses_setpriv():
    argv = build_argv(SandboxSpec(argv=["id"], hostname="p", uid=1000, gid=3000, groups=(2000,),
                                  no_new_privs=True))
    sp = argv.index("/usr/bin/setpriv")
    tail = argv[sp:]
    assert "--reuid=1000" in tail and "--regid=3000" in tail and "--groups=2000" in tail
    assert "--bounding-set=-all" in tail and "--no-new-privs" in tail
    assert tail[-2:] == ["--", "id"]


def test_volume_mounts_readonly_nested_order_and_parents():
    argv = build_argv(SandboxSpec(argv=["x"], hostname="p", mounts=[
        Mount("/h/inner", "/data/inner", True), Mount("/h/data", "/data"), Mount("/h/cfg", "/etc/app/cfg", True)]))
    binds = [(a, argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    dests = [d for _, _, d in binds]
    assert dests.index("/data") < dests.index("/data/inner")
    assert ("--ro-bind", "/h/inner", "/data/inner") in binds
    assert ("--bind", "/h/data", "/data") in binds
    # parents get an explicit 0755 directory (bwrap would create them 0700)
    dirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    assert "/etc/app" in dirs and "/etc" in dirs
    assert "/data" not in dirs  # a mount point itself is created by the bind


def test_working_dir_created_unless_in_a_volume():
    argv = build_argv(SandboxSpec(argv=["x"], hostname="p", working_dir="/work/dir"))
    assert argv[argv.index("--chdir") + 1] == "/work/dir"
    assert "/work/dir" in [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    argv = build_argv(SandboxSpec(argv=["x"], hostname="p", working_dir="/data/sub",
                                  mounts=[Mount("/h", "/data")]))
    assert "/data/sub" not in [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]


def test_tmp_is_world_writable_tmpfs():
    argv = build_argv(SandboxSpec(argv=["x"], hostname="p"))
    i = argv.index("/tmp")
    assert argv[i - 1] == "--tmpfs" and argv[i - 3:i - 1] == ["--perms", "1777"]


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="needs bubblewrap and root (the node agent runs as root)")


@needs_bwrap
def test_real_sandbox_runs_python_as_user_with_volume(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "f").write_text("hello")
    os.chmod(vol, 0o777)
    bin_dir = images.ensure_bin_dir(str(tmp_path), images.resolve("python:3.12-alpine"))
    code = ("import os, socket; print(os.getuid(), os.getgid(), socket.gethostname(), "
            "open('/data/f').read(), os.getcwd()); open('/data/out', 'w').write('x')\n"
            "try:\n open('/etc/zz', 'w')\nexcept OSError as e: print('ro', e.errno)")
    argv = build_argv(SandboxSpec(argv=["python", "-c", code], hostname="pod-a", runtime_bin=bin_dir,
                                  mounts=[Mount(str(vol), "/data")], working_dir="/w",
                                  uid=1000, gid=1000, root_layout=host_root_layout()))
    out = subprocess.run(argv, env={"PATH": images.DEFAULT_PATH}, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1000", "1000", "pod-a", "hello", "/w", "ro", "30"]
    assert (vol / "out").stat().st_uid == 1000


@needs_bwrap
def test_real_sandbox_has_no_network_and_own_pids(tmp_path):
    code = ("import os, socket\nprint(os.getpid())\ns = socket.socket()\ntry:\n"
            " s.connect(('10.0.0.1', 80)); print('net')\nexcept OSError: print('nonet')")
    bin_dir = images.ensure_bin_dir(str(tmp_path), images.resolve("python"))
    argv = build_argv(SandboxSpec(argv=["python3", "-c", code], hostname="p", runtime_bin=bin_dir,
                                  root_layout=host_root_layout()))
    out = subprocess.run(argv, env={"PATH": images.DEFAULT_PATH}, capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["2", "nonet"], out.stderr


def test_host_network_keeps_the_network_namespace():
    argv = build_argv(SandboxSpec(argv=["x"], hostname="p", host_network=True))
    assert "--unshare-net" not in argv and "--unshare-pid" in argv
