"""``rolloutbatch logs NAME [--index I]``: an episode's log from its pod while the pod exists, else
the end of it that the episode's results row keeps (``core.log_tails``).

Exit 0 when it showed what was asked: a log, or a kept tail, for every episode asked about.
Exit 1 when it could not for one of them (no pod and no row yet, no tail kept, the results
unreadable), and stderr says why.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from rolloutbatch.cli.common import CLIError, at_least, make_client
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.escapes import escaped
from rolloutbatch.sdk.ops import pool_of, pods_namespace


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("logs", parents=[common], help="show an episode's log",
                       description="Print the log of episode --index (default: every episode's, each headed by "
                                   "its pod). Once its pod is gone, the end of the log its results row keeps. "
                                   "Control characters are shown escaped (kubectl logs gives the raw bytes). "
                                   "Exit 0 when every log asked for was shown, 1 when one could not be.")
    p.add_argument("name")
    p.add_argument("--index", "-i", type=at_least(0), metavar="I", help="the episode index (0..episodes-1)")
    p.add_argument("--limit-bytes", type=at_least(1), default=v.LOG_LIMIT_BYTES, metavar="N",
                   help=f"bytes per log at most (default {v.LOG_LIMIT_BYTES / 2**20:g} MiB)")
    p.set_defaults(func=logs)


def kib(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} bytes"


TAILS_KEPT = (f"Every episode's results row keeps the end of its log: {kib(v.SUCCESS_LOG_TAIL_BYTES)} of a "
              f"succeeded one's, {kib(v.LOG_TAIL_BYTES)} of a failed or lost one's")


def cleanup_hint(batch: Mapping) -> str:
    """Why the batch's sandbox (its pods, and their logs) is gone, and the one policy that keeps it;
    a batch that ended before it made a Job never had one."""
    from rolloutbatch.core.children import removes_sandbox

    status = batch.get("status") or {}
    policy = ((batch.get("spec") or {}).get("cleanup") or {}).get("sandbox") or v.CLEANUP_POLICIES[0]
    phase = status.get("phase")
    # jobUID is recorded once the operator read the Job it made (jobName is named before that)
    if phase in v.TERMINAL_PHASES and not status.get("jobUID"):
        because = f" ({status['reason']})" if isinstance(status.get("reason"), str) and status["reason"] else ""
        return (f"the batch reached {phase}{because} before it made its Job: it never had pods, nor logs (its "
                "status message says why)")
    pool = pool_of(batch)
    it = f"its Job in RolloutPool {pool}'s namespace" if pool is not None else "it"
    ended = str(phase or v.PENDING).lower()
    why = (f"spec.cleanup.sandbox {policy} removes {it} once a batch {ended}" if removes_sandbox(policy, phase)
           else f"{it} was deleted by someone (spec.cleanup.sandbox {policy} keeps it while a batch is {ended})")
    return (f"{why}, its pods and their logs with it. Only cleanup.sandbox: {v.CLEANUP_NEVER} keeps the sandbox, "
            f"until the batch is deleted ({v.CLEANUP_DELETE_ON_SUCCESS}, the default, removes it after a success, "
            f"{v.CLEANUP_ALWAYS} after any end); the spec is immutable, so set it on the next batch")


def _row_text(row: Mapping) -> str:
    parts = [f"episode {row.get('index')}: {row.get('outcome')}"]
    if row.get("reason"):
        parts.append(f"reason {row['reason']}")
    if row.get("message"):
        parts.append(str(row["message"]))
    # one line, escaped: a message quotes episode text, and a results ConfigMap is anyone's to write
    return escaped(", ".join(parts))


def _no_tail_reason(row: Mapping, document: Mapping) -> str:
    from rolloutbatch.core.results import SUCCEEDED_TAILS

    shed = document.get("dropped_row_fields") or []
    if "log_tail" in shed or (SUCCEEDED_TAILS in shed and row.get("outcome") == v.OUTCOME_SUCCEEDED):
        return "its log tail was shed: the results passed their ConfigMap's size budget (dropped_row_fields)"
    if row.get("channel") == v.CHANNEL_TERMINATION_MESSAGE:
        return "it reported through its termination message, so its log was never read"
    return "its row keeps no log tail"


def print_kept(row: Mapping, document: Mapping) -> bool:
    """A row and the tail it keeps, said to be that; False when it keeps none (said why)."""
    print(_row_text(row))
    tail = row.get("log_tail")
    if not isinstance(tail, str) or not tail:
        print(f"  (no log of episode {row.get('index')} is left: {_no_tail_reason(row, document)})")
        return False
    from rolloutbatch.core.log_tails import budget

    size = len(tail.encode())
    print(f"  (its pod is gone: the last {size} bytes of its log, as its results row keeps them; "
          f"a {row.get('outcome')} episode's row keeps up to {kib(budget(str(row.get('outcome'))))})")
    print("  " + shown(tail).rstrip("\n").replace("\n", "\n  "))
    return True


def shown(text: str) -> str:
    """An episode's log made safe for a terminal: control characters but newline and tab are
    printed escaped (core.escapes), so a tail cannot move the cursor and rewrite the lines above it."""
    return escaped(text, keep="\n\t")


def _print_pod_logs(client, namespace: str, pods: list[dict], headed: bool, limit: int) -> bool:
    """Each pod's episode log(s); False when one could not be read."""
    from rolloutbatch.core.naming import episode_containers
    from rolloutbatch.kube import resources
    from rolloutbatch.kube.errors import KubeError

    ok = True
    for pod in pods:
        name = pod["metadata"]["name"]
        if headed:
            print(f"==> {name} <==")
        containers = episode_containers(pod)
        for container in containers:
            if len(containers) > 1:
                print(f"--- {container} ---")
            try:
                data, truncated = resources.read_log(client.api, namespace, name, container, limit)
            except KubeError as exc:
                print(f"rolloutbatch: the log of {name} ({container}) is unavailable: {exc}", file=sys.stderr)
                ok = False
                continue
            # escaped as a kept tail is: an episode's log must not rewrite the lines (and the
            # other episodes' headers) above it (`kubectl logs` gives the raw bytes)
            sys.stdout.write(shown(data.decode(errors="replace")))
            if truncated:
                print(f"\n(log truncated at {limit} bytes)")
    return ok


