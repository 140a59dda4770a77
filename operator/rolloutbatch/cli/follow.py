"""``watch NAME`` (re-attach to a running batch) and ``logs NAME [--index I]``.

Exit codes of ``watch`` (and ``submit --watch``): 0 Succeeded, 1 Failed or stalled,
3 the watch timed out with the batch still running (it keeps running: watch again),
130 interrupted (Ctrl-C; the batch keeps running).
"""

from __future__ import annotations

import argparse
import sys

from rolloutbatch.cli.common import CLIError, make_client, make_console, positive
from rolloutbatch.core import vocabulary as v

EXIT_TIMEOUT = 3


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("watch", parents=[common], help="follow a running RolloutBatch to the end (re-attach)",
                       description="Show the live progress of a batch, then its summary and failure reasons. "
                                   "Exit 0 Succeeded, 1 Failed, 3 the watch timed out, 130 interrupted.")
    p.add_argument("name")
    p.add_argument("--timeout", type=positive, default=3600.0, metavar="SECONDS",
                   help="give up watching after this long (default 3600; exit 3)")
    p.set_defaults(func=watch)

    p = sub.add_parser("logs", parents=[common], help="show an episode's log",
                       description="Print the log of episode --index (default: every episode's, each headed by "
                                   "its pod). Once the sandbox is gone, says so and prints what the results keep.")
    p.add_argument("name")
    p.add_argument("--index", "-i", type=int, metavar="I", help="the episode index (0..episodes-1)")
    p.add_argument("--limit-bytes", type=int, default=v.LOG_LIMIT_BYTES, metavar="N",
                   help="bytes per log at most (default 1 MiB)")
    p.set_defaults(func=logs)


def reattach_hint(namespace: str, names: list[str]) -> str:
    return f"the batch keeps running; re-attach with: rolloutbatch watch {' '.join(names)} -n {namespace}" \
        if len(names) == 1 else f"the batches keep running; re-attach with: rolloutbatch watch NAME -n {namespace}"


def watch_handles(handles, timeout: float) -> int:
    """Follow, print the summary, and the exit code (0 / 1 / 3 / 130)."""
    from rolloutbatch.cli.summary import print_summaries
    from rolloutbatch.cli.watch import follow
    from rolloutbatch.sdk import is_succeeded

    console = make_console()
    names = [h.name for h in handles]
    try:
        follow(handles, console, timeout=timeout)
    except KeyboardInterrupt:
        print(f"rolloutbatch: interrupted; {reattach_hint(handles[0].namespace, names)}", file=sys.stderr)
        return 130
    except TimeoutError as exc:
        print(f"rolloutbatch: {exc}; {reattach_hint(handles[0].namespace, names)}", file=sys.stderr)
        return EXIT_TIMEOUT
    print_summaries(console, handles)
    return 0 if all(is_succeeded(h.status) for h in handles) else 1


def watch(args: argparse.Namespace) -> int:
    from rolloutbatch.sdk import BatchHandle

    client = make_client(args)
    return watch_handles([BatchHandle(client, client.get(args.name))], args.timeout)


def _row_text(row: dict) -> str:
    parts = [f"episode {row.get('index')}: {row.get('outcome')}"]
    if row.get("reason"):
        parts.append(f"reason {row['reason']}")
    if row.get("message"):
        parts.append(str(row["message"]))
    return ", ".join(parts)


def logs(args: argparse.Namespace) -> int:
    from rolloutbatch.core.naming import CONTAINER_NAME, LABEL_BATCH_UID
    from rolloutbatch.kube import resources
    from rolloutbatch.kube.errors import KubeError, NotFound
    from rolloutbatch.sdk import ResultsNotReady

    client = make_client(args)
    batch = client.get(args.name)
    meta, spec, status = batch["metadata"], batch.get("spec") or {}, batch.get("status") or {}
    if args.index is not None and not 0 <= args.index < int(spec.get("episodes") or 0):
        raise CLIError(f"--index {args.index}: the batch has episodes 0..{int(spec.get('episodes') or 0) - 1}")
    where = status.get("sandboxNamespace") or client.sandbox_namespace(batch) or meta["namespace"]
    selector = f"{LABEL_BATCH_UID}={meta['uid']}"
    if args.index is not None:
        selector += f",batch.kubernetes.io/job-completion-index={args.index}"
    try:
        pods = client.api.get(resources.collection_path("Pod", where), "list episode pods",
                              labelSelector=selector).get("items", [])
    except NotFound:
        pods = []
    if pods:
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        for pod in pods if args.index is None else pods[-1:]:
            name = pod["metadata"]["name"]
            if args.index is None:
                print(f"==> {name} <==")
            try:
                data, truncated = resources.read_log(client.api, where, name, CONTAINER_NAME, args.limit_bytes)
            except KubeError as exc:
                print(f"(log of {name} unavailable: {exc})")
                continue
            sys.stdout.write(data.decode(errors="replace"))
            if truncated:
                print(f"\n(log truncated at {args.limit_bytes} bytes)")
        return 0
    # No pod: say why, and print what the results kept.
    why = (f"the sandbox of {meta['name']} is gone (namespace {where}; spec.cleanup.sandbox "
           f"{(spec.get('cleanup') or {}).get('sandbox') or v.CLEANUP_POLICIES[0]}): its pods and logs were deleted. "
           "To keep logs, set spec.cleanup.sandbox: Never (DeleteOnSuccess and Always delete them) and run "
           "`rolloutbatch results NAME --output DIR` before cleanup")
    if status.get("phase") not in v.TERMINAL_PHASES:
        why = f"no pod of {meta['name']}" + (f" for episode {args.index}" if args.index is not None else "") + \
            f" in namespace {where} yet (phase {status.get('phase') or v.PENDING})"
    print(f"rolloutbatch: {why}", file=sys.stderr)
    try:
        rows = client.results_document(batch).get("pods") or []
    except ResultsNotReady:
        return 1
    kept = [r for r in rows if args.index is None or r.get("index") == args.index]
    if kept:
        print("what the results keep (failed episodes keep their log's last lines):", file=sys.stderr)
    for row in kept:
        print(_row_text(row))
        if row.get("log_tail"):
            print("  " + str(row["log_tail"]).rstrip("\n").replace("\n", "\n  "))
    return 1
