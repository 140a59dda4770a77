"""Warm pools: ``pools`` (the list, as ``kubectl get rp``) and ``pool create|get|scale|delete``.

A RolloutPool keeps warm sandbox pods ready for the batches of its namespace that name it
(``rolloutbatch submit --pool NAME``, ``spec.poolRef``). ``pool create`` builds the object with
the SDK's ``build_pool`` from the flags (task files read from disk, the prepare command split as
a shell would, but run without one), so the operator's own checks refuse a bad pool before any
call; a pool that needs more (resources, a pod template) is written as YAML and applied with
kubectl, as any RolloutPool.
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys

from rolloutbatch import GROUP
from rolloutbatch.cli import render
from rolloutbatch.cli.common import CLIError, at_least, make_client, one_line, positive
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.escapes import escaped

RESOURCE = f"rolloutpool.{GROUP}"


_count = at_least(0)   # argparse type of a pool size: a whole number, 0 or more
_one_or_more = at_least(1)   # of a bound or a time the CRD starts at 1 (maxSize, prepare's timeoutSeconds)


def _env(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("pools", parents=[common], help="list RolloutPools (warm sandbox pods), as kubectl get rp")
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide"])
    p.set_defaults(func=list_pools)

    # parents=[common]: the global options go before the action too (`pool -n rl scale ...`).
    pool = sub.add_parser("pool", parents=[common], help="create, show, scale or delete a RolloutPool",
                          description="A RolloutPool keeps warm sandbox pods ready for the RolloutBatches of its "
                                      "namespace that name it (rolloutbatch submit --pool NAME).")
    # The actions' parsers are of the command's own class (cli.main.Parser: one-line errors).
    actions = pool.add_subparsers(dest="pool_command", required=True, metavar="ACTION", parser_class=type(pool))

    p = actions.add_parser("create", parents=[common], help="create a RolloutPool",
                           description="Create a RolloutPool of --size warm pods of --image with the --task-file "
                                       "files, each made warm by running --prepare in its workspace.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--size", type=_count, required=True, metavar="N", help="warm pods to keep ready")
    p.add_argument("--task-file", dest="task_files", action="append", required=True, metavar="PATH",
                   help="a file every pod gets under --task-mount-path, named as on disk (repeatable)")
    p.add_argument("--image", help="container image of the pods (default: the CRD's)")
    p.add_argument("--max-size", type=_one_or_more, metavar="N", help="the most --size may ever be (default: the CRD's)")
    p.add_argument("--prepare", metavar="COMMAND",
                   help="run in each new pod before it counts as warm, split as a shell would but run without one "
                        "(e.g. \"sh /task/setup.sh\")")
    p.add_argument("--prepare-timeout", type=_one_or_more, metavar="SECONDS", help="how long --prepare may run")
    p.add_argument("--env", type=_env, action="append", default=[], metavar="NAME=VALUE",
                   help="a plain environment variable of the pods (repeatable)")
    p.add_argument("--task-mount-path", metavar="PATH", help="where the task files appear (default /task)")
    p.add_argument("--network", choices=[str(mode) for mode in v.NETWORK_MODES],   # values, not the enum's reprs
                   help=f"the pods' network (default {v.NETWORK_MODES[0]})")
    p.add_argument("--runtime-class", metavar="NAME", help="RuntimeClass of the pods (e.g. gvisor)")
    p.add_argument("--verifier", action="store_true",
                   help="a verifier container in every pod, for batches with spec.verifier")
    p.add_argument("--verifier-image", metavar="IMAGE", help="its image (implies --verifier; default --image)")
    p.add_argument("--dry-run", action="store_true", help="have the API check the pool completely, store nothing")
    p.add_argument("-o", "--output", choices=["name", "json", "yaml"], help="print the created object")
    p.set_defaults(func=create)

    p = actions.add_parser("get", parents=[common], help="show one RolloutPool")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-o", "--output", choices=["json", "yaml", "wide"])
    p.set_defaults(func=get)

    p = actions.add_parser("scale", parents=[common], help="set a RolloutPool's size (kubectl scale rp/NAME)",
                           description="Set spec.size: the operator makes or removes warm pods to match. The API "
                                       "refuses a size above the pool's spec.maxSize.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("size", type=_count, metavar="N")
    p.set_defaults(func=scale)

    p = actions.add_parser("delete", parents=[common], help="delete a RolloutPool and its warm pods",
                           description="Delete the pool; the operator removes its warm pods and namespace. Pods "
                                       "already claimed by batches stay theirs.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--timeout", type=positive, default=300.0, metavar="SECONDS",
                   help="how long to wait for the pool to go (default 300)")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="wait until the pool is gone (default); --no-wait returns at once")
    p.set_defaults(func=delete)


def _task_files(paths: list[str]) -> dict[str, str]:
    files: dict[str, str] = {}
    for path in paths:
        name = pathlib.Path(path).name
        if name in files:
            raise CLIError(f"--task-file {path}: a second file named {name} (each is named as on disk)")
        try:
            files[name] = pathlib.Path(path).read_bytes().decode()   # as on disk (read_text makes CRLF LF)
        except FileNotFoundError:
            raise CLIError(f"--task-file {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CLIError(f"--task-file {path}: cannot read: {one_line(exc)}") from None
    return files


def create(args: argparse.Namespace) -> int:
    names = [name for name, _ in args.env]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise CLIError(f"--env {', '.join(twice)} given twice: which value is meant?")
    if args.verifier_image == "":
        raise CLIError("--verifier-image: an empty image (leave it out for the pool's --image)")
    options: dict = {"env": dict(args.env)}
    for option, value in (("image", args.image), ("max_size", args.max_size),
                          ("prepare_timeout_seconds", args.prepare_timeout), ("task_mount_path", args.task_mount_path),
                          ("network", args.network), ("runtime_class_name", args.runtime_class)):
        if value is not None:
            options[option] = value
    if args.prepare is not None:
        try:
            options["prepare"] = shlex.split(args.prepare)
        except ValueError as exc:
            raise CLIError(f"--prepare: {exc}") from None
    if args.verifier or args.verifier_image is not None:
        options["verifier"] = {"image": args.verifier_image} if args.verifier_image else {}
    files = _task_files(args.task_files)
    client = make_client(args)
    try:
        obj = client.create_pool(args.name, args.size, task_files=files, dry_run=args.dry_run, **options)
    except ValueError as exc:   # the operator's own checks (build_pool), before any call
        raise CLIError(one_line(exc)) from None
    if args.output == "name":
        print(f"{RESOURCE}/{obj['metadata']['name']}")
    elif args.output:
        print(render.serialize([obj], args.output, single=True))
    else:
        done = "checked (dry run)" if args.dry_run else "created"
        print(f"{RESOURCE}/{obj['metadata']['name']} {done} (namespace {obj['metadata']['namespace']})")
    return 0


def get(args: argparse.Namespace) -> int:
    render.show([make_client(args).get_pool(args.name)], args.output, single=True, columns=render.POOL_COLUMNS)
    return 0


def list_pools(args: argparse.Namespace) -> int:
    client = make_client(args)
    items = client.list_pools(all_namespaces=args.all_namespaces)
    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    render.show(items, args.output, single=False, kind_plural="RolloutPools", where=f"namespace {client.namespace}",
                all_namespaces=args.all_namespaces, columns=render.POOL_COLUMNS)
    return 0


def scale(args: argparse.Namespace) -> int:
    obj = make_client(args).scale_pool(args.name, args.size)
    print(f"{RESOURCE}/{obj['metadata']['name']} scaled to {obj['spec']['size']}")
    return 0


def delete(args: argparse.Namespace) -> int:
    def waiting(message: str) -> None:   # the wait lasts as long as the batches on its pods
        print(f"rolloutbatch: {RESOURCE}/{args.name}: {escaped(one_line(message))}", file=sys.stderr, flush=True)
    make_client(args).delete_pool(args.name, wait=args.wait, timeout=args.timeout, on_waiting=waiting)
    print(f"{RESOURCE}/{args.name} {'deleted' if args.wait else 'deletion requested'}")
    return 0
