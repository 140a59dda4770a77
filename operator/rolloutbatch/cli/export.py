"""``rolloutbatch results NAME --output DIR``: the guide's output directory, for one batch.

    DIR/results.json     summary fields and one row per episode (from the results ConfigMap); written
                         without the rows of shards that are gone or not the operator's, which it
                         names (missing_shards), and the command then exits 1
    DIR/<pod>.log        each episode's log, while its pod exists (bounded by --log-limit-bytes; with
                         spec.verifier the agent's then the verifier's); once the pods are gone,
                         results.json keeps the end of every episode's log (core.log_tails)
    DIR/job.json         the Job (null once it is gone), pods.json the episode pods
    DIR/events.txt       events of the sandbox namespace and of the RolloutBatch
    DIR/rolloutbatch.json the RolloutBatch object as read
    DIR/receipt.json     context, namespace, batch uid, sandbox namespace: what this run was

With --retained, a batch that is gone but retained its results (spec.cleanup.results: Retain)
gets receipt.json and results.json only, the receipt saying how they were checked. A new batch
may have taken the name meanwhile (it stalls while the old results hold <name>-results):
--retained-uid UID reads the retained results of the batch that had that uid whatever exists
under the name now, and --retained alone refuses to read the new batch in their place.

An existing DIR is refused, as the guide's script does, so results are never mixed or overwritten.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import re
from concurrent.futures import ThreadPoolExecutor

from rolloutbatch import __version__
from rolloutbatch.cli import render
from rolloutbatch.cli.common import CLIError, at_least, make_client, sandbox_forbidden
from rolloutbatch.cli.logs import TAILS_KEPT, cleanup_hint
from rolloutbatch.core import strictjson
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.naming import LABEL_BATCH_UID, episode_containers
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Forbidden, KubeError, NotFound
from rolloutbatch.sdk import Client, ResultsNotReady, result_ops
from rolloutbatch.sdk.ops import pods_namespace, pool_of
from rolloutbatch.sdk.retained import retained_batch, retained_head_name

_SAFE_FILE = re.compile(r"[a-z0-9][-a-z0-9.]{0,252}")   # fullmatch: `$` would take a trailing newline


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("results", parents=[common], help="write a batch's results, logs and state to a new directory")
    p.add_argument("name")
    p.add_argument("--output", "-O", required=True, metavar="DIR", help="directory to create (must not exist)")
    p.add_argument("--log-limit-bytes", type=at_least(1), default=v.LOG_LIMIT_BYTES, metavar="N",
                   help=f"bytes of each episode log to keep at most (default {v.LOG_LIMIT_BYTES / 2**20:g} MiB)")
    p.add_argument("--retained", action="store_true",
                   help="when the batch is gone, read the results it retained (spec.cleanup.results: Retain); "
                        "only the shard digests their head records check them, no batch status does")
    p.add_argument("--retained-uid", metavar="UID",
                   help="read the results retained by the gone batch of this name that had this uid, even while "
                        "a new batch of the name exists (implies --retained)")
    p.set_defaults(func=results)
    # Empty files are written anyway (job.json null, pods.json []), so scripts find the layout;
    # what could not be saved is said on stdout.


def results(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.output)
    if out.exists():
        raise CLIError(f"{out} already exists: choose a new directory (results are never overwritten)")
    client = make_client(args)
    if args.retained_uid is not None:
        written = export_retained(client, args.name, _retained_of(client, args.name, args.retained_uid), out)
    else:
        try:
            batch = client.get(args.name)
        except NotFound as exc:
            document = _retained(client, args.name)
            if document is None:
                raise
            if not args.retained:
                raise CLIError(f"{exc}; it retained its results: rolloutbatch results {args.name} --retained "
                               "reads them (no batch status vouches for them any more)") from None
            written = export_retained(client, args.name, document, out)
        else:
            if args.retained:
                _refuse_a_namesake(client, batch)
            written = export(client, batch, out, log_limit_bytes=args.log_limit_bytes)
    missing = written["missing"]
    print(f"wrote {out}/: {', '.join(f for f in written['files'] if f not in missing)}"
          + (f" and {written['logs']} episode logs" if written["logs"] else ""))
    by_reason: dict[str, list[str]] = {}
    for name, why in missing.items():
        by_reason.setdefault(why, []).append(name)
    for why, names in by_reason.items():
        # job.json and pods.json are still written (null, []), so scripts find the layout
        empty = [n for n in names if n in written["files"]]
        absent = [n for n in names if n not in written["files"]]
        said = [f"{label}: {', '.join(group)}" for label, group in (("empty", empty), ("not written", absent)) if group]
        print(f"{'; '.join(said)} ({why})")
    if written.get("kept"):
        print(written["kept"])
    if not written["results"]:
        print(f"no results.json: {written['results_error']}")
        return 1
    if written["results_incomplete"]:
        # results.json is written (it names what it lacks), but a script must not take it as whole
        print(f"results.json is incomplete: {written['results_incomplete']}")
        return 1
    return 0


def _retained(client: Client, name: str) -> dict | None:
    try:
        return client.retained_document(name)
    except ResultsNotReady:
        return None


def _retained_of(client: Client, name: str, uid: str) -> dict:
    """The retained results of the gone batch ``name`` that had ``uid``, whatever has the name now
    (the SDK refuses a batch that still exists: its status vouches for its results)."""
    try:
        return client.retained_document(name, uid=uid)
    except ResultsNotReady as exc:
        raise CLIError(str(exc)) from None


def _refuse_a_namesake(client: Client, batch: dict) -> None:
    """--retained while a batch of the name exists: when results retained under the name are an
    earlier batch's, reading this one in their place would answer another question."""
    name, own = batch["metadata"]["name"], batch["metadata"].get("uid")
    earlier = [uid for uid in client.retained_uids(name) if uid != own]
    if earlier:
        raise CLIError(f"RolloutBatch {client.namespace}/{name} exists (uid {own}) and is not the batch that retained "
                       f"results under its name (uid {', '.join(earlier)}): rolloutbatch results {name} "
                       f"--retained-uid {earlier[0]} reads those; without --retained, this batch's are read")


