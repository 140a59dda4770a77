"""The container image reference grammar, as the kubelet reads a pod's ``image``.

The API server checks little of an image (not empty, no surrounding space); the kubelet parses it
with distribution/reference's ``ParseNormalizedNamed`` and refuses what does not parse: the pod
waits ``InvalidImageName`` for ever. A spec naming such an image (``Python:3.11``, ``img:``,
``img@sha256:abc``) is refused here, before anything is made, instead of stalling
``ImagePullFailed`` once its first pod is waiting. The grammar (distribution/reference's
``regexp.go`` and ``normalize.go``):

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ domain "/" ] path-component ( "/" path-component )*   (at most 255 characters)
    domain     := host [ ":" port ]; host a DNS name (any case) or a bracketed IPv6 address
    path-component := [a-z0-9]+ ( separator [a-z0-9]+ )*; separator "." | "_" | "__" | "-"+
    tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest     := algorithm ":" hex; go-digest takes sha256, sha384 and sha512, each with its
                  length of lower-case hex (64, 96, 128)

The first component is a domain only when it holds "." or ":", is "localhost", or has an upper
case letter; otherwise the name is Docker Hub's (``docker.io/library/`` before a one-part name),
whose path must be lower case. A bare 64-digit hex name is an image ID, not a name.

Pure: text only.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 255   # distribution/reference's NameTotalLengthMax

_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
                        rf"(?::{_TAG})?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)
# go-digest's Parse, the parser's last step: an algorithm it knows, with its length of lower hex
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
_IMAGE_ID = re.compile(r"[a-f0-9]{64}")


def _split_domain(value: str) -> tuple[str, str]:
    """normalize.go's splitDockerDomain: (registry, the rest), Docker Hub's when the first of
    several components is no registry (no "." nor ":", not "localhost", all lower case)."""
    head, slash, rest = value.partition("/")
    if slash and ("." in head or ":" in head or head == "localhost" or head.lower() != head):
        return head, rest
    return "docker.io", value if slash else f"library/{value}"


def image_reference_problem(value: str) -> str | None:
    """Why the kubelet would refuse ``value`` as a pod's image (InvalidImageName), or None."""
    if _IMAGE_ID.fullmatch(value):
        return "is not an image reference: a 64-digit hexadecimal name is an image ID"
    domain, rest = _split_domain(value)
    remote = rest.partition(":")[0]
    if remote.lower() != remote:
        return "is not an image reference: a repository name must be lower case"
    match = _REFERENCE.fullmatch(f"{domain}/{rest}")
    if match is None:
        return "is not an image reference (registry/name:tag or name@algorithm:digest)"
    if len(match.group("name")) > MAX_NAME_LENGTH:
        return f"is not an image reference: its name is longer than {MAX_NAME_LENGTH} characters"
    if match.group("digest") is not None:
        algorithm, _, hex_digits = match.group("digest").partition(":")
        if algorithm not in DIGEST_HEX_LENGTHS:
            return f"is not an image reference: digest algorithm {algorithm!r} is not one of " \
                   f"{', '.join(DIGEST_HEX_LENGTHS)}"
        if len(hex_digits) != DIGEST_HEX_LENGTHS[algorithm] or hex_digits.lower() != hex_digits:
            return (f"is not an image reference: a {algorithm} digest is {DIGEST_HEX_LENGTHS[algorithm]} "
                    "lower-case hexadecimal digits")
    return None
