"""An asyncio trainer loop on rolloutbatch: submit a grouped batch, score each GRPO group the
moment its k samples are in, keep the rest in flight.

    KUBECONFIG=.devcluster/kubeconfig python examples/grpo_trainer.py --namespace default

The shape a verl / slime / prime-rl integration takes: ``handle.groups()`` replaces the
trainer's own as-completed loop; an episode the agent failed is a valid sample at reward 0, and
only invalid ones (lost to the infrastructure) are left out of the group, so infrastructure
failures never become fake zeros.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time

from rolloutbatch.sdk import AsyncClient, Task, build_batch

# A stand-in policy rollout: each sample takes a few seconds, and its reward depends on the task.
EPISODE = """
import json, os, pathlib, random, time
task = json.loads(pathlib.Path(os.environ["EPISODE_INPUT"]).read_text())
def emit(event, **f):
    print(json.dumps({"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **f}), flush=True)
emit("ready")
random.seed(int(os.environ["EPISODE_INDEX"]))
time.sleep(random.uniform(1, 6))
emit("reward", reward=float(random.random() < task["difficulty"]))
"""


def advantages(group: dict) -> dict[int, float]:
    """Group-relative advantages (reward - mean) / std over the group's valid samples."""
    valid = [r for r in group["rows"] if r["valid"]]
    if len(valid) < 2:
        return {}
    mean = group["reward_mean"]
    std = group["reward_std"] or 0.0
    return {r["index"]: (r["reward"] - mean) / (std + 1e-6) for r in valid if math.isfinite(r["reward"])}


async def train_step(client: AsyncClient, prompts: list[dict], k: int, namespace: str) -> None:
    task = Task(files={"episode.py": EPISODE}, command=["python", "-B", "/task/episode.py"])
    batch = build_batch("grpo-step-", task, episodes=len(prompts) * k, inputs=prompts, samples_per_input=k,
                        namespace=namespace, episode_timeout_seconds=120, active_deadline_seconds=600)
    handle = await client.submit(batch)
    started = time.monotonic()
    print(f"submitted {handle.name}: {len(prompts)} prompts x {k} samples")
    async for group in handle.groups(timeout=900):
        adv = advantages(group)
        shown = " ".join(f"{a:+.2f}" for _, a in sorted(adv.items()))
        print(f"[{time.monotonic() - started:5.1f}s] group {group['group']:>3}: "
              f"{group['valid']}/{group['episodes']} valid, mean {group['reward_mean']}, advantages {shown or '-'}")
        # A real trainer would queue (prompt, samples, advantages) for the optimizer here.
    status = await handle.wait(timeout=60)
    print(f"{handle.name}: {status.get('phase')}, reward sum {status.get('rewardSum')}")
    await handle.delete(wait=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", "-n", default="default")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--samples", "-k", type=int, default=4)
    args = parser.parse_args()
    prompts = [{"prompt": p, "difficulty": (p + 1) / (args.prompts + 1)} for p in range(args.prompts)]
    async with AsyncClient(namespace=args.namespace) as client:
        await train_step(client, prompts, args.samples, args.namespace)


if __name__ == "__main__":
    asyncio.run(main())
