"""What `make test` prints of a failure (hack/run-tests.sh): the failures' own `E` lines, so a
flake of a cluster test can be read from CI's log. A message made by tests.support.batches.
failure_text reaches it whole; a tuple's would be cut by pytest to a few hundred characters."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _e_line_command() -> str:
    """hack/run-tests.sh's own pipeline for the failures' `E` lines."""
    line = next(l for l in (ROOT / "hack" / "run-tests.sh").read_text().splitlines() if "grep -E '^E '" in l)
    return line.strip().replace('"$out"', '"$1"')


def _printed(tmp_path, assertion: str) -> str:
    test = tmp_path / "test_shape.py"
    test.write_text(textwrap.dedent(f"""\
        from tests.support.batches import failure_text
        def test_install():
            leases = {{p: "\\n".join(f"{{p}} leader: line {{i}}" for i in range(3)) for p in ("op-a", "op-b")}}
            failed = [{{"index": i, "outcome": "lost", "reason": "InfrastructureFailure", "message": "m" * 150,
                       "log_tail": "t" * 200}} for i in range(3)]
            status = {{"phase": "Failed", "reason": "TooFewSuccessfulEpisodes"}}
            {assertion}
        """))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                         capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": f"{ROOT}:{ROOT / 'operator'}"})
    out = tmp_path / "pytest-cluster.txt"
    out.write_text(run.stdout + run.stderr)
    assert "1 failed" in out.read_text(), out.read_text()[-2000:]
    return subprocess.run(["bash", "-c", "set -euo pipefail; " + _e_line_command(), "x", str(out)],
                          capture_output=True, text=True, check=True).stdout


def test_a_failure_text_reaches_the_printed_failure_whole(tmp_path) -> None:
    printed = _printed(tmp_path, 'assert status["phase"] == "Succeeded", '
                                 'failure_text(failed=failed, leases=leases, status=status)')
    assert '"index": 2' in printed, printed          # every row that did not succeed is named
    assert "op-a leader: line 2" in printed and "op-b leader: line 2" in printed, printed
    assert "TooFewSuccessfulEpisodes" in printed, printed


def test_the_pipeline_would_cut_a_tuple(tmp_path) -> None:
    """The check above can fail: a tuple's message is cut by pytest before it reaches the log."""
    printed = _printed(tmp_path, 'assert status["phase"] == "Succeeded", (failed, leases, status)')
    assert "'index': 1" not in printed, printed      # its middle rows cut away
