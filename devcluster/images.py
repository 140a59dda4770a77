"""Container images for the real (kubelet + containerd) devcluster node, built on this machine.

Nothing is pulled from a registry: this machine reaches only package registries, so every image
that examples, tests and bench name is made here, from Debian packages and this checkout.

  image            names (containerd's normalised form)          made from
  ---------------  --------------------------------------------  ---------------------------------
  python           docker.io/library/python:3.12-alpine, ...     mmdebstrap: Debian bookworm's
                   (PYTHON_NAMES)                                python3 + pip + venv (a stand-in)
  pause            registry.k8s.io/pause:3.10.2                  gcc -static -Os of pause.c from
                                                                 the k8s.io/kubernetes module cache
  operator         ghcr.io/rolloutbatch/rolloutbatch:<version>,  the repository's Dockerfile, by
                   :latest, docker.io/rolloutbatch/...:latest    buildah, FROM the python stand-in

Stand-ins say so: each name gets its own config whose labels name it (rolloutbatch.dev/stand-in
and the OCI description); the layer is shared. Names nobody here runs (busybox, alpine, nginx,
...) are deliberately not provided: tests rely on unknown images failing to pull.

Reproducibility: the python and pause images are bit-for-bit functions of their inputs (same
packages from the mirror, same compiler): SOURCE_DATE_EPOCH is fixed, layers are stored
uncompressed (gzip output depends on the zlib version) and archives are written with sorted,
zeroed tar headers. The Debian mirror moves (security updates), so a later cold build may differ;
the index records the python image's package versions to say why. `build --force` picks such
updates up; the input hash (recipe, package list, names; pause.c and flags; the Dockerfile, the
operator's sources and its base's digest) decides everything else.
The operator image is not reproducible: its pip steps resolve dependencies from PyPI when run.

Output, under .devcluster/images/: <image>.oci.tar (an OCI image layout, one index entry per
name, annotated with io.containerd.image.name so `ctr images import` names them) and
index.json (names, digests, input hash). A build is skipped when its input hash is unchanged.
Each archive is also kept in a per-user cache keyed by that hash (CACHE: $XDG_CACHE_HOME, else
~/.cache, /rolloutbatch/images; the newest KEEP per image), as Go keeps its build cache: another
checkout of the same inputs (a fresh clone in CI) copies it instead of building again.

  python -m devcluster.images build [--out DIR] [--force] [--only python pause operator]
  python -m devcluster.images list [--out DIR]
  python -m devcluster.images load --address SOCK [--namespace k8s.io] [ARCHIVE ...]
  python -m devcluster.images load-image --address SOCK IMAGE TAR
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
OUT = CHECKOUT / ".devcluster" / "images"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rolloutbatch" / "images"
KEEP = 3                         # cached archives kept per image (the newest)
CTR = CHECKOUT / ".devcluster" / "bin" / "runtime" / "ctr"
IMAGES = ("python", "pause", "operator")   # build order: the operator is built FROM python
RECIPE = 1                       # bump to invalidate every cached image when this file's logic changes
EPOCH = 1735689600               # 2025-01-01T00:00:00Z: every file and config timestamp
CREATED = "2025-01-01T00:00:00Z"
SUITE = "bookworm"
PY_VERSION = "3.11"              # bookworm's python3; checked against the built rootfs
MIRRORS = ("deb http://deb.debian.org/debian bookworm main",
           "deb http://deb.debian.org/debian bookworm-updates main",
           "deb http://deb.debian.org/debian-security bookworm-security main")
PYTHON_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates", "usr-is-merged")
# What examples/tests/manifests name (python:3.12-alpine is operator/rolloutbatch/core/defaults.py's IMAGE), plus
# the Dockerfile's default base.
PYTHON_NAMES = ("python:3", "python:3.11", "python:3.11-slim-bookworm", "python:3.11.11-slim-bookworm",
                "python:3.12", "python:3.12-alpine", "python:3.12-slim")
DOCKERFILE_BASE = "python:3.11.11-slim-bookworm"
K8S_MODULE = "k8s.io/kubernetes@v1.37.2"
PAUSE_NAMES = ("registry.k8s.io/pause:3.10.2",)   # containerd v2.4.2's DefaultSandboxImage
PAUSE_CFLAGS = ("-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10.2-kubernetes-v1.37.2")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_CONFIG, MT_MANIFEST = "application/vnd.oci.image.config.v1+json", "application/vnd.oci.image.manifest.v1+json"


# --- pure parts -----------------------------------------------------------------------------
def normalise(name: str) -> str:
    """containerd's (docker's) full form: 'python:3.12' -> 'docker.io/library/python:3.12'."""
    first, _, rest = name.partition("/")
    if not rest or not ("." in first or ":" in first or first == "localhost"):
        first, rest = "docker.io", name
    name = f"{first}/{'library/' if first == 'docker.io' and '/' not in rest else ''}{rest}"
    last = name.rsplit("/", 1)[-1]
    return name if (":" in last or "@" in last) else name + ":latest"


def operator_names(version: str) -> list[str]:
    # manifests/manager/deployment.yaml runs ghcr.io/rolloutbatch/rolloutbatch:<version>.
    return [f"ghcr.io/rolloutbatch/rolloutbatch:{version}", "ghcr.io/rolloutbatch/rolloutbatch:latest",
            "docker.io/rolloutbatch/rolloutbatch:latest"]


def stand_in_labels(name: str, what: str) -> dict:
    host = normalise(name).split("/", 1)[0]
    return {"org.opencontainers.image.description": f"{what}, a local stand-in for {name}; "
            f"not {'Docker Hub' if host == 'docker.io' else host}'s image",
            "rolloutbatch.dev/stand-in": "true", "rolloutbatch.dev/recipe": "devcluster/images.py"}


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def descriptor(media_type: str, data: bytes) -> dict:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


def image_config(layers: list[str], labels: dict, history: str, *, cmd=None, entrypoint=None,
                 env=(PATH_ENV,), user=None, workdir=None, arch: str = "amd64") -> dict:
    cfg = {"Labels": dict(labels)}
    for key, value in (("Env", list(env) or None), ("Cmd", cmd), ("Entrypoint", entrypoint),
                       ("User", user), ("WorkingDir", workdir)):
        if value is not None:
            cfg[key] = list(value) if isinstance(value, (list, tuple)) else value
    return {"architecture": arch, "os": "linux", "created": CREATED, "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": list(layers)},
            "history": [{"created": CREATED, "created_by": history}]}


def manifest(config: bytes, layers: list[dict], annotations: dict | None = None) -> dict:
    m = {"schemaVersion": 2, "mediaType": MT_MANIFEST,
         "config": descriptor(MT_CONFIG, config), "layers": layers}
    if annotations:
        m["annotations"] = annotations
    return m


def oci_index(entries: list[tuple[str, dict]], arch: str = "amd64") -> dict:
    """One descriptor per name. io.containerd.image.name is what `ctr images import` names the
    image; ref.name (the same full name) is what `oci-archive:FILE:NAME` (buildah) selects."""
    return {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{**desc, "platform": {"architecture": arch, "os": "linux"},
                           "annotations": {"io.containerd.image.name": name,
                                           "org.opencontainers.image.ref.name": name}}
                          for name, desc in sorted(entries)]}


def input_hash(params: dict, files=()) -> str:
    h = hashlib.sha256(canonical({"recipe": RECIPE, **params}))
    for f in sorted(Path(p) for p in files):
        h.update(f"\0{f.relative_to(CHECKOUT) if f.is_relative_to(CHECKOUT) else f}\0".encode())
        h.update(f.read_bytes())
    return "sha256:" + h.hexdigest()


def mmdebstrap_argv(out_tar: str) -> list[str]:
    return ["mmdebstrap", "--variant=essential", "--include=" + ",".join(PYTHON_PACKAGES),
            # merged /usr by symlinks, so init-system-helpers takes usr-is-merged, not usrmerge+perl
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            "--skip=output/dev",            # the runtime makes /dev; device nodes have no place in a layer
            *(f"--dpkgopt=path-{kind}={p}" for kind, p in (
                ("exclude", "/usr/share/doc/*"), ("include", "/usr/share/doc/*/copyright"),
                ("exclude", "/usr/share/man/*"), ("exclude", "/usr/share/info/*"),
                ("exclude", "/usr/share/locale/*"), ("include", "/usr/share/locale/locale.alias"))),
            '--customize-hook=ln -s python3 "$1/usr/bin/python"',
            # PEP 668's marker would make `pip install` in a Dockerfile built on this fail
            '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
            # host-specific files (see mmdebstrap(1), SOURCE_DATE_EPOCH); the runtime mounts its own
            '--customize-hook=rm -f "$1/etc/resolv.conf" "$1/etc/hostname"',
            SUITE, out_tar, *MIRRORS]


def pause_argv(src: str, out: str) -> list[str]:
    return ["gcc", *PAUSE_CFLAGS, "-o", out, src]


def buildah_global(storage: dict) -> list[str]:
    # A private store per build: daemonless, nothing left behind, the host's store untouched.
    return ["buildah", "--root", storage["root"], "--runroot", storage["runroot"],
            "--storage-driver", storage["driver"]]


def buildah_argv(storage: dict, base: str, names: list[str], labels: dict, env: dict) -> list[str]:
    # chroot isolation: RUN steps need no OCI runtime and share the host's network (PyPI).
    argv = [*buildah_global(storage), "bud", "--isolation", "chroot", "--pull=never",
            "--identity-label=false", f"--timestamp={EPOCH}", "--build-arg", f"BASE={base}",
            # pip reaches PyPI through this machine's TLS-intercepting proxy: its CA bundle, over
            # the stand-in's (Debian's pip reads that path), and proxy settings, never in the image
            "-v", f"{HOST_CA}:/etc/ssl/certs/ca-certificates.crt:ro"]
    argv += [a for k in PROXY_VARS if env.get(k) for a in ("--build-arg", f"{k}={env[k]}")]
    argv += [a for k, v in sorted(labels.items()) for a in ("--label", f"{k}={v}")]
    argv += [a for n in names for a in ("-t", n)]
    return argv + ["-f", str(CHECKOUT / "Dockerfile"), str(CHECKOUT)]


def ctr_import_argv(ctr: str, address: str, namespace: str, archive: str, *,
                    index_name: str | None = None, snapshotter: str | None = None) -> list[str]:
    argv = [ctr, "-a", address, "-n", namespace, "images", "import"]
    if index_name:   # a user's archive, named or not, becomes IMAGE; containerd keeps its own
        # names too, but as expiring back-references to IMAGE (core/transfer/image/imagestore.go)
        argv += ["--index-name", normalise(index_name)]
    if snapshotter:  # unpack for the snapshotter the CRI uses, or pods cannot start from it
        argv += ["--snapshotter", snapshotter]
    return argv + [archive]


# --- effects --------------------------------------------------------------------------------
def arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def run(argv, **kw):
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, check=True, **kw)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def write_archive(path: Path, blobs: dict, index: dict) -> None:
    """An OCI layout as a tar, byte-stable: sorted entries, fixed mtime/owner/mode."""
    def add(t, name, data=None, src=None):
        info = tarfile.TarInfo(name)
        info.mtime, info.mode = EPOCH, 0o644
        info.size = len(data) if data is not None else src.stat().st_size
        with (io.BytesIO(data) if data is not None else open(src, "rb")) as f:
            t.addfile(info, f)
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as t:
        add(t, "index.json", canonical(index))
        add(t, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        for digest in sorted(blobs):
            blob = blobs[digest]
            add(t, "blobs/sha256/" + digest.split(":", 1)[1],
                *((blob, None) if isinstance(blob, bytes) else (None, Path(blob))))
    os.replace(tmp, path)


def package_layout(path: Path, layer: Path, names, labels_for, history: str, **config) -> dict:
    """One uncompressed layer + one config/manifest per name; returns {name: manifest digest}."""
    digest, a = sha256_file(layer), arch()
    blobs, entries = {digest: layer}, []
    layer_desc = {"mediaType": MT_LAYER, "digest": digest, "size": layer.stat().st_size}
    for name in names:
        cfg = canonical(image_config([digest], labels_for(name), history, arch=a, **config))
        man = canonical(manifest(cfg, [layer_desc]))
        blobs[descriptor(MT_CONFIG, cfg)["digest"]], desc = cfg, descriptor(MT_MANIFEST, man)
        blobs[desc["digest"]] = man
        entries.append((normalise(name), desc))
    write_archive(path, blobs, oci_index(entries, a))
    return {n: d["digest"] for n, d in sorted(entries)}


def build_python(out: Path, work: Path) -> dict:
    rootfs = work / "rootfs.tar"
    run(mmdebstrap_argv(str(rootfs)), env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)},
        stdout=subprocess.DEVNULL)
    with tarfile.open(rootfs) as t:   # the labels below name a version: make sure it is the one
        members = set(t.getnames())
        status = t.extractfile("./var/lib/dpkg/status").read().decode()
    assert f"./usr/bin/python{PY_VERSION}" in members and "./usr/bin/python" in members, "no python"
    packages = dpkg_versions(status)
    what = f"Debian {SUITE}'s Python {PY_VERSION}"
    digests = package_layout(out / "python.oci.tar", rootfs, PYTHON_NAMES,
                             lambda n: stand_in_labels(n, what),
                             f"mmdebstrap {SUITE} {' '.join(PYTHON_PACKAGES)} (devcluster/images.py)",
                             cmd=["python3"], env=(PATH_ENV, "LANG=C.UTF-8"), workdir="/")
    return {"names": digests, "layer": sha256_file(rootfs), "packages": packages}


def dpkg_versions(status: str) -> dict:
    out = {}
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        if "Package" in fields:
            out[fields["Package"]] = fields.get("Version", "")
    return dict(sorted(out.items()))


def pause_source() -> Path:
    # The Go module cache holds the Kubernetes sources once localkube builds; pause.c is compiled
    # from there, never copied into this repository.
    gomodcache = os.environ.get("GOMODCACHE") or subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip() \
        or str(Path.home() / "go" / "pkg" / "mod")
    src = Path(gomodcache) / K8S_MODULE / "build" / "pause" / "linux" / "pause.c"
    if not src.exists():
        sys.exit(f"{src} missing: cd devcluster/localkube && GOTOOLCHAIN=local go mod download k8s.io/kubernetes")
    return src


def build_pause(out: Path, work: Path) -> dict:
    binary, layer = work / "pause", work / "pause-layer.tar"
    run(pause_argv(str(pause_source()), str(binary)))
    run(["strip", str(binary)])     # as build/pause/Makefile does
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as t:
        info = tarfile.TarInfo("pause")
        info.size, info.mtime, info.mode = binary.stat().st_size, EPOCH, 0o755
        with open(binary, "rb") as f:
            t.addfile(info, f)
    what = f"Kubernetes' pause (build/pause/linux/pause.c of {K8S_MODULE}, gcc -static -Os here)"
    return {"names": package_layout(out / "pause.oci.tar", layer, PAUSE_NAMES,
                                    lambda n: stand_in_labels(n, what), f"gcc {' '.join(PAUSE_CFLAGS)} pause.c",
                                    entrypoint=["/pause"], env=(), user="65535:65535")}


def project_version() -> str:
    return tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["version"]


def operator_files() -> list[Path]:
    files = [CHECKOUT / n for n in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md")]
    return files + [p for p in (CHECKOUT / "operator").rglob("*") if p.is_file()
                    and "__pycache__" not in p.parts and not any(s.endswith(".egg-info") for s in p.parts)]


def storage_driver(storage: dict) -> str:
    # overlay needs overlayfs over the store's filesystem; vfs (a full copy per layer) always works
    if os.environ.get("BUILDAH_STORAGE_DRIVER"):
        return os.environ["BUILDAH_STORAGE_DRIVER"]
    probe = subprocess.run([*buildah_global({**storage, "driver": "overlay"}), "info"], capture_output=True)
    return "overlay" if probe.returncode == 0 else "vfs"


def build_operator(out: Path, work: Path, python_archive: Path, base_digest: str) -> dict:
    base, names = normalise(DOCKERFILE_BASE), operator_names(project_version())
    storage = {"root": str(work / "buildah-root"), "runroot": str(work / "buildah-run")}
    storage["driver"] = storage_driver(storage)
    g = buildah_global(storage)
    # The stand-in goes into the private store under the Dockerfile's base name; --pull=never
    # then guarantees that FROM resolves to it and nothing is fetched from a registry.
    image_id = run([*g, "pull", "-q", f"oci-archive:{python_archive}:{base}"],
                   capture_output=True, text=True).stdout.strip().splitlines()[-1]
    run([*g, "tag", image_id, base])
    labels = {"rolloutbatch.dev/stand-in": "false",   # the real operator, on a stand-in base
              "org.opencontainers.image.base.name": base, "org.opencontainers.image.base.digest": base_digest,
              "org.opencontainers.image.version": project_version()}
    run(buildah_argv(storage, base, names, labels, dict(os.environ)))
    layout = work / "layout"    # layers gzip'd (buildah's default): pip makes this image unreproducible anyway
    run([*g, "push", "-q", "--format", "oci", names[0], f"oci:{layout}:{names[0]}"])
    desc = json.loads((layout / "index.json").read_text())["manifests"][0]
    desc = {k: desc[k] for k in ("mediaType", "digest", "size")}
    blobs = {"sha256:" + p.name: p for p in (layout / "blobs" / "sha256").iterdir()}
    write_archive(out / "operator.oci.tar", blobs, oci_index([(n, desc) for n in names], arch()))
    run([*g, "rmi", "--all", "--force"], stdout=subprocess.DEVNULL)   # unmounts, so the store can go
    return {"names": {n: desc["digest"] for n in names}, "storage_driver": storage["driver"]}


def read_index(out: Path) -> dict:
    try:
        return json.loads((out / "index.json").read_text())
    except (OSError, ValueError):
        return {"format": "rolloutbatch.dev/images/v1", "images": {}}


def cached(cache: Path, image: str, inputs: str) -> tuple[Path, Path]:
    """The cache's archive and index entry for one image's inputs."""
    stem = f"{image}-{inputs.removeprefix('sha256:')[:32]}"
    return cache / f"{stem}.oci.tar", cache / f"{stem}.json"


def take_from_cache(cache: Path, image: str, inputs: str, archive: Path) -> dict | None:
    """Copy a cached build of these inputs to `archive`; its index entry, or None (a miss, or a
    copy whose digest no longer matches its entry)."""
    src, meta = cached(cache, image, inputs)
    try:
        entry = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    if entry.get("inputs") != inputs or not src.is_file() or sha256_file(src) != entry.get("archive_digest"):
        return None
    tmp = archive.with_name(f".{archive.name}.part")
    shutil.copyfile(src, tmp)
    tmp.replace(archive)
    os.utime(meta)    # most recently used: pruned last
    return entry


def put_in_cache(cache: Path, image: str, entry: dict, archive: Path) -> None:
    """Keep a finished build (best effort: a full or read-only cache only costs a later build)."""
    dst, meta = cached(cache, image, entry["inputs"])
    try:
        cache.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, dst.with_name(f".{dst.name}.part"))
        dst.with_name(f".{dst.name}.part").replace(dst)
        meta.write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n")
        for old in sorted(cache.glob(f"{image}-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)[KEEP:]:
            old.with_suffix(".oci.tar").unlink(missing_ok=True)
            old.unlink(missing_ok=True)
    except OSError as e:
        print(f"{image}: not cached ({e})", file=sys.stderr)


def build(out: Path, only=IMAGES, force=False, cache: Path | None = CACHE) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    index = read_index(out)
    for image in (i for i in IMAGES if i in only):
        if image == "python":
            inputs = input_hash({"argv": mmdebstrap_argv("OUT"), "names": PYTHON_NAMES, "epoch": EPOCH})
        elif image == "pause":
            inputs = input_hash({"cflags": PAUSE_CFLAGS, "names": PAUSE_NAMES}, [pause_source()])
        else:
            base = index["images"].get("python", {}).get("names", {}).get(normalise(DOCKERFILE_BASE))
            if not base:
                sys.exit("the operator image is built on the python stand-in: build it first")
            inputs = input_hash({"base": base, "version": project_version()}, operator_files())
        entry, archive = index["images"].get(image, {}), out / f"{image}.oci.tar"
        if not force and entry.get("inputs") == inputs and archive.exists():
            print(f"{image}: up to date ({archive})", file=sys.stderr)
            if cache is not None and not cached(cache, image, inputs)[1].exists():
                put_in_cache(cache, image, entry, archive)
            continue
        hit = None if force or cache is None else take_from_cache(cache, image, inputs, archive)
        if hit is not None:
            index["images"][image] = hit
            (out / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
            print(f"{image}: {archive} from the cache ({cached(cache, image, inputs)[0]})", file=sys.stderr)
            continue
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=out, prefix=f".{image}-") as work:
            w = Path(work)
            result = (build_python(out, w) if image == "python" else build_pause(out, w) if image == "pause"
                      else build_operator(out, w, out / "python.oci.tar", base))
        index["images"][image] = {"archive": archive.name, "inputs": inputs, **result,
                                  "bytes": archive.stat().st_size, "archive_digest": sha256_file(archive),
                                  "build_seconds": round(time.monotonic() - started, 1)}
        (out / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        if cache is not None:
            put_in_cache(cache, image, index["images"][image], archive)
        print(f"{image}: {archive} {archive.stat().st_size >> 20} MiB", file=sys.stderr)
    return index


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m devcluster.images", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse) every image archive")
    b.add_argument("--only", nargs="+", choices=IMAGES, default=IMAGES)
    b.add_argument("--force", action="store_true", help="rebuild even when the inputs are unchanged (cache unread)")
    b.add_argument("--no-cache", action="store_true", help=f"neither read nor fill the per-user cache ({CACHE})")
    ls = sub.add_parser("list", help="the images, their names and digests")
    ld = sub.add_parser("load", help="import built archives (default: all) into a containerd")
    ld.add_argument("archives", nargs="*")
    li = sub.add_parser("load-image", help="import a user's archive (docker save / OCI) as IMAGE")
    li.add_argument("image")
    li.add_argument("tar")
    for s in (b, ls, ld, li):
        s.add_argument("--out", type=Path, default=OUT, help="archive directory (default .devcluster/images)")
    for s in (ld, li):
        s.add_argument("--address", required=True, help="containerd socket")
        s.add_argument("--namespace", default="k8s.io", help="k8s.io is the namespace the CRI uses")
        s.add_argument("--ctr", default=str(CTR))
        s.add_argument("--snapshotter")
    a = p.parse_args(argv)
    if a.cmd == "build":
        build(a.out, a.only, a.force, None if a.no_cache else CACHE)
    elif a.cmd == "list":
        index = read_index(a.out)
        for image in IMAGES:
            entry = index["images"].get(image)
            for name, digest in (entry or {}).get("names", {}).items():
                print(f"{image:9} {name:52} {digest}")
            if not entry:
                print(f"{image:9} (not built: python -m devcluster.images build)")
    else:
        archives = ([a.tar] if a.cmd == "load-image" else a.archives or
                    [str(a.out / e["archive"]) for e in read_index(a.out)["images"].values()])
        if not Path(a.ctr).exists():
            sys.exit(f"{a.ctr} missing: build the runtime first (make runtime)")
        for archive in archives:
            run(ctr_import_argv(a.ctr, a.address, a.namespace, archive, snapshotter=a.snapshotter,
                                index_name=a.image if a.cmd == "load-image" else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
