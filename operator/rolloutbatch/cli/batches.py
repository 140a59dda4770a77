"""``submit`` (``--pool``: on a RolloutPool's warm pods), ``get``, ``list``, ``stop`` and ``cleanup``."""

from __future__ import annotations

import argparse
import sys

from rolloutbatch import GROUP
from rolloutbatch.cli import render
from rolloutbatch.cli.common import CLIError, load_documents, make_client, one_line, positive
from rolloutbatch.cli.follow import watch_handles
from rolloutbatch.core.pool_conversion import manifest_conflict
from rolloutbatch.sdk import TERMINAL_PHASES, BatchHandle, Client, ops, with_pool
from rolloutbatch.sdk.build import plan_inputs

RESOURCE = f"rolloutbatch.{GROUP}"


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("submit", parents=[common], help="create RolloutBatches from a YAML file",
                       description="Create the RolloutBatch object(s) in FILE; with --watch, follow them to the end.")
    p.add_argument("-f", "--filename", required=True, action="append", metavar="FILE",
                   help="YAML or JSON file with RolloutBatch object(s); '-' reads stdin (repeatable)")
    p.add_argument("-w", "--watch", action="store_true",
                   help="show live progress, then a summary; exit 0 when every batch Succeeded, 1 when one "
                        "failed, 3 when the watch timed out (the batches keep running: rolloutbatch watch NAME)")
    p.add_argument("--timeout", type=positive, default=3600.0, metavar="SECONDS",
                   help="give up watching after this long (default 3600; exit 3)")
    p.add_argument("-o", "--output", choices=["name", "json", "yaml"],
                   help="print the created objects: a name a line, or one JSON/YAML document (the object, or a "
                        "v1 List of several); with --watch, the progress and the summary then go to stderr")
    p.add_argument("--pool", metavar="NAME",
                   help="run the batches in the warm pods of this RolloutPool (their namespace's): spec.poolRef is "
                        "set and the fields that are the pool's (image, task, resources, workspace, isolation, "
                        "runtimeClassName, podTemplate) are left out of each batch; a batch that writes one of them "
                        "other than the pool's (or any isolation.egress) is refused")
    p.set_defaults(func=submit)

    p = sub.add_parser("get", parents=[common], help="show one RolloutBatch")
    p.add_argument("name")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide"])
    p.set_defaults(func=get)

    p = sub.add_parser("list", parents=[common], help="list RolloutBatches", aliases=["ls"])
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide"])
    p.set_defaults(func=list_)

    p = sub.add_parser("stop", parents=[common], help="stop running RolloutBatches early, keeping what finished",
                       description="Set spec.stop on each batch (one-way): no new episode starts, running episodes "
                                   "end within their grace period, every finished row is kept, and the batch ends "
                                   "in phase Stopped. A batch that already ended is left as it is.")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--wait", action="store_true", help="wait until each batch has ended; exit 3 on --timeout")
    p.add_argument("--timeout", type=positive, default=300.0, metavar="SECONDS",
                   help="how long --wait waits (default 300)")
    p.set_defaults(func=stop)

    p = sub.add_parser("cleanup", parents=[common],
                       help="delete RolloutBatches, wait until their sandboxes are gone, and remove retained results")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--ignore-not-found", action="store_true",
                   help="a batch that does not exist (nor its retained results) is not an error")
    p.add_argument("--keep-results", action="store_true",
                   help="leave the results of batches with spec.cleanup.results: Retain (default: remove them too)")
    p.add_argument("--timeout", type=positive, default=300.0, metavar="SECONDS",
                   help="how long to wait for the batch and its sandbox namespace to go (default 300)")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="wait until everything is gone (default); --no-wait returns at once")
    p.set_defaults(func=cleanup)


def _with_namespace(obj: dict, namespace: str | None, default: str, where: str) -> dict:
    meta = obj.setdefault("metadata", {})
    own = meta.get("namespace")
    if namespace and own and own != namespace:
        raise CLIError(f"{where}: the namespace from the file ({own}) does not match -n {namespace}")
    meta["namespace"] = namespace or own or default
    return obj


def _on_pool(client: Client, objects: list, args: argparse.Namespace) -> list:
    """The batches as they run on the pool ``--pool``: its own fields left out (sdk.with_pool), once
    what each names (image, task files, resources, ...) is found to be the pool's: otherwise its
    episodes would silently run the pool's task on the pool's image."""
    from rolloutbatch.kube.errors import Forbidden, NotFound
    try:
        pooled = [(path, n, with_pool(o, args.pool)) for path, n, o in objects]
    except ValueError as exc:
        raise CLIError(f"--pool: {one_line(exc)}") from None
    pools: dict[str, dict | None] = {}
    for path, n, obj in objects:
        namespace = args.namespace or (obj.get("metadata") or {}).get("namespace") or client.namespace
        if namespace not in pools:
            try:
                pools[namespace] = client.get_pool(args.pool, namespace)
            except NotFound:   # none is made unless the batch waits for its pool (sdk.ops.submit_on_pool)
                pools[namespace] = None
            except Forbidden:   # not ours to read: the operator speaks then
                pools[namespace] = {}
        pool = pools[namespace]
        if pool is None and not ops.waits_for_its_pool(obj):
            raise CLIError(f"{path}: object {n}: --pool: {ops.missing_pool(namespace, args.pool)}")
        problem = pool and manifest_conflict(obj.get("spec") or {}, pool.get("spec") or {})
        if problem:
            raise CLIError(f"{path}: object {n}: --pool {args.pool}: {problem}")
    return pooled


