"""Part `modes`: RolloutBatch vs a bare Indexed Job in every isolation mode.

The same trivial episodes, at 60 x p30 and 1,000 x p100, as a bare Indexed Job (the operator's own
manifests, watched by the bench until Complete), a RolloutBatch in Dedicated isolation (the
default), Dedicated with the opt-in ResourceQuota, and Shared. The variants of one size run
interleaved in each repeat, so they share the machine's load; the ratio is RolloutBatch
created -> Ready=True over bare Job created -> Complete, medians of one run.
"""
from __future__ import annotations

import lib
from rolloutbatch.core import vocabulary
from workloads import ensure_namespace, run_bare, run_batch, trivial_spec

VARIANTS = {"dedicated": {}, "dedicated+quota": {"isolation": {"namespace": vocabulary.ISOLATION_DEDICATED,
                                                                  "resourceQuota": True}},
            "shared": {"isolation": {"namespace": vocabulary.ISOLATION_SHARED}}}


def part_modes(kube, repeats: int, sizes=((60, 30), (1000, 100)), result: str = "modes",
               variants: tuple[str, ...] = tuple(VARIANTS)) -> dict:
    """Every size, bare and each of ``variants`` (all by default: a 1,000-episode run of each
    takes about 20 minutes on real nodes here, so one may be asked for alone)."""
    ns = lib.unique("bench-modes")
    ensure_namespace(kube, ns)
    op = lib.start_operator("bench-modes")
    out: dict = {"part": "modes", "machine": lib.machine_info(), "repeats": repeats, "sizes": {}}
    try:
        for episodes, parallelism in sizes:
            key = f"{episodes}x{parallelism}"
            spec = trivial_spec(episodes, parallelism)
            rows: dict[str, list[float]] = {"bare": [], **{v: [] for v in variants}}
            for i in range(repeats if episodes <= 100 else 1):
                bare_run = run_bare(kube, ns, lib.unique("bare"), spec)
                if bare_run["succeeded"] != episodes:   # a Job that failed some is not the same work
                    raise RuntimeError(f"bare Job {key}: {bare_run['succeeded']} of {episodes} succeeded")
                rows["bare"].append(bare_run["wall_to_complete_seconds"])
                for variant in variants:
                    override = VARIANTS[variant]
                    rb = run_batch(kube, ns, lib.unique(variant.replace("+", "-")), {**spec, **override}, detail=False)
                    rows[variant].append(rb["wall_to_ready_seconds"])
                print(f"[modes] {key} #{i}: " + " ".join(f"{k} {v[-1]:.2f}s" for k, v in rows.items()), flush=True)
            summary = {k: lib.summary(v) for k, v in rows.items()}
            bare = summary["bare"]["p50"]
            out["sizes"][key] = {"seconds": rows, "summary": summary,
                                 "ratio_of_medians": {v: round(summary[v]["p50"] / bare, 4) for v in variants}}
    finally:
        op.stop()
        kube.delete(f"/api/v1/namespaces/{ns}")
    lib.write_result(result, out)
    return out
