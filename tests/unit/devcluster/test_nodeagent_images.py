"""devcluster.nodeagent.images: the image -> runtime table."""
from __future__ import annotations

import os

import pytest

from devcluster.nodeagent import images


@pytest.mark.parametrize("ref,repo", [
    ("python:3.12-alpine", "python"), ("docker.io/library/python:3.12", "python"),
    ("python@sha256:abcd", "python"), ("localhost:5000/python:3", "python"),
    ("busybox", "busybox"), ("myorg/python:3", "myorg/python"), ("ghcr.io/a/b:1", "a/b"),
])
def test_repository_of(ref, repo):
    assert images.repository_of(ref) == repo


def test_python_runtime_answers_to_python_and_python3():
    rt = images.resolve("python:3.12-alpine")
    assert rt.name == "python" and rt.default_command == ("python3",)
    assert rt.links["python"] == rt.links["python3"] == "/usr/bin/python3.11"
    assert rt.image_id.startswith("docker-pullable://python@sha256:")
    assert rt.image_id == images.resolve("python:3.11").image_id  # stable per runtime


def test_shell_images_and_unknown():
    assert images.resolve("busybox:1.36").default_command == ("sh",)
    assert images.resolve("alpine").name == "shell"
    assert images.resolve("nginx:1.27") is None
    assert "nginx:1.27" in images.unsupported_message("nginx:1.27")


def test_bin_dir(tmp_path):
    d = images.ensure_bin_dir(str(tmp_path), images.resolve("python"))
    assert os.readlink(os.path.join(d, "python")) == "/usr/bin/python3.11"
    assert images.ensure_bin_dir(str(tmp_path), images.resolve("python")) == d  # idempotent


def test_the_projects_image_runs_this_checkouts_operator(tmp_path):
    rt = images.resolve("ghcr.io/rolloutbatch/rolloutbatch:0.1.0")
    assert rt.name == "rolloutbatch" and rt.entrypoint == ("rolloutbatch", "operator") and rt.default_command == ()
    code = str(images.CHECKOUT / "operator")
    assert code in rt.binds.values() and os.path.isdir(os.path.join(code, "rolloutbatch"))
    assert all(dest.startswith("/opt/rolloutbatch/") for dest in rt.binds)   # never under the pod's /tmp
    d = images.ensure_bin_dir(str(tmp_path), rt)
    script = os.path.join(d, "rolloutbatch")
    assert os.access(script, os.X_OK) and "/opt/rolloutbatch/operator" in open(script).read()
    # Only the code and the dependencies are bound: not the checkout (its .devcluster holds keys).
    assert str(images.CHECKOUT) not in rt.binds.values()