def export_retained(client: Client, name: str, document: dict, out: pathlib.Path) -> dict:
    """The layout for a batch that is gone but retained its results: the receipt and results.json
    only; everything else went with the batch, and the receipt says how the results were checked."""
    out.mkdir(parents=True, exist_ok=False)
    retained = document.get("retained") or {}
    _write(out / "receipt.json", {
        "context": client.context, "server": client.api.url, "namespace": client.namespace, "batch": name,
        "batch_uid": retained.get("uid"), "results_configmap": retained_head_name(name, client.namespace),
        "retained": True, "verified_by": retained.get("verified_by"),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rolloutbatch_version": __version__,
    })
    _write(out / "results.json", document)
    incomplete = result_ops.incomplete(document, retained_batch(document, name, client.namespace))
    why = ("the RolloutBatch is gone; its results were retained (checked only against the shard digests "
           "their head records: anyone who may write ConfigMaps in the namespace could have rewritten them)")
    return {"files": ["receipt.json", "results.json"], "results": True, "results_error": "", "logs": 0,
            "results_incomplete": str(incomplete) if incomplete else "",
            "missing": {f: why for f in ("rolloutbatch.json", "job.json", "pods.json", "events.txt", "<pod>.log")}}


def _write(path: pathlib.Path, data) -> None:
    # strict JSON: what a script then reads parses anywhere (never a NaN nor an Infinity)
    text = data if isinstance(data, str) else strictjson.dumps(data, indent=2) + "\n"
    path.write_text(text)