def _refuse_twins(objects: list) -> None:
    """Two objects of one namespace and name: the dry run below stores nothing, so both would pass
    it and the second be refused once the first exists. A generateName gets a name per object."""
    first: dict[tuple[str, str], str] = {}
    for path, n, obj in objects:
        meta = obj["metadata"]
        if not meta.get("name"):
            continue
        key = (meta["namespace"], meta["name"])
        if key in first:
            raise CLIError(f"{path}: object {n}: {key[0]}/{key[1]} is also {first[key]}: each name is created "
                           "once (nothing was created)")
        first[key] = f"{path}: object {n}"


def submit(args: argparse.Namespace) -> int:
    objects = []
    for path in args.filename:
        objects += [(path, n, o) for n, o in enumerate(load_documents(path), 1)]
    client = make_client(args)
    if args.pool is not None:   # --pool "" (an unset variable) is refused, not read as no pool
        objects = _on_pool(client, objects, args)
    for path, n, obj in objects:
        _with_namespace(obj, args.namespace, client.namespace, f"{path}: object {n}")
    _refuse_twins(objects)
    if len(objects) > 1:
        # All or nothing: a refused object (a typo in the third batch) must not leave the first two.
        # Each checked as it will be sent: large inputs by reference (sdk.plan_inputs), not the
        # megabytes inline that the API server refuses as too large a request.
        for _, _, obj in objects:
            client.create(plan_inputs(obj, (obj.get("metadata") or {}).get("namespace") or client.namespace)[0],
                          dry_run=True)
    handles: list[BatchHandle] = []
    try:
        for _, _, obj in objects:
            handle = client.submit(obj)
            handles.append(handle)
            if args.output == "name":
                print(f"{RESOURCE}/{handle.name}")
            elif not args.output:
                print(f"{RESOURCE}/{handle.name} created (namespace {handle.namespace})")
    finally:
        # -o json|yaml: one document, as kubectl apply prints it: the object, or a List of several
        # (of those created, when a later one failed)
        if args.output in ("json", "yaml") and handles:
            print(render.serialize([h.obj for h in handles], args.output, single=len(objects) == 1))
    sys.stdout.flush()
    if not args.watch:
        return 0
    # With -o, stdout is the objects' alone: the progress and the summary go to stderr.
    return watch_handles(handles, args.timeout, to_stderr=bool(args.output))


def get(args: argparse.Namespace) -> int:
    render.show([make_client(args).get(args.name)], args.output, single=True)
    return 0


def list_(args: argparse.Namespace) -> int:
    client = make_client(args)
    items = client.list(all_namespaces=args.all_namespaces)
    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    render.show(items, args.output, single=False, where=f"namespace {client.namespace}",
                all_namespaces=args.all_namespaces)
    return 0


def stop(args: argparse.Namespace) -> int:
    """Stop every named batch first, then (``--wait``) follow each to its end."""
    client = make_client(args)
    handles = [BatchHandle(client, client.get(name)) for name in dict.fromkeys(args.names)]
    for handle in handles:
        phase = handle.status.get("phase")
        handle.obj = client.stop(handle.obj)
        if phase in TERMINAL_PHASES:
            print(f"{RESOURCE}/{handle.name} already ended ({phase}): nothing to stop")
        else:
            print(f"{RESOURCE}/{handle.name} stop requested")
    if not args.wait:
        return 0
    for handle in handles:
        status = handle.wait(timeout=args.timeout)
        print(f"{RESOURCE}/{handle.name}: {render.safe_line(status.get('phase'))}: "
              f"{render.safe_line(status.get('message', ''))}")
    return 0


def cleanup(args: argparse.Namespace) -> int:
    """Delete every named batch first (they go in parallel), then wait for each; then remove the
    retained results of the batches that are gone (``spec.cleanup.results: Retain``)."""
    from rolloutbatch.kube.errors import NotFound

    client = make_client(args)
    found, absent, missing = [], [], []
    for name in dict.fromkeys(args.names):
        try:
            found.append(client.get(name))
        except NotFound as exc:
            absent.append((name, str(exc)))
    # The retained results a found batch's name stands for: its own, and those of earlier batches
    # of the name already there (e.g. the ones a stalled namesake names). Read before it goes: a
    # batch created under the name after that is not one of them, so its results are never removed.
    sets = {obj["metadata"]["name"]: [obj["metadata"]["uid"]] for obj in found}
    if args.wait and not args.keep_results:
        for obj in found:
            sets[obj["metadata"]["name"]] += [u for u in client.retained_uids(obj["metadata"]["name"])
                                              if u != obj["metadata"]["uid"]]
    for obj in found:
        client.delete(obj, wait=False)
    for obj in found:
        name, sandbox = obj["metadata"]["name"], client.sandbox_namespace(obj)
        if args.wait:
            client.delete(obj, wait=True, timeout=args.timeout)
            print(f"{RESOURCE}/{name} deleted" + (f" and sandbox namespace {sandbox}" if sandbox else ""))
        else:
            print(f"{RESOURCE}/{name} deletion requested")
    # Only once a batch is gone: its operator could still write its results while it goes.
    def remove_retained(name: str, uids: list[str] | None = None) -> bool:
        if args.keep_results:
            return False
        if uids is None:    # a name alone: the sets of its gone batches (a live namesake keeps its own)
            removed = client.delete_retained(name)
        else:
            removed = sorted(n for uid in uids for n in client.delete_retained(name, uid=uid))
        if removed:
            print(f"retained results of {name} deleted: configmap/{', configmap/'.join(removed)}")
        return bool(removed)

    for name, error in absent:
        if not remove_retained(name) and not args.ignore_not_found:
            missing.append(error)
    for name in [obj["metadata"]["name"] for obj in found] if args.wait else []:
        remove_retained(name, sets[name])
    if found and not args.wait and not args.keep_results:
        print("retained results (if any) stay until the batches are gone: run cleanup again then")
    if missing:
        raise CLIError("; ".join(missing))
    return 0
