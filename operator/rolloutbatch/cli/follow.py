"""``watch NAME``: re-attach to a running batch (``logs`` is in ``cli.logs``).

Exit codes of ``watch`` (and ``submit --watch``): 0 Succeeded, 1 Failed or stalled (or deleted,
or replaced by a namesake: ``BatchHandle.refresh`` raises NotFound), 3 the watch timed out with
the batch still running, or lost the API server (every read failed for ``cli.watch.OUTAGE_GRACE``
seconds; a failed read is retried, and said on stderr): the batch keeps running, watch again; 130
interrupted (Ctrl-C; the batch keeps running).
"""

from __future__ import annotations

import argparse
import sys

from rolloutbatch.cli.common import make_client, make_console, positive

EXIT_TIMEOUT = 3


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("watch", parents=[common], help="follow a running RolloutBatch to the end (re-attach)",
                       description="Show the live progress of a batch, then its summary and failure reasons. "
                                   "Exit 0 Succeeded, 1 Failed, 3 the watch timed out or lost the API server "
                                   "(the batch keeps running), 130 interrupted.")
    p.add_argument("name")
    p.add_argument("--timeout", type=positive, default=3600.0, metavar="SECONDS",
                   help="give up watching after this long (default 3600; exit 3)")
    p.set_defaults(func=watch)


def reattach_hint(namespace: str, names: list[str]) -> str:
    return f"the batch keeps running; re-attach with: rolloutbatch watch {' '.join(names)} -n {namespace}" \
        if len(names) == 1 else f"the batches keep running; re-attach with: rolloutbatch watch NAME -n {namespace}"


def watch_handles(handles, timeout: float, *, to_stderr: bool = False) -> int:
    """Follow, print the summary, and the exit code (0 / 1 / 3 / 130); ``to_stderr``: both on
    stderr, when stdout holds what ``submit -o`` printed."""
    from rolloutbatch.cli.summary import print_summaries
    from rolloutbatch.cli.watch import follow
    from rolloutbatch.sdk import is_succeeded

    console = make_console(stderr=to_stderr)
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