def _print_gone(client, batch: Mapping, pods: list[dict], episodes: int) -> bool:
    """Beside the pods' logs, the kept tails of the episodes whose pod is gone (evicted, deleted);
    False when one has none, or when a finished batch has an episode with neither (said)."""
    from rolloutbatch.core.pod_reading import completion_index
    from rolloutbatch.sdk import ResultsNotReady

    present = {i for p in pods if (i := completion_index(p.get("metadata") or {})) is not None}
    if len(present) >= episodes:
        return True
    # a running batch's episodes without a pod may not have started yet: only a finished one's
    # must each have shown something
    finished = (batch.get("status") or {}).get("phase") in v.TERMINAL_PHASES
    try:
        document = client.results_document(batch)
    except ResultsNotReady as exc:
        if finished:
            print(f"rolloutbatch: episodes without a pod: the results cannot be read: {exc}", file=sys.stderr)
        return not finished
    rows = {r["index"]: r for r in document.get("pods") or [] if isinstance(r, Mapping)
            and type(r.get("index")) is int and r["index"] not in present}
    kept = [print_kept(rows[i], document) for i in sorted(rows)]
    never = [i for i in range(episodes) if i not in present and i not in rows] if finished else []
    if never:
        print(f"rolloutbatch: episode(s) {', '.join(map(str, never[:10]))}{' ...' if len(never) > 10 else ''} "
              f"of {batch['metadata']['name']}: no pod and no results row", file=sys.stderr)
    if not all(kept):
        print(f"rolloutbatch: {kept.count(False)} of {len(kept)} episode(s) whose pod is gone have no log left",
              file=sys.stderr)
    return all(kept) and not never


def logs(args: argparse.Namespace) -> int:
    from rolloutbatch.cli.common import sandbox_forbidden
    from rolloutbatch.core.naming import LABEL_BATCH_UID
    from rolloutbatch.kube import resources
    from rolloutbatch.kube.errors import Forbidden, NotFound
    from rolloutbatch.sdk import ResultsNotReady

    client = make_client(args)
    batch = client.get(args.name)
    meta, spec, status = batch["metadata"], batch.get("spec") or {}, batch.get("status") or {}
    episodes = int(spec.get("episodes") or 0)
    if args.index is not None and not 0 <= args.index < episodes:
        raise CLIError(f"--index {args.index}: the batch has episodes 0..{episodes - 1}")
    where = pods_namespace(batch)
    selector = f"{LABEL_BATCH_UID}={meta['uid']}"
    if args.index is not None:
        selector += f",{v.COMPLETION_INDEX_KEY}={args.index}"
    try:
        pods = client.api.get(resources.collection_path("Pod", where), "list episode pods",
                              labelSelector=selector).get("items", [])
    except NotFound:
        pods = []
    except Forbidden as exc:   # rights in the batch's namespace only: which are missing, and what works
        raise CLIError(sandbox_forbidden(where, exc, f"rolloutbatch results {meta['name']} --output DIR needs none: "
                                                     "the results keep every episode's log tail")) from None
    if pods:
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        shown = _print_pod_logs(client, where, pods if args.index is None else pods[-1:], args.index is None,
                                args.limit_bytes)
        if args.index is None:   # every episode: those whose pod is gone, by what their rows keep
            shown = _print_gone(client, batch, pods, episodes) and shown
        return 0 if shown else 1
    # No pod: say why, then print what the results keep.
    finished = status.get("phase") in v.TERMINAL_PHASES
    which = f" for episode {args.index}" if args.index is not None else ""
    if finished:
        print(f"rolloutbatch: no pod of {meta['name']}{which} is left in namespace {where}: "
              f"{cleanup_hint(batch)}. {TAILS_KEPT}", file=sys.stderr)
    else:
        print(f"rolloutbatch: no pod of {meta['name']}{which} in namespace {where} now "
              f"(phase {status.get('phase') or v.PENDING}); the results rows so far:", file=sys.stderr)
    try:
        document = client.results_document(batch)
    except ResultsNotReady as exc:
        print(f"rolloutbatch: the results cannot be read: {exc}", file=sys.stderr)
        return 1
    rows = [r for r in document.get("pods") or [] if args.index is None or r.get("index") == args.index]
    if not rows:
        print(f"rolloutbatch: episode{' ' + str(args.index) if args.index is not None else 's'} of "
              f"{meta['name']}: no results row yet", file=sys.stderr)
        return 1
    kept = [print_kept(row, document) for row in rows]
    if not all(kept):
        print(f"rolloutbatch: {kept.count(False)} of {len(kept)} episode(s) have no log left", file=sys.stderr)
        return 1
    return 0
