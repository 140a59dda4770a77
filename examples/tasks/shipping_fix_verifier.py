"""The shipping-fix task's verifier phase: grades what the agent left in the workspace.

The guide's checks live here, with tests the agent never sees (this file is mounted only into
the verifier): the baseline (the original source, kept here) must fail them, and the agent's
shipping.py must pass them. The agent's code runs only in a subprocess, from a fresh directory
holding a copy of that one file and our own tests, with captured output and a timeout: nothing
else the agent wrote (reward files, rewritten tests, a conftest.py) is ever read.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

WORKSPACE = pathlib.Path(os.environ.get("WORKSPACE", "/workspace"))
BASELINE = "def shipping(total):\n    return 0 if total > 99 else 10\n"
TESTS = '''import unittest
from shipping import shipping


class ShippingTest(unittest.TestCase):
    def test_below_threshold_pays(self):
        self.assertEqual(shipping(98), 10)

    def test_threshold_is_free(self):
        self.assertEqual(shipping(99), 0)

    def test_above_threshold_is_free(self):
        self.assertEqual(shipping(100), 0)


if __name__ == "__main__":
    unittest.main()
'''


def run_tests(source: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as work:
        (pathlib.Path(work) / "shipping.py").write_text(source)
        (pathlib.Path(work) / "test_shipping.py").write_text(TESTS)
        try:
            done = subprocess.run([sys.executable, "-E", "-s", "-B", "test_shipping.py"], cwd=work,
                                  capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return 124, "timed out"
        return done.returncode, done.stderr[-1000:]


def main():
    gave_up = WORKSPACE / ".no-attempt"   # the agent could not make an attempt (e.g. no model)
    if gave_up.is_file() and not gave_up.is_symlink():
        with open(gave_up, "rb") as f:
            why = f.read(300).decode(errors="replace")
        sys.exit("nothing to grade: " + why.replace("{", "("))
    baseline, _ = run_tests(BASELINE)
    if baseline == 0:
        sys.exit("the baseline must fail its boundary test")   # a broken task: VerifierFailed
    path = WORKSPACE / "shipping.py"
    source = path.read_text(errors="replace")[:100_000] if path.is_file() and not path.is_symlink() else ""
    after, output = run_tests(source)
    reward = {"event": "reward", "at": time.time(), "episode_id": os.environ["EPISODE_ID"],
              "reward": int(after == 0), "baseline_exit": baseline, "tests_exit": after}
    with open("/dev/termination-log", "w") as f:
        f.write(json.dumps(reward) + "\n")
    # The test output (the agent's code's) goes nowhere near our stdout or the message.
    sys.stderr.write(output[-500:].replace("{", "(") + "\n")


if __name__ == "__main__":
    main()
