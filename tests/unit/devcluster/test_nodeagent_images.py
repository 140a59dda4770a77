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
