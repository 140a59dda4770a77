"""Image -> local runtime table.

The node has no container runtime and pulls nothing. An image reference is mapped to a
program already installed on this machine; the sandbox sees the host's /usr read-only plus a
small bin directory that gives the runtime the names the image would give it.

  image (repository, any tag/digest; docker.io/library/ prefix optional)  runs
  ----------------------------------------------------------------------  ---------------------
  python                                  /usr/bin/python3.11 (Debian), as `python`, `python3`
                                          and `python3.11`; default command `python3`
  busybox, alpine, debian, ubuntu         /bin/sh (dash) with the host's coreutils;
                                          default command `sh`
  rolloutbatch/rolloutbatch               the project's own image (any registry, e.g. ghcr.io):
                                          this checkout's operator/ code and its venv's
                                          dependencies (bound read-only under /opt/rolloutbatch),
                                          run by the Debian Python; entrypoint, as the
                                          Dockerfile's, `rolloutbatch operator`

Any other image cannot run here: the container stays Waiting with reason ErrImagePull.
The machine's pyenv Python is deliberately not used: /root is mode 700, so sandboxed non-root
users could not execute it.
"""
from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

PYTHON = "/usr/bin/python3.11"
SHELL = "/bin/sh"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHECKOUT = Path(__file__).resolve().parents[2]
PROJECT_IMAGE = "rolloutbatch/rolloutbatch"


@dataclass(frozen=True)
class Runtime:
    name: str                   # table key: "python" or "shell"
    repository: str             # normalised image repository, e.g. "python"
    default_command: tuple[str, ...]
    links: dict = field(default_factory=dict)   # name in the sandbox's /usr/local/bin -> target
    program: str = ""           # the host program the runtime is (for imageID)
    entrypoint: tuple[str, ...] = ()             # the image's ENTRYPOINT (default_command is its CMD)
    scripts: dict = field(default_factory=dict)  # name in /usr/local/bin -> executable file content
    binds: dict = field(default_factory=dict)    # sandbox path -> host path, bound read-only

    @property
    def image_id(self) -> str:
        """Stable per runtime and host program version (mtime+size stand in for a digest)."""
        try:
            st = os.stat(self.program)
            ident = f"{self.program}:{st.st_size}:{int(st.st_mtime)}"
        except OSError:
            ident = self.program
        digest = hashlib.sha256(f"{self.name}|{ident}".encode()).hexdigest()
        return f"docker-pullable://{self.repository}@sha256:{digest}"


_TABLE = {
    "python": ("python", ("python3",), {"python": PYTHON, "python3": PYTHON, "python3.11": PYTHON}, PYTHON),
    "busybox": ("shell", ("sh",), {}, SHELL),
    "alpine": ("shell", ("sh",), {}, SHELL),
    "debian": ("shell", ("sh",), {}, SHELL),
    "ubuntu": ("shell", ("sh",), {}, SHELL),
}


def repository_of(image: str) -> str:
    """'docker.io/library/python:3.12-alpine' -> 'python'; 'python@sha256:..' -> 'python'."""
    ref = image.strip()
    ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    parts = ref.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # registry host
    if len(parts) == 2 and parts[0] == "library":
        parts = parts[1:]
    return "/".join(parts)


def _project_runtime() -> Runtime:
    # The venv's own interpreter lives under /root (mode 700, see above); its packages are pure
    # Python or cp311 wheels, which the Debian python3.11 loads as well.
    # Bound at fixed paths under /opt, not at their host paths: a checkout under /tmp would land
    # in the pod's private /tmp, whose missing parents bwrap creates unreadable (mode 0700).
    code, deps = str(CHECKOUT / "operator"), sysconfig.get_paths()["purelib"]
    binds = {"/opt/rolloutbatch/operator": code, "/opt/rolloutbatch/site-packages": deps}
    script = f'#!/bin/sh\nPYTHONPATH={":".join(binds)} exec {PYTHON} -m rolloutbatch.cli.main "$@"\n'
    return Runtime(name="rolloutbatch", repository=PROJECT_IMAGE, default_command=(),
                   entrypoint=("rolloutbatch", "operator"), scripts={"rolloutbatch": script},
                   binds=binds, program=code)


def resolve(image: str) -> Runtime | None:
    repo = repository_of(image or "")
    if repo == PROJECT_IMAGE:
        return _project_runtime()
    entry = _TABLE.get(repo)
    if entry is None:
        return None
    name, cmd, links, program = entry
    return Runtime(name=name, repository=repo, default_command=tuple(cmd), links=dict(links),
                   program=program)


def unsupported_message(image: str) -> str:
    return (f'node cannot run image "{image}": this devcluster node has no container runtime '
            f'and maps only {", ".join(sorted([*_TABLE, PROJECT_IMAGE]))} images to local programs')


def ensure_bin_dir(base: str, runtime: Runtime) -> str:
    """Create (idempotently) the directory bound at /usr/local/bin for a runtime; return it."""
    path = os.path.join(base, "runtimes", runtime.name, "bin")
    os.makedirs(path, exist_ok=True)
    for name, target in runtime.links.items():
        link = os.path.join(path, name)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        try:
            os.unlink(link)
        except FileNotFoundError:
            pass
        os.symlink(target, link)
    for name, content in runtime.scripts.items():
        script = os.path.join(path, name)
        try:
            with open(script) as f:
                if f.read() == content:
                    continue
        except OSError:
            pass
        tmp = script + ".tmp"
        with open(tmp, "w") as f:
            f.write(content)
        os.chmod(tmp, 0o755)
        os.replace(tmp, script)
    os.chmod(path, 0o755)
    return path
