"""Image references as the kubelet parses them (core.image_reference): what it refuses
(InvalidImageName, a pod waiting for ever) is refused by the spec, and what it takes is taken."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core.image_reference import image_reference_problem
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.pool_spec import parse_pool_spec
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import RAW

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("image", [
    "python:3.12-alpine", "busybox", "docker.io/library/python:3.11", f"ghcr.io/org/img@{DIGEST}",
    f"img:tag@{DIGEST}", "registry:5000/a/b:t", "127.0.0.1:5000/x/y:z", "[::1]:5000/x", "localhost/x",
    "Registry.Example/x",                    # a domain may hold capitals
    "a__b", "a--b/c.d_e:TAG_1.x-y", "x@sha384:" + "b" * 96, "x@sha512:" + "c" * 128, "x:" + "a" * 128, "rolloutbatch/operator:dev",
])
def test_references_the_kubelet_takes(image):
    assert image_reference_problem(image) is None


@pytest.mark.parametrize("image, why", [
    ("Python:3.11", "lower case"), ("UPPER", "lower case"), ("a/B", "lower case"),
    ("docker.io/Library/x", "lower case"), ("localhost:5000/A", "lower case"),
    ("img:", "not an image"), ("img@", "not an image"), ("img@sha256:abc", "not an image"),
    ("-a", "not an image"), ("a-", "not an image"), ("a..b", "not an image"), ("/a", "not an image"),
    ("a//b", "not an image"), ("a:b:c", "not an image"), (":tag", "not an image"), ("a/:t", "not an image"),
    ("x:" + "a" * 129, "not an image"), ("a b", "not an image"), ("a\0", "not an image"), ("", "not an image"),
    ("0123456789abcdef" * 4, "image ID"), ("a/" + "b" * 260, "longer than 255"),
    # go-digest: a known algorithm with its length of lower-case hex
    ("python@sha256:" + "a" * 32, "64 lower-case"), ("python:3.11@sha256:" + "a" * 65, "64 lower-case"),
    ("python@sha256:" + "A" * 64, "64 lower-case"), ("python@md5:" + "a" * 32, "not one of"),
    ("python@sha512:" + "a" * 64, "128 lower-case"),
])
def test_references_the_kubelet_refuses(image, why):
    assert why in (image_reference_problem(image) or ""), image


_path = st.from_regex(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+){0,2}", fullmatch=True)
_domain = st.from_regex(r"(?:[a-zA-Z0-9]+\.[a-zA-Z0-9]+|localhost)(?::[0-9]{1,5})?", fullmatch=True)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), _domain), st.lists(_path, min_size=1, max_size=3), st.one_of(st.none(), _tag),
       st.booleans())
def test_every_reference_of_the_grammar_is_taken(domain, paths, tag, digest):
    image = "/".join(([domain] if domain else []) + paths) + (f":{tag}" if tag else "") + (f"@{DIGEST}" if digest else "")
    if len("/".join(([domain] if domain else []) + paths)) <= 255 and "/".join(paths) != "0123456789abcdef" * 4:
        assert image_reference_problem(image) is None, image


@pytest.mark.parametrize("where", ["image", "verifier", "inputImages"])
def test_a_batch_naming_an_image_the_kubelet_refuses_is_invalid(where):
    """Every pod of it waited InvalidImageName: the batch stalled ImagePullFailed once its pods
    existed, where a spec the grammar refuses can be refused before anything is made."""
    spec = {**RAW, "image": "python:3.12"}
    if where == "image":
        spec["image"] = "Python:3.12"
    elif where == "verifier":
        spec["verifier"] = {"image": "img:", "files": {"verify.py": "pass"}}
    else:
        spec["episodes"], spec["parallelism"], spec["inputs"], spec["inputImages"] = 1, 1, [{"a": 1}], ["x@sha256:abc"]
    with pytest.raises(SpecError, match="image reference"):
        parse_spec(spec)


def test_a_pool_naming_an_image_the_kubelet_refuses_is_invalid():
    with pytest.raises(SpecError, match="lower case"):
        parse_pool_spec({"size": 1, "image": "Python:3.12", "task": {"files": {"e.py": "x"}}})
