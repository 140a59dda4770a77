"""The shipping-fix task's verifier phase: grades what the agent left in the workspace.

The guide's checks live here, with cases the agent never sees (this file is mounted only into
the verifier): the baseline (the original source, kept here) must fail them, and the agent's
shipping.py must pass them. The agent's code runs only in a subprocess, from a fresh directory
holding a copy of that one file, with captured output and a timeout; it only answers totals,
which are checked here against our own rule (including random totals), so its exit code and
output decide nothing. Nothing else the agent wrote (reward files, rewritten tests, a
conftest.py) is ever read, and every process it left is killed before the reward is written.
"""
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import time

WORKSPACE = pathlib.Path(os.environ.get("WORKSPACE", "/workspace"))
BASELINE = "def shipping(total):\n    return 0 if total > 99 else 10\n"
CASES = (0, 1, 50, 98, 99, 100, 101, 1000)   # the boundary, and a spread around it
# Runs the agent's code in a child process: it reads totals on stdin and prints what the agent's
# shipping() answers, as its last line. The child decides nothing: its exit code and anything
# else it prints are ignored, and the answers are checked against our own rule below.
CHILD = """import json, sys
sys.path.insert(0, sys.argv[1])
from shipping import shipping
print(json.dumps([shipping(t) for t in json.load(sys.stdin)]))
"""


def expected(total: int) -> int:
    return 0 if total >= 99 else 10


def run_tests(source: str) -> tuple[int, str]:
    """(0, "") when the agent's shipping() is right on every case, else (1, why).

    The cases include random totals the agent cannot know in advance: printing canned answers,
    exiting 0 early (``os._exit(0)``) or patching a test framework earns nothing.
    """
    rng = random.SystemRandom()
    totals = list(CASES) + [rng.randrange(0, 400) for _ in range(12)]
    with tempfile.TemporaryDirectory() as work:
        (pathlib.Path(work) / "shipping.py").write_text(source)
        try:
            done = subprocess.run([sys.executable, "-I", "-B", "-c", CHILD, work], cwd=work, input=json.dumps(totals),
                                  capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return 124, "timed out"
    lines = done.stdout.strip().splitlines()
    try:
        answers = json.loads(lines[-1]) if lines else None
    except ValueError:
        answers = None
    wrong = [t for t, a in zip(totals, answers if isinstance(answers, list) else [])
             if type(a) is not int or a != expected(t)]
    if not isinstance(answers, list) or len(answers) != len(totals) or wrong:
        return 1, (done.stderr[-800:] + f"\nwrong or missing answers (e.g. for {wrong[:3]})")
    return 0, ""


def stop_leftovers() -> None:
    """Kill every process the agent's code may have left running (it could rewrite our reward).
    Only inside an episode's container, whose PID namespace ends with it: never on a host."""
    if os.environ.get("EPISODE_ID") and pathlib.Path("/dev/termination-log").exists():
        try:
            os.kill(-1, signal.SIGKILL)   # every process we may signal but ourselves
        except (ProcessLookupError, PermissionError):
            pass


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
    stop_leftovers()
    reward = {"event": "reward", "at": time.time(), "episode_id": os.environ["EPISODE_ID"],
              "reward": int(after == 0), "baseline_exit": baseline, "tests_exit": after}
    with open("/dev/termination-log", "w") as f:
        f.write(json.dumps(reward) + "\n")
    # The test output (the agent's code's) goes nowhere near our stdout or the message.
    sys.stderr.write(output[-500:].replace("{", "(") + "\n")


if __name__ == "__main__":
    main()
