"""The example verifier (examples/tasks/shipping_fix_verifier.py) against hostile workspaces."""
import os
import time

from tests.unit.test_examples import _load


def test_it_reads_the_agents_file_bounded_and_never_blocks(tmp_path):
    verifier = _load("shipping_fix_verifier")
    sparse = tmp_path / "sparse.py"
    with open(sparse, "wb") as f:
        f.truncate(40 << 30)                     # 40 GiB, no blocks: reading it whole would take minutes
    started = time.monotonic()
    assert verifier.read_bounded(sparse, verifier.MAX_SOURCE) is None
    os.mkfifo(tmp_path / "fifo.py")              # nobody writes: a plain open would block forever
    assert verifier.read_bounded(tmp_path / "fifo.py", verifier.MAX_SOURCE) is None
    (tmp_path / "link.py").symlink_to(tmp_path / "elsewhere.py")
    (tmp_path / "elsewhere.py").write_text("def shipping(total):\n    return 0\n")
    assert verifier.read_bounded(tmp_path / "link.py", verifier.MAX_SOURCE) is None
    assert verifier.read_bounded(tmp_path / "elsewhere.py", 10) is None            # past the cap
    assert verifier.read_bounded(tmp_path / "elsewhere.py", verifier.MAX_SOURCE) == b"def shipping(total):\n    return 0\n"
    assert time.monotonic() - started < 5


def test_nothing_in_the_workspace_can_stop_the_grading():
    source = open(_load("shipping_fix_verifier").__file__).read()
    # no switch file, and the agent's file is read through read_bounded only
    assert ".no-attempt" not in source and "read_text(" not in source.split("def main")[1]


def test_a_child_that_floods_its_output_or_hangs_scores_zero(monkeypatch):
    verifier = _load("shipping_fix_verifier")
    monkeypatch.setattr(verifier, "CHILD_SECONDS", 2)
    flood = "import sys\nsys.stdout.write('x' * (64 << 20))\ndef shipping(t):\n    return 0 if t >= 99 else 10\n"
    assert verifier.run_tests(flood)[0] == 1     # RLIMIT_FSIZE stops it: no answers
    started = time.monotonic()
    hang = "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(5)\ntime.sleep(60)\n"
    assert verifier.run_tests(hang)[0] == 1 and time.monotonic() - started < 10
