"""The guide's shipping-fix episode: a boundary bug, a failing test, a one-character fix.

Runs inside an episode sandbox (docs/design.md, section 4). It prepares the workspace, reports `ready`,
checks that the baseline fails its tests, applies the fix an agent would make (`>` -> `>=`),
runs the tests again and reports the reward: 1 when they pass, else 0 (and exits non-zero).
The fix is a deterministic stand-in for a coding agent's action; no model is called.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

WORKSPACE = pathlib.Path(os.environ.get("WORKSPACE", "/workspace"))

SOURCE = "def shipping(total):\n    return 0 if total > 99 else 10\n"
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


def emit(event, **fields):
    record = {"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **fields}
    print(json.dumps(record), flush=True)


def run_tests():
    done = subprocess.run([sys.executable, "-B", "test_shipping.py"], cwd=WORKSPACE,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr[-2000:]


def main():
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    (WORKSPACE / "shipping.py").write_text(SOURCE)
    (WORKSPACE / "test_shipping.py").write_text(TESTS)
    emit("ready")
    baseline, _ = run_tests()
    if baseline == 0:
        sys.exit("the baseline must fail its boundary test")
    code = (WORKSPACE / "shipping.py").read_text().replace("total > 99", "total >= 99")
    (WORKSPACE / "shipping.py").write_text(code)
    after, output = run_tests()
    emit("reward", reward=int(after == 0), baseline_exit=baseline, tests_exit=after, tests_output=output)
    if after != 0:
        sys.exit("the patched code failed its tests")


if __name__ == "__main__":
    main()
