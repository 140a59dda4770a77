"""CLI command times (target: at most 0.3 s each): `rolloutbatch --version`, `get` and `list` beside kubectl.

    .venv/bin/python bench/cli_times.py [--repeats 15]

Each command runs as a fresh process, as a user types it, `--repeats` times interleaved; per
command the median wall time and the median CPU time (user + sys of the child, from
``os.wait4``), which a busy machine inflates far less than wall time. `get` and `list` read a
RolloutBatch object created for the purpose (no operator needed; it is deleted at the end).
Writes ``bench/results/cli-times.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import lib

KUBECTL = [str(lib.STATE / "bin" / "localkube"), "kubectl"]
CLI = [sys.executable, "-m", "rolloutbatch.cli.main"]


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one run; raises when the command fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {err[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    os.environ.setdefault("KUBECONFIG", str(lib.STATE / "kubeconfig"))
    ns, name = lib.unique("bench-cli"), "cli-probe"
    subprocess.run(KUBECTL + ["create", "namespace", ns], check=True, capture_output=True)
    batch = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
             "metadata": {"name": name, "namespace": ns},
             "spec": {"episodes": 1, "task": {"files": {"episode.py": "print()"}}}}
    subprocess.run(KUBECTL + ["create", "-f", "-"], input=json.dumps(batch), text=True, check=True,
                   capture_output=True)
    commands = {
        "rolloutbatch --version": CLI + ["--version"],
        "rolloutbatch get": CLI + ["get", name, "-n", ns],
        "rolloutbatch list": CLI + ["list", "-n", ns],
        "kubectl version --client": KUBECTL + ["version", "--client"],
        "kubectl get rolloutbatch": KUBECTL + ["get", "rolloutbatch", name, "-n", ns],
    }
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    try:
        for _ in range(args.repeats):
            for key, argv in commands.items():
                samples[key].append(timed(argv))
    finally:
        subprocess.run(KUBECTL + ["delete", "namespace", ns, "--wait=false"], capture_output=True)
    load = os.getloadavg()
    out = {"machine": lib.machine_info(), "repeats": args.repeats, "loadavg": load, "commands": {}}
    for key, runs in samples.items():
        out["commands"][key] = {"wall_median_s": round(statistics.median(w for w, _ in runs), 3),
                                "cpu_median_s": round(statistics.median(c for _, c in runs), 3),
                                "wall_min_s": round(min(w for w, _ in runs), 3)}
        print(f"{key:28s} wall p50 {out['commands'][key]['wall_median_s']:.3f}s  "
              f"min {out['commands'][key]['wall_min_s']:.3f}s  cpu p50 {out['commands'][key]['cpu_median_s']:.3f}s")
    lib.write_result("cli-times", out)


if __name__ == "__main__":
    main()
