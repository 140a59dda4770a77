"""devcluster.realnode's reaping: the node launcher is the subreaper of every shim, so it reaps
orphans, and never takes a child's exit status from the Popen that waits for it."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

# Run in a child interpreter: PR_SET_CHILD_SUBREAPER would change pytest's own process.
SCRIPT = textwrap.dedent("""
    import ctypes, json, os, signal, subprocess, sys, time
    from devcluster import realnode
    ctypes.CDLL(None).prctl(realnode.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # a daemon that forks and leaves: its child is re-parented to us, as a shim's is
    daemon = subprocess.Popen([sys.executable, "-c", "import os\\npid = os.fork()\\n"
                               "if pid == 0: os._exit(0)\\nprint(pid)"], stdout=subprocess.PIPE, text=True)
    orphan = int(daemon.communicate()[0])

    def state(pid):
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    deadline = time.monotonic() + 10
    while state(orphan) != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)
    zombie = state(orphan)
    realnode.reap_orphans({kept.pid})
    reaped, alive = state(orphan), kept.poll() is None
    kept.send_signal(signal.SIGKILL)
    print(json.dumps({"zombie": zombie, "after": reaped, "kept_alive": alive, "kept_status": kept.wait(5)}))
""")


def test_orphans_are_reaped_and_kept_children_keep_their_status():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60,
                         cwd=pathlib.Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "zombie": "Z", "after": "gone", "kept_alive": True, "kept_status": -9}
