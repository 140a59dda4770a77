"""The shipping-fix task's agent phase, for a batch with spec.verifier.

It prepares the workspace, reports `ready`, and applies the fix an agent would make
(`>` -> `>=`): a deterministic stand-in for a coding agent; no model is called. It reports no
reward and runs no tests: the verifier (shipping_fix_verifier.py) grades what it left.
"""
import json
import os
import pathlib
import time

WORKSPACE = pathlib.Path(os.environ.get("WORKSPACE", "/workspace"))
SOURCE = "def shipping(total):\n    return 0 if total > 99 else 10\n"


def main():
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    (WORKSPACE / "shipping.py").write_text(SOURCE)
    # The termination message is the preferred channel: judged from the pod status, no log read.
    ready = {"event": "ready", "at": time.time(), "episode_id": os.environ["EPISODE_ID"]}
    with open("/dev/termination-log", "w") as f:
        f.write(json.dumps(ready) + "\n")
    code = (WORKSPACE / "shipping.py").read_text().replace("total > 99", "total >= 99")
    (WORKSPACE / "shipping.py").write_text(code)


if __name__ == "__main__":
    main()
