"""devcluster.images: names, labels, OCI documents, input hashing and the commands it runs."""
from __future__ import annotations

import hashlib
import json
import re
import tarfile

import pytest

from devcluster import images


@pytest.mark.parametrize("name,full", [
    ("python:3.12-alpine", "docker.io/library/python:3.12-alpine"),
    ("python", "docker.io/library/python:latest"),
    ("rolloutbatch/rolloutbatch:latest", "docker.io/rolloutbatch/rolloutbatch:latest"),
    ("ghcr.io/rolloutbatch/rolloutbatch:0.1.0", "ghcr.io/rolloutbatch/rolloutbatch:0.1.0"),
    ("registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10.2"),
    ("localhost:5000/python", "localhost:5000/python:latest"),
    ("python@sha256:abcd", "docker.io/library/python@sha256:abcd"),
    ("docker.io/python:3", "docker.io/library/python:3"),
])
def test_normalise_is_containerds_form(name, full):
    assert images.normalise(name) == full


def test_every_python_name_the_project_uses_is_covered():
    from rolloutbatch.core import defaults
    assert defaults.IMAGE in images.PYTHON_NAMES
    for used in ("python:3.12-alpine", "python:3.12-slim", "python:3.12", images.DOCKERFILE_BASE):
        assert used in images.PYTHON_NAMES
    base = re.search(r"^ARG BASE=(\S+)$", (images.CHECKOUT / "Dockerfile").read_text(), re.M)
    assert base and base.group(1) == images.DOCKERFILE_BASE, "the Dockerfile's default base is a stand-in name"
    # tests rely on these failing to pull: they must stay unprovided
    assert not {"nginx:1.27", "busybox", "alpine"} & set(images.PYTHON_NAMES)


def test_operator_names_match_the_deployment():
    names = images.operator_names(images.project_version())
    deployment = (images.CHECKOUT / "manifests" / "manager" / "deployment.yaml").read_text()
    ref = re.search(r"image:\s*(\S+)", deployment).group(1)
    assert images.normalise(ref) in names
    assert "docker.io/rolloutbatch/rolloutbatch:latest" in names
    assert all(n == images.normalise(n) for n in names)


def test_stand_in_labels_say_what_the_image_is():
    labels = images.stand_in_labels("python:3.12-alpine", "Debian bookworm's Python 3.11")
    assert labels["org.opencontainers.image.description"] == (
        "Debian bookworm's Python 3.11, a local stand-in for python:3.12-alpine; not Docker Hub's image")
    assert labels["rolloutbatch.dev/stand-in"] == "true"
    pause = images.stand_in_labels("registry.k8s.io/pause:3.10.2", "pause")
    assert pause["org.opencontainers.image.description"].endswith("not registry.k8s.io's image")


def test_image_config_and_manifest_shape():
    cfg = images.image_config(["sha256:aa"], {"a": "b"}, "made here", cmd=["python3"], workdir="/")
    assert cfg["config"] == {"Env": [images.PATH_ENV], "Labels": {"a": "b"}, "Cmd": ["python3"], "WorkingDir": "/"}
    assert cfg["rootfs"] == {"type": "layers", "diff_ids": ["sha256:aa"]}
    assert cfg["created"] == images.CREATED and cfg["os"] == "linux"
    pause = images.image_config([], {}, "x", entrypoint=["/pause"], env=(), user="65535:65535")
    assert pause["config"]["Entrypoint"] == ["/pause"] and "Cmd" not in pause["config"]
    raw = images.canonical(cfg)
    m = images.manifest(raw, [{"mediaType": images.MT_LAYER, "digest": "sha256:aa", "size": 1}])
    assert m["config"]["digest"] == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert m["config"]["size"] == len(raw) and m["schemaVersion"] == 2