def export(client: Client, batch: dict, out: pathlib.Path, *, log_limit_bytes: int = v.LOG_LIMIT_BYTES) -> dict:
    """Write the layout into the new directory ``out``; returns what was written."""
    meta, status = batch["metadata"], batch.get("status") or {}
    # The status stops naming the sandbox once it is deleted: its name is deterministic.
    child_ns = pods_namespace(batch)
    out.mkdir(parents=True, exist_ok=False)
    files: list[str] = []
    receipt = {
        "context": client.context,
        "server": client.api.url,
        "namespace": meta["namespace"],
        "batch": meta["name"],
        "batch_uid": meta["uid"],
        "sandbox_namespace": status.get("sandboxNamespace"),
        "job": status.get("jobName"),
        "results_configmap": status.get("resultsConfigMap"),
        "phase": status.get("phase"),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rolloutbatch_version": __version__,
    }
    # The receipt first, so even a half-written directory says what it belongs to.
    _write(out / "receipt.json", receipt)
    files.append("receipt.json")
    _write(out / "rolloutbatch.json", batch)
    files.append("rolloutbatch.json")

    result = {"results": False, "results_error": "", "results_incomplete": "", "logs": 0}
    try:
        document = client.results_document(batch)
        _write(out / "results.json", document)
        files.append("results.json")
        result["results"] = True
        incomplete = result_ops.incomplete(document, batch)
        result["results_incomplete"] = str(incomplete) if incomplete else ""
    except ResultsNotReady as exc:
        result["results_error"] = str(exc)

    missing: dict[str, str] = {}
    # A user with rights in the batch's namespace only (the README's editor and viewer roles): what
    # they may not read is said, the rest written.
    forbidden: dict[str, Forbidden] = {}

    def sandbox_read(what: str, read, empty):
        try:
            return read()
        except Forbidden as exc:
            forbidden[what] = exc
            return empty

    sandbox_gone = not sandbox_read("namespace", lambda: _namespace_alive(client, batch, child_ns), True)
    final = status.get("phase") in v.TERMINAL_PHASES
    # a batch on a pool, or one that ended before its Job: the hint says why it has no pods (its
    # pool's namespace stays when they go; a batch without a Job never had a namespace of pods)
    hint = cleanup_hint(batch) if final and (pool_of(batch) is not None or not status.get("jobUID")) else None
    gone_why = hint if hint and not status.get("jobUID") else \
        f"the sandbox namespace {child_ns} is gone: {cleanup_hint(batch)}"
    job = sandbox_read("job.json", lambda: resources.get_or_none(client.api, "Job", status["jobName"], child_ns),
                       None) if status.get("jobName") else None
    _write(out / "job.json", job)
    files.append("job.json")
    if job is None:
        missing["job.json"] = gone_why if sandbox_gone else ("the batch has no Job yet" if not status.get("jobName")
                                                              else f"Job {child_ns}/{status['jobName']} was deleted")

    try:
        pods = sandbox_read("pods.json", lambda: client.api.get(
            resources.collection_path("Pod", child_ns), "list episode pods",
            labelSelector=f"{LABEL_BATCH_UID}={meta['uid']}"), {}).get("items", [])
    except NotFound:
        pods = []
    pods.sort(key=lambda p: p["metadata"]["name"])
    _write(out / "pods.json", pods)
    files.append("pods.json")
    if not pods:
        missing["pods.json"] = gone_why if sandbox_gone else f"no episode pod exists in {child_ns}" + (
            f": {hint}" if hint else "")
        missing["<pod>.log"] = gone_why if sandbox_gone else "no pod, no log" + (f": {hint}" if hint else "")
        result["kept"] = f"{TAILS_KEPT}, in results.json: rolloutbatch logs {meta['name']} --index I shows one"

    _write(out / "events.txt", render.format_events(_events(client, batch, child_ns, forbidden)))
    files.append("events.txt")
    if forbidden:
        exc = next(forbidden[what] for what in ("pods.json", "job.json", "events.txt", "namespace") if what in forbidden)
        why = sandbox_forbidden(child_ns, exc, "results.json needs none: it keeps every episode's log tail")
        if "job.json" in forbidden:
            missing["job.json"] = why
        if "pods.json" in forbidden:
            missing.update({"pods.json": why, "<pod>.log": why})
            result.pop("kept", None)   # its hint, `rolloutbatch logs`, lists the pods too

    def save_log(pod: dict) -> bool:
        name = pod["metadata"]["name"]
        if not _SAFE_FILE.fullmatch(name):
            return False
        containers = episode_containers(pod)
        parts = []
        for container in containers:   # spec.verifier: the agent's log, then the verifier's
            head = f"==> {container} <==\n".encode() if len(containers) > 1 else b""
            try:
                data, truncated = resources.read_log(client.api, child_ns, name, container, log_limit_bytes)
            except KubeError as exc:
                parts.append(head + f"(log unavailable: {render.number(exc.status)} {exc})\n".encode())
                continue
            if truncated:
                data += f"\n(log truncated at {log_limit_bytes} bytes)\n".encode()
            parts.append(head + data)
        (out / f"{name}.log").write_bytes(b"".join(parts))
        return True

    with ThreadPoolExecutor(max_workers=4) as pool:
        result["logs"] = sum(pool.map(save_log, pods))
    result["files"] = files
    result["missing"] = missing
    return result


def _namespace_alive(client: Client, batch: dict, namespace: str) -> bool:
    """Whether the namespace of the batch's pods is there: the batch's own sandbox (its uid on it),
    or for a batch on a pool the pool's (the batch's pods go, the namespace stays)."""
    meta = batch["metadata"]
    if namespace == meta["namespace"]:
        return True
    return client.namespace_exists(namespace, None if pool_of(batch) is not None else meta["uid"])


def _events(client: Client, batch: dict, child_ns: str, forbidden: dict[str, Forbidden]) -> list[dict]:
    """The batch's events, then its sandbox namespace's; a Forbidden of the latter is added to
    ``forbidden`` (the batch's own are still written)."""
    meta = batch["metadata"]
    events: list[dict] = []
    try:
        events += client.api.get(resources.collection_path("Event", meta["namespace"]), "list events",
                                 fieldSelector=f"involvedObject.uid={meta['uid']}").get("items", [])
        if child_ns != meta["namespace"]:
            events += client.api.get(resources.collection_path("Event", child_ns), "list events").get("items", [])
    except NotFound:
        pass
    except Forbidden as exc:
        forbidden["events.txt"] = exc
    return events
