"""Nothing in the repository cites what a reader of it cannot open.

Comments, docstrings, docs and tests state the fact or the reason, or cite upstream (a KEP, an
upstream project's issue, documented behaviour). Our own tracker's numbers ("issue 10 item 3"),
review rounds and documents kept outside the repository are not citations a reader can follow.

Allowed on purpose, and nothing else:
- an issue of a named upstream project: "kopf issue #1104", "kubernetes/kubernetes issue 123",
  "upstream issue 42";
- an issue number followed by its URL: "issue 7 (https://github.com/owner/repo/issues/7)";
- issue URLs themselves (".../issues/7") and docs/design.md sections ("docs/design.md §5").
"""
from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SELF = pathlib.Path(__file__).resolve().relative_to(ROOT).as_posix()

# Nothing is excluded: every tracked file is checked.
EXCLUDED: tuple[str, ...] = ()

# "issue 10", "Issue-14", "issues 10 and 11", "issue #12".
ISSUE = re.compile(r"\b[Ii]ssues?[ -]#?\d+\b")
# Before the match: a named upstream project, "owner/repo", or "upstream".
UPSTREAM_BEFORE = re.compile(r"(?:\b(?:kopf|kubernetes|upstream)|\b[\w.-]+/[\w.-]+)(?:'s)?\s*$",
                             re.I)
# After the match: its URL.
URL_AFTER = re.compile(r"^\s*[(:,]?\s*<?https?://")
# Forms that are never a citation a reader can open.
PRIVATE = re.compile(
    r"research/local-control-plane|\bresearch §|\bDESIGN\.md\b|\bDESIGN section\b"
    r"|\bshared/(?:research|DESIGN)"
    r"|\b(?:first|second|third|adversarial) review\b|\bhardening issue\b"
    r"|\b[Ii]tems? \d+\b|\bthe first design\b")


def private_references(line: str) -> list[str]:
    """The tracker references and private citations on one line."""
    found = [m.group(0) for m in PRIVATE.finditer(line)]
    for m in ISSUE.finditer(line):
        if UPSTREAM_BEFORE.search(line[:m.start()]) or URL_AFTER.match(line[m.end():]):
            continue
        found.append(m.group(0))
    return found


@pytest.mark.parametrize("line", [
    "finite (two rewards of 1e308 summed to inf, issue 10 item 1).",
    "(issue 14 profile)",
    "the issue-14 targets",
    "\"\"\"Issue 11: a batch bigger than one shard",
    "issues 10 and 11",
    "must not erase the counts (second review).",
    "(research/local-control-plane.md §3.2)",
    "upstream's default is 50s since 1.32, research §5.3)",
    "see DESIGN.md §9.",
    "verb by verb (DESIGN section 8).",
    "a far future timestamp (item 11)",
    "Changed from the first design:",
])
def test_the_matcher_finds_private_references(line):
    assert private_references(line), line


@pytest.mark.parametrize("line", [
    "no annotations, no finalizers: kopf issue #1104",
    "Kubernetes issue 12345 and kubernetes/kubernetes issue 678",
    "an upstream issue 42 tracks it",
    "issue 7 (https://github.com/owner/repo/issues/7)",
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
        if rel == SELF or rel.startswith(EXCLUDED):
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
