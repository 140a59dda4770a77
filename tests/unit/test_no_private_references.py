"""Nothing in the repository cites what a reader of it cannot open.

Comments, docstrings, docs and tests state the fact or the reason, or cite upstream (a KEP, an
upstream project's issue, documented behaviour). Our own tracker's numbers, review rounds and
documents kept outside the repository are not citations a reader can follow.

Allowed on purpose, and nothing else: an issue of a named upstream project (kopf, kubernetes,
owner/repo, "upstream"), an issue number followed by its URL, issue URLs themselves, and
docs/design.md sections. The example lines below are assembled from pieces (``W``, ``R``, ``D``)
so that this file itself holds none of the forms it refuses.
"""
from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Nothing is excluded: every tracked file is checked.
EXCLUDED: tuple[str, ...] = ()

# The word, singular or plural, any case of its first letter, then a number (with "-" or "#").
ISSUE = re.compile(r"\b[Ii]ssues?[ -]#?\d+\b")
# Before the match: a named upstream project, "owner/repo", or "upstream".
UPSTREAM_BEFORE = re.compile(r"(?:\b(?:kopf|kubernetes|upstream)|\b[\w.-]+/[\w.-]+)(?:'s)?\s*$",
                             re.I)
# After the match: its URL.
URL_AFTER = re.compile(r"^\s*[(:,]?\s*<?https?://")
# Pieces of the refused forms and of the example lines: the words the matcher refuses, never
# written whole in this file.
W, R, D = "iss" "ue", "resea" "rch", "DES" "IGN"

# Forms that are never a citation a reader can open.
PRIVATE = re.compile(
    rf"{R}/local-control-plane|\b{R} §|\b{D}\.md\b|\b{D} section\b"
    rf"|\bshared/(?:{R}|{D})"
    rf"|\b(?:first|second|third|adversarial) review\b|\breview rounds? \d+|\bhardening {W}\b"
    r"|\b[Ii]tems? \d+\b|\b[Pp]oints? \d+ of\b|\bthe first des" r"ign\b")


def private_references(line: str) -> list[str]:
    """The tracker references and private citations on one line."""
    found = [m.group(0) for m in PRIVATE.finditer(line)]
    for m in ISSUE.finditer(line):
        if UPSTREAM_BEFORE.search(line[:m.start()]) or URL_AFTER.match(line[m.end():]):
            continue
        found.append(m.group(0))
    return found


@pytest.mark.parametrize("line", [
    f"finite (two rewards of 1e308 summed to inf, {W} 10 it" "em 1).",
    f"({W} 14 profile)",
    f"the {W}-14 targets",
    f"\"\"\"{W.capitalize()} 11: a batch bigger than one shard",
    f"{W}s 10 and 11",
    "must not erase the counts (sec" "ond review).",
    f"({R}/local-control-plane.md §3.2)",
    f"upstream's default is 50s since 1.32, {R} §5.3)",
    f"see {D}.md §9.",
    f"verb by verb ({D} section 8).",
    "a far future timestamp (it" "em 11)",
    "Changed from the first des" "ign:",
    "the pod-start measurements of poi" "nt 7 of the plan",
    "found in review rou" "nd 2",
])
def test_the_matcher_finds_private_references(line):
    assert private_references(line), line


@pytest.mark.parametrize("line", [
    f"no annotations, no finalizers: kopf {W} #1104",
    f"Kubernetes {W} 12345 and kubernetes/kubernetes {W} 678",
    f"an upstream {W} 42 tracks it",
    f"{W} 7 (https://github.com/owner/repo/issues/7)",
    "see https://github.com/nolar/kopf/issues/1104",
    "the PodReadyToStartContainers condition (KEP-3085)",
    "(docs/design.md §5.6)",
    "Changed from the first version:",
    "for item in page.get('items') or []:",
    "kubeconfig issued by our CA; we never issue one",
    "review the diff",
])
def test_the_matcher_allows_upstream_and_local_citations(line):
    assert not private_references(line), line


def tracked_text_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p]


def test_no_tracked_file_cites_what_the_repository_does_not_contain():
    problems = []
    for rel in tracked_text_files():
        if rel.startswith(EXCLUDED):
            continue
        path = ROOT / rel
        if not path.is_file():                 # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data:                      # binary
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            for ref in private_references(line):
                problems.append(f"{rel}:{number}: {ref!r}: {line.strip()[:120]}")
    assert not problems, ("state the fact or cite upstream instead of:\n" + "\n".join(problems))