def test_canonical_json_is_stable():
    assert images.canonical({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'


def test_index_names_every_entry_for_ctr_and_buildah():
    desc = {"mediaType": images.MT_MANIFEST, "digest": "sha256:bb", "size": 3}
    idx = images.oci_index([("docker.io/library/python:3.12", desc), ("docker.io/library/python:3", desc)])
    names = [m["annotations"]["io.containerd.image.name"] for m in idx["manifests"]]
    assert names == sorted(names) == ["docker.io/library/python:3", "docker.io/library/python:3.12"]
    for m in idx["manifests"]:
        assert m["annotations"]["org.opencontainers.image.ref.name"] == m["annotations"]["io.containerd.image.name"]
        assert m["platform"] == {"architecture": "amd64", "os": "linux"} and m["digest"] == "sha256:bb"


def test_input_hash_follows_params_and_file_contents(tmp_path):
    f = tmp_path / "pause.c"
    f.write_text("int main(){}")
    one = images.input_hash({"cflags": ["-Os"]}, [f])
    assert one == images.input_hash({"cflags": ["-Os"]}, [f]) and one.startswith("sha256:")
    assert one != images.input_hash({"cflags": ["-O2"]}, [f])
    f.write_text("int main(){return 0;}")
    assert one != images.input_hash({"cflags": ["-Os"]}, [f])


def test_operator_inputs_cover_the_dockerfile_and_sources():
    files = {p.relative_to(images.CHECKOUT).as_posix() for p in images.operator_files()}
    assert {"Dockerfile", ".dockerignore", "pyproject.toml", "README.md"} <= files
    assert "operator/rolloutbatch/core/spec.py" in files
    assert not any("__pycache__" in f or ".egg-info" in f for f in files)


def test_mmdebstrap_argv_is_reproducible_and_honest():
    argv = images.mmdebstrap_argv("/o.tar")
    assert argv[0] == "mmdebstrap" and "--variant=essential" in argv
    assert argv[-len(images.MIRRORS) - 2:-len(images.MIRRORS)] == ["bookworm", "/o.tar"]
    assert "--include=" + ",".join(images.PYTHON_PACKAGES) in argv
    hooks = " ".join(a for a in argv if a.startswith("--customize-hook="))
    assert 'ln -s python3 "$1/usr/bin/python"' in hooks and "EXTERNALLY-MANAGED" in hooks
    assert all(m.startswith("deb http://deb.debian.org/") for m in images.MIRRORS)


def test_pause_is_compiled_as_upstream_does():
    argv = images.pause_argv("/mod/pause.c", "/tmp/pause")
    assert argv[0] == "gcc" and {"-static", "-Os"} <= set(argv) and argv[-1] == "/mod/pause.c"
    assert images.PAUSE_NAMES == ("registry.k8s.io/pause:3.10.2",)


def test_buildah_argv_passes_proxy_and_ca_as_flags_not_dockerfile_lines():
    storage = {"root": "/r", "runroot": "/rr", "driver": "vfs"}
    argv = images.buildah_argv(storage, "docker.io/library/python:3.11.11-slim-bookworm", ["a:1", "b:2"],
                               {"rolloutbatch.dev/stand-in": "false"},
                               {"HTTPS_PROXY": "http://p:3128", "HOME": "/root", "no_proxy": ""})
    assert argv[:7] == ["buildah", "--root", "/r", "--runroot", "/rr", "--storage-driver", "vfs"]
    assert argv[7] == "bud" and "--pull=never" in argv
    pairs = list(zip(argv, argv[1:]))
    assert ("--build-arg", "BASE=docker.io/library/python:3.11.11-slim-bookworm") in pairs
    assert ("--build-arg", "HTTPS_PROXY=http://p:3128") in pairs
    assert not any("HOME" in a or "no_proxy" in a for a in argv)
    assert ("-v", f"{images.HOST_CA}:/etc/ssl/certs/ca-certificates.crt:ro") in pairs
    assert ("-t", "a:1") in pairs and ("-t", "b:2") in pairs
    assert ("--label", "rolloutbatch.dev/stand-in=false") in pairs
    assert argv[-1] == str(images.CHECKOUT)


def test_ctr_import_argv():
    assert images.ctr_import_argv("ctr", "/run/c.sock", "k8s.io", "/a.tar") == [
        "ctr", "-a", "/run/c.sock", "-n", "k8s.io", "images", "import", "/a.tar"]
    argv = images.ctr_import_argv("ctr", "s", "k8s.io", "/mine.tar", index_name="me/app:1", snapshotter="native")
    assert argv[-5:] == ["--index-name", "docker.io/me/app:1", "--snapshotter", "native", "/mine.tar"]


def test_dpkg_versions():
    status = "Package: a\nStatus: ok\nVersion: 1.0\n\nPackage: python3\nDescription: x\n more: y\nVersion: 3.11\n"
    assert images.dpkg_versions(status) == {"a": "1.0", "python3": "3.11"}


def test_archive_is_an_oci_layout_and_byte_stable(tmp_path):
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as t:
        t.add(__file__, arcname="hello.py")
    labels = lambda n: images.stand_in_labels(n, "test")   # noqa: E731
    one = images.package_layout(tmp_path / "a.tar", layer, ["python:3", "python:3.12"], labels, "h", cmd=["python3"])
    two = images.package_layout(tmp_path / "b.tar", layer, ["python:3", "python:3.12"], labels, "h", cmd=["python3"])
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    assert one == two and len(set(one.values())) == 2      # a config (labels) per name, one shared layer
    with tarfile.open(tmp_path / "a.tar") as t:
        names = t.getnames()
        index = json.loads(t.extractfile("index.json").read())
        for m in index["manifests"]:
            blob = t.extractfile("blobs/sha256/" + m["digest"].split(":")[1]).read()
            assert "sha256:" + hashlib.sha256(blob).hexdigest() == m["digest"]
            cfg = json.loads(t.extractfile("blobs/sha256/" + json.loads(blob)["config"]["digest"][7:]).read())
            short = {"docker.io/library/python:3": "python:3", "docker.io/library/python:3.12": "python:3.12"}
            assert cfg["config"]["Labels"]["org.opencontainers.image.description"] == (
                f"test, a local stand-in for {short[m['annotations']['io.containerd.image.name']]}; "
                "not Docker Hub's image")
    assert {"oci-layout", "index.json"} <= set(names)
    assert set(one) == {"docker.io/library/python:3", "docker.io/library/python:3.12"}


def _entry(archive, inputs):
    return {"archive": archive.name, "inputs": inputs, "names": {"x": "sha256:1"},
            "archive_digest": images.sha256_file(archive)}


def test_the_cache_hands_a_build_to_another_checkout(tmp_path):
    cache, built = tmp_path / "cache", tmp_path / "a" / "python.oci.tar"
    built.parent.mkdir()
    built.write_bytes(b"layers")
    images.put_in_cache(cache, "python", _entry(built, "sha256:" + "ab" * 32), built)
    other = tmp_path / "b" / "python.oci.tar"
    other.parent.mkdir()
    assert images.take_from_cache(cache, "python", "sha256:" + "cd" * 32, other) is None   # other inputs
    assert not other.exists()
    hit = images.take_from_cache(cache, "python", "sha256:" + "ab" * 32, other)
    assert hit == _entry(built, "sha256:" + "ab" * 32) and other.read_bytes() == b"layers"


def test_a_cached_archive_that_changed_is_a_miss(tmp_path):
    cache, built = tmp_path / "cache", tmp_path / "python.oci.tar"
    built.write_bytes(b"layers")
    inputs = "sha256:" + "ab" * 32
    images.put_in_cache(cache, "python", _entry(built, inputs), built)
    images.cached(cache, "python", inputs)[0].write_bytes(b"truncated")
    assert images.take_from_cache(cache, "python", inputs, tmp_path / "out.tar") is None
    images.cached(cache, "python", inputs)[1].write_text("{not json")
    assert images.take_from_cache(cache, "python", inputs, tmp_path / "out.tar") is None


def test_the_cache_keeps_the_newest_builds_per_image(tmp_path):
    import os
    cache, built = tmp_path / "cache", tmp_path / "a.tar"
    built.write_bytes(b"x")
    keys = [f"sha256:{i:02x}" + "0" * 62 for i in range(images.KEEP + 2)]
    for n, key in enumerate(keys):
        images.put_in_cache(cache, "operator", _entry(built, key), built)
        os.utime(images.cached(cache, "operator", key)[1], (1000 + n, 1000 + n))
    images.put_in_cache(cache, "pause", _entry(built, keys[0]), built)   # another image: its own count
    left = sorted(p.name for p in cache.glob("operator-*.json"))
    assert len(left) == images.KEEP and len(list(cache.glob("operator-*.oci.tar"))) == images.KEEP
    assert images.cached(cache, "operator", keys[0])[1].name not in left
    assert images.cached(cache, "pause", keys[0])[1].exists()
