"""PNG plots from bench/results/*.json (matplotlib, Agg backend)."""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lib import RESULTS  # noqa: E402  (BENCH_RESULTS: this run's directory)


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def finished_over_time(scale: dict) -> None:
    sc = scale["scenarios"].get("1k-p100")
    if not sc:
        return
    (name, batch), = sc["per_batch"].items()
    rewards = batch["reward_times"]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(rewards, range(1, len(rewards) + 1), label="episode reward event (results ConfigMap)", lw=2)
    prog = [(t, f) for t, n, f, _ in sc["progress"] if n == name]
    if prog:
        ax.step([t for t, _ in prog], [f for _, f in prog], where="post",
                label="finished episodes in RolloutBatch status (bench watch)", lw=1.5)
    ax.set_xlabel("seconds since the batch's start")
    ax.set_ylabel("episodes finished")
    ax.set_title(f"1,000 trivial episodes, parallelism 100: {batch['wall_to_ready_seconds']} s to Ready")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(RESULTS / "episodes-finished-1k.png")
    plt.close(fig)


def pod_to_ready_cdf(scale: dict | None, breakdown: dict | None) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    series = []
    if scale and "1k-p100" in scale["scenarios"]:
        (_, batch), = scale["scenarios"]["1k-p100"]["per_batch"].items()
        series.append(("trivial, 1,000 x p100", batch["pod_to_ready"]))
    if breakdown:
        for label, b in breakdown["batches"].items():
            vals = sorted(p["ready_at"] - p["api_created"] for r in b["runs"] for p in r["pods"]
                          if p.get("ready_at") and p.get("api_created"))
            series.append((f"shipping-fix {label} (creationTimestamp is whole seconds)", vals))
    for label, vals in series:
        vals = sorted(vals)
        if vals:
            ax.plot(vals, [(i + 1) / len(vals) for i in range(len(vals))], label=f"{label}, n={len(vals)}", lw=2)
    ax.set_xlabel("pod created -> ready event (s)")
    ax.set_ylabel("fraction of episodes")
    ax.set_title("CDF of pod-to-ready")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "pod-to-ready-cdf.png")
    plt.close(fig)


def main() -> None:
    scale, breakdown = _load("scale"), _load("breakdown")
    if scale:
        finished_over_time(scale)
    pod_to_ready_cdf(scale, breakdown)
    print(f"[bench] plots in {RESULTS}", flush=True)


if __name__ == "__main__":
    main()
