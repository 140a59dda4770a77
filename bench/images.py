"""Part `images`: one batch over 4 images (spec.inputImages) vs 4 batches of one image each.

The same trivial episodes in three shapes, interleaved in each repeat so they share the machine's
load: 4 x 25 episodes as one batch of one image (the baseline, no scheduling gate), as one batch
with an image per input (every pod gated until the operator set its image), and as 4 batches of
25 created at once, one per image (wall time until the last of them is Ready). Parallelism is the
same in all: 100 episodes at once in all, as 4 x 25.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import lib
from workloads import ensure_namespace, run_batch, trivial_spec

IMAGES = ("python:3.12-alpine", "python:3.11", "python:3.12-slim", "python:3.12")


def part_images(kube, repeats: int, per_image: int = 25) -> dict:
    ns = lib.unique("bench-images")
    ensure_namespace(kube, ns)
    op = lib.start_operator("bench-images")
    episodes = per_image * len(IMAGES)
    rows: dict[str, list[float]] = {"one-image": [], "input-images": [], "four-batches": []}
    exact: list[bool] = []
    try:
        for i in range(repeats):
            spec = trivial_spec(episodes, episodes)
            one = run_batch(kube, ns, lib.unique("one"), spec, detail=False)
            mixed = run_batch(kube, ns, lib.unique("mixed"), {**spec, "samplesPerInput": per_image,
                                                              "inputImages": list(IMAGES)}, detail=False)
            single = trivial_spec(per_image, per_image)
            with ThreadPoolExecutor(len(IMAGES)) as pool:
                parts = list(pool.map(lambda image: run_batch(kube, ns, lib.unique("part"), {**single, "image": image},
                                                              detail=False), IMAGES))
            started = min(p["t0"] for p in parts)
            four = max(p["t0"] + p["wall_to_ready_seconds"] for p in parts) - started
            rows["one-image"].append(one["wall_to_ready_seconds"])
            rows["input-images"].append(mixed["wall_to_ready_seconds"])
            rows["four-batches"].append(round(four, 4))
            exact.append(all(r["status"].get("succeededEpisodes") == r["status"].get("episodes")
                             for r in (one, mixed, *parts)))
            print(f"[images] #{i}: " + " ".join(f"{k} {v[-1]:.2f}s" for k, v in rows.items()), flush=True)
    finally:
        op.stop()
        kube.delete(f"/api/v1/namespaces/{ns}")
    summary = {k: lib.summary(v) for k, v in rows.items()}
    base = summary["one-image"]["p50"]
    out = {"part": "images", "machine": lib.machine_info(), "repeats": repeats, "images": list(IMAGES),
           "episodes": episodes, "definitions": {
               "one-image": f"one RolloutBatch of {episodes} episodes, one image: created -> Ready=True",
               "input-images": f"the same with spec.inputImages over {len(IMAGES)} images "
                               f"(samplesPerInput {per_image}): created -> Ready=True",
               "four-batches": f"{len(IMAGES)} RolloutBatches of {per_image}, one image each, created at once: "
                               "first created -> last Ready=True"},
           "seconds": rows, "summary": summary, "every_episode_succeeded": all(exact),
           "ratio_of_medians_to_one_image": {k: round(summary[k]["p50"] / base, 4) for k in rows}}
    lib.write_result("images", out)
    return out
