"""The shipping-fix task's verifier phase: grades what the agent left in the workspace.

The guide's checks live here, with cases the agent never sees (this file is mounted only into
the verifier): the baseline (the original source, kept here) must fail them, and the agent's
shipping.py must pass them. The agent is the adversary, and its code runs in this container, as
our UID, so the verifier:

- reads one file of the workspace, at most MAX_SOURCE bytes of it, never following a link and
  never opening anything but a regular file (a sparse 40 GiB file or a FIFO cannot stall us);
  nothing else the agent wrote (reward files, rewritten tests, a conftest.py, a "gave up" marker)
  is ever read: no file of the workspace can decide the reward or stop the grading;
- runs that file in a child of its own session, from a fresh directory, with output to files
  capped by RLIMIT_FSIZE and a timeout, then kills the child's session and every process of our
  UID started since we began (not the launcher): nothing of it outlives its run;
- decides itself: the child only answers totals, some random, checked against our own rule;
  its exit code and output decide nothing;
- writes the reward only after all of that, putting the termination message's mode back first.

What the child can still do: read what we can (this file, hence the cases), and signal us (same
UID; the pod cannot run it as another): killing us or our launcher, or stopping us past the
verifier's timeout, fails the verifier, and a verifier that fails on the agent's work is the
agent's failure (VerifierFailed: counted as reward 0, never left out).
"""
import ctypes
import json
import os
import pathlib
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time

WORKSPACE = pathlib.Path(os.environ.get("WORKSPACE", "/workspace"))
TERMINATION_LOG = "/dev/termination-log"
BASELINE = "def shipping(total):\n    return 0 if total > 99 else 10\n"
CASES = (0, 1, 50, 98, 99, 100, 101, 1000)   # the boundary, and a spread around it
MAX_SOURCE = 100_000        # bytes of the agent's shipping.py we read; a larger file fails
MAX_OUTPUT = 1 << 20        # bytes the child may write to any file (RLIMIT_FSIZE)
CHILD_SECONDS = 30
# Runs the agent's code in a child process: it reads totals from a file and prints what the
# agent's shipping() answers, as its last line. The child decides nothing: its exit code and
# anything else it prints are ignored, and the answers are checked against our own rule below.
CHILD = """import json, sys
sys.path.insert(0, sys.argv[1])
from shipping import shipping
print(json.dumps([shipping(t) for t in json.load(open(sys.argv[2]))]))
"""


def expected(total: int) -> int:
    return 0 if total >= 99 else 10


def read_bounded(path: pathlib.Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a regular file (no link, no FIFO, no device); None when it is
    not one, or is larger."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not (os.fstat(fd).st_mode & 0o170000 == 0o100000):
            return None
        data = os.read(fd, limit + 1)
        return data if len(data) <= limit else None
    finally:
        os.close(fd)


def _child_limits() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT, MAX_OUTPUT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _started(pid: str) -> int | None:
    """When a live process started, in clock ticks since boot (/proc/<pid>/stat, field 22); None
    for a zombie (dead already) or a process gone."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _uid(pid: str) -> int | None:
    """A process's real UID (/proc/<pid>/status stays readable when it made itself undumpable)."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _ticks_now() -> int:
    return int(float(pathlib.Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


# Processes started before we ran anything of the agent's (us, the launcher and its watchdog)
# are spared by the sweep; everything of our UID started later is the agent's code.
SPARE_BEFORE = _ticks_now() if os.path.exists("/proc/uptime") else 0


def stop_leftovers() -> None:
    """Kill every process of our UID started since SPARE_BEFORE, until none is left (one forking
    while we sweep is caught by the next round). Only inside an episode's container, whose PID
    namespace ends with it: never on a host."""
    if not (os.environ.get("EPISODE_ID") and os.path.exists(TERMINATION_LOG)):
        return
    uid = os.getuid()
    for _ in range(100):
        found = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid() or _uid(entry.name) != uid:
                continue
            started = _started(entry.name)
            if started is None or started <= SPARE_BEFORE:
                continue
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                found += 1
            except OSError:
                pass
        if not found:
            return
        time.sleep(0.05)
    sys.exit("the agent's processes kept forking past the sweep")   # VerifierFailed: the agent's


def run_tests(source: bytes | str) -> tuple[int, str]:
    """(0, "") when the agent's shipping() is right on every case, else (1, why).

    The cases include random totals the agent cannot know in advance: printing canned answers,
    exiting 0 early (``os._exit(0)``) or patching a test framework earns nothing.
    """
    rng = random.SystemRandom()
    totals = list(CASES) + [rng.randrange(0, 400) for _ in range(12)]
    with tempfile.TemporaryDirectory() as work:
        base = pathlib.Path(work)
        (base / "shipping.py").write_bytes(source.encode() if isinstance(source, str) else source)
        (base / "totals.json").write_text(json.dumps(totals))
        with open(base / "out", "wb") as out, open(base / "err", "wb") as err:
            child = subprocess.Popen([sys.executable, "-I", "-B", "-c", CHILD, work, str(base / "totals.json")],
                                     cwd=work, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                     start_new_session=True, preexec_fn=_child_limits)
            try:
                child.wait(timeout=CHILD_SECONDS)
                why = ""
            except subprocess.TimeoutExpired:
                why = "timed out"
            try:
                os.killpg(child.pid, signal.SIGKILL)    # its whole session, whatever it left
            except OSError:
                pass
            child.wait()
        stop_leftovers()                                # and anything that left the session
        stdout = read_bounded(base / "out", MAX_OUTPUT) or b""
        stderr = (read_bounded(base / "err", MAX_OUTPUT) or b"")[-800:]
    lines = stdout.decode(errors="replace").strip().splitlines()
    try:
        answers = json.loads(lines[-1]) if lines and not why else None
    except ValueError:
        answers = None
    wrong = [t for t, a in zip(totals, answers if isinstance(answers, list) else [])
             if type(a) is not int or a != expected(t)]
    if not isinstance(answers, list) or len(answers) != len(totals) or wrong:
        return 1, (stderr.decode(errors="replace") + f"\n{why or 'wrong or missing answers'} (e.g. for {wrong[:3]})")
    return 0, ""


def main():
    try:   # not dumpable: a process of our UID cannot ptrace us or open our /proc files
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass
    baseline, _ = run_tests(BASELINE)
    if baseline == 0:
        sys.exit("the baseline must fail its boundary test")   # a broken task: VerifierFailed
    source = read_bounded(WORKSPACE / "shipping.py", MAX_SOURCE)
    after, output = run_tests(source) if source is not None else (1, "no readable shipping.py within the limit")
    reward = {"event": "reward", "at": time.time(), "episode_id": os.environ["EPISODE_ID"],
              "reward": int(after == 0), "baseline_exit": baseline, "tests_exit": after}
    try:
        os.chmod(TERMINATION_LOG, 0o644)    # the agent's code may have taken our write permission
    except OSError:
        pass
    with open(TERMINATION_LOG, "w") as f:
        f.write(json.dumps(reward) + "\n")
    # The test output (the agent's code's) goes nowhere near our stdout or the message.
    sys.stderr.write(output[-500:].replace("{", "(") + "\n")


if __name__ == "__main__":
    main()
