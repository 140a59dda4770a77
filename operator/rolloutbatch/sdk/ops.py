"""The SDK's verbs as sans-IO generators: each yields the API calls it needs and gets answers.

One implementation of every rule (where inputs go, what a 404 means, how a sandbox is waited
for, how sharded results are read) for both clients: :class:`~rolloutbatch.sdk.client.Client`
runs a generator with the blocking ``kube.client.Api``, ``AsyncClient`` with the aiohttp one
(``sdk.aio``). A generator yields :class:`Call` (a method of the API layer: ``get``,
``create``, ``merge_patch``, ``delete``; the answer is sent back, a ``KubeError`` thrown in)
or :class:`Sleep`, and returns its result.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutbatch import GROUP, PLURAL, VERSION
from rolloutbatch.core import naming
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.result_shards import assemble
from rolloutbatch.core.results import decode_results, recorded_by_operator
from rolloutbatch.core.spec import ISOLATION_NAMESPACE
from rolloutbatch.core.vocabulary import TERMINAL_PHASES
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import BadRequest, Conflict, Invalid, KubeError, NotFound
from rolloutbatch.sdk.build import owner_reference, plan_inputs

INSTALL_HINT = "the RolloutBatch CRD is not installed: kubectl apply -k manifests/default"


class CRDNotInstalled(KubeError):
    """The cluster does not serve rl.agentruntime.io/v1alpha1 RolloutBatches."""


class ResultsNotReady(KubeError):
    """The batch has no results ConfigMap yet (still running, or it was deleted), or none that
    the batch's status vouches for (``status.resultsDigests``)."""


class InvalidBatch(Invalid):
    """The API refused the RolloutBatch itself: an unknown or duplicate field under strict field
    validation (``unknown_fields``), the schema or a CEL rule. The message is the API's."""


@dataclass
class Call:
    method: str                       # a method of kube.client.Api (or sdk.aio.AsyncApi)
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass
class Sleep:
    seconds: float


Op = Generator[Any, Any, Any]


def condition(status: Mapping | None, type_: str) -> dict | None:
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def is_finished(status: Mapping | None) -> bool:
    status = status or {}
    stalled = (condition(status, "Stalled") or {}).get("status") == "True"
    return status.get("phase") in TERMINAL_PHASES or stalled


def is_succeeded(status: Mapping | None) -> bool:
    return (status or {}).get("phase") == "Succeeded"


def crd_installed() -> Op:
    try:
        yield Call("get", (f"/apis/{GROUP}/{VERSION}", "discover RolloutBatch API"))
    except NotFound:
        return False
    return True


def not_found(what: str) -> Op:
    if not (yield from crd_installed()):
        return CRDNotInstalled(INSTALL_HINT, status=404, reason="NotFound")
    return NotFound(what, status=404, reason="NotFound")


def create(batch: Mapping, namespace: str, *, dry_run: bool = False) -> Op:
    body = copy.deepcopy(dict(batch))
    meta = body.setdefault("metadata", {})
    namespace = meta.setdefault("namespace", namespace)
    what = f"create RolloutBatch {namespace}/{meta.get('name') or meta.get('generateName', '')}"
    try:
        return (yield Call("create", (resources.collection_path("RolloutBatch", namespace), body, what),
                           {"dry_run": dry_run}))
    except NotFound:
        raise (yield from not_found(f"namespace {namespace} not found")) from None
    except (Invalid, BadRequest) as exc:
        # 422 (schema, CEL) or 400 (strict field validation, undecodable): the batch itself.
        raise InvalidBatch(str(exc), status=exc.status, reason=exc.reason,
                           unknown_fields=getattr(exc, "unknown_fields", ())) from None


def _delete_configmaps(configmaps: list[dict]) -> Op:
    for cm in configmaps:
        meta = cm["metadata"]
        try:
            yield Call("delete", (resources.object_path("ConfigMap", meta["name"], meta["namespace"]),
                                  f"delete ConfigMap {meta['namespace']}/{meta['name']}",
                                  {"kind": "DeleteOptions", "apiVersion": "v1",
                                   "preconditions": {"uid": meta["uid"]}}))
        except KubeError:
            pass   # best effort: the refusal is what the caller must see


def submit(batch: Mapping, namespace: str) -> Op:
    """Create the batch; large inputs first become ConfigMaps (``spec.inputsFrom``) that the
    created batch then owns. A refused batch leaves none of them behind."""
    namespace = (batch.get("metadata") or {}).get("namespace") or namespace
    body, configmaps = plan_inputs(batch, namespace)
    if not configmaps:
        return (yield from create(body, namespace))
    # Checked completely before any ConfigMap exists (schema, CEL, admission), so a typo costs
    # no 8 MiB of uploads.
    yield from create(body, namespace, dry_run=True)
    created: list[dict] = []
    try:
        for cm in configmaps:
            created.append((yield Call("create", (resources.collection_path("ConfigMap", namespace), cm,
                                                  f"create ConfigMap {namespace}/{cm['metadata']['name']}"))))
        obj = yield from create(body, namespace)
    except BaseException:
        yield from _delete_configmaps(created)
        raise
    owner = owner_reference(obj)
    for cm in created:
        meta = cm["metadata"]
        yield Call("merge_patch", (resources.object_path("ConfigMap", meta["name"], namespace),
                                   {"metadata": {"ownerReferences": [owner]}},
                                   f"make ConfigMap {namespace}/{meta['name']} owned by the batch"))
    return obj


def get(name: str, namespace: str) -> Op:
    try:
        return (yield Call("get", (resources.object_path("RolloutBatch", name, namespace),
                                   f"get RolloutBatch {namespace}/{name}")))
    except NotFound:
        raise (yield from not_found(f'rolloutbatch "{name}" not found in namespace {namespace}')) from None


def list_(namespace: str, all_namespaces: bool = False) -> Op:
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}" if all_namespaces else resources.collection_path("RolloutBatch", namespace)
    try:
        return (yield Call("get", (path, "list RolloutBatches"))).get("items", [])
    except NotFound:
        raise (yield from not_found("RolloutBatches not found")) from None


def results_name(batch: Mapping) -> str:
    meta = batch["metadata"]
    return (batch.get("status") or {}).get("resultsConfigMap") or \
        naming.results_configmap_name(BatchRef(meta["namespace"], meta["name"], meta.get("uid", "")))


def shard_selector(uid: str) -> str:
    return f"{naming.LABEL_BATCH_UID}={uid},{naming.LABEL_EPISODE_ROLE}={naming.ROLE_RESULTS_SHARD}"


def list_configmaps(namespace: str, selector: str) -> Op:
    items: list[dict] = []
    params: dict[str, Any] = {"labelSelector": selector, "limit": 100}
    while True:
        page = yield Call("get", (resources.collection_path("ConfigMap", namespace), "list ConfigMaps"), params)
        items.extend(page.get("items") or [])
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return items
        params = dict(params, **{"continue": cont})


# Pauses between the reads of a batch's status while a results ConfigMap is not (yet) recorded:
# the operator patches the status right after each results write.
STATUS_REREADS = (0.0, 0.2, 0.5, 1.0, 2.0)


def _fresh_status(batch: Mapping) -> Op:
    """The batch's status read again (the results digests lag a results write by one call), or
    None when it is gone or was replaced by a namesake (whose digests say nothing of ours)."""
    meta = batch["metadata"]
    try:
        live = yield Call("get", (resources.object_path("RolloutBatch", meta["name"], meta["namespace"]),
                                  f"get RolloutBatch {meta['namespace']}/{meta['name']}"))
    except NotFound:
        return None
    if (live.get("metadata") or {}).get("uid") != meta.get("uid"):
        return None
    return live.get("status") or {}


def results_document(batch: Mapping) -> Op:
    """The whole results document: the head ConfigMap and, for a sharded batch, every shard
    (found by label), through ``core.result_shards.assemble``. Each ConfigMap is decoded by
    ``core.results.decode_results`` (gzip bombs, garbage); ``unreadable_shards`` names those that
    were not results of this batch.

    Anyone with ConfigMap rights in the namespace can write these ConfigMaps, labels included:
    one counts only if its digest is the one the batch's status records (``resultsDigests``,
    written by the operator alone). A head that is not raises ResultsNotReady; shards that are
    not are left out and named in ``unverified_shards``. The status lags each results write by
    one call (a final batch's too: the operator rewrites its results once more when the Job's
    end is seen), so the status is read again, a few times over about 4 s
    (``STATUS_REREADS``), before anything is refused."""
    meta = batch["metadata"]
    status = batch.get("status") or {}
    seen = [status.get("resultsDigests")]       # every status read: a digest any of them records is ours
    refreshed = False

    def recorded(cm: Mapping) -> bool:
        return any(recorded_by_operator(cm, digests) for digests in seen)

    def refresh(done: Callable[[], bool]) -> Op:
        nonlocal status, refreshed
        refreshed = True
        for delay in STATUS_REREADS:
            if delay:
                yield Sleep(delay)
            fresh = yield from _fresh_status(batch)
            if fresh is None:
                return
            status = fresh
            seen.append(fresh.get("resultsDigests"))
            if done():
                return

    name = results_name(batch)
    try:
        cm = yield Call("get", (resources.object_path("ConfigMap", name, meta["namespace"]), f"get ConfigMap {name}"))
    except NotFound:
        cm = None
    head = decode_results(cm) if cm else None
    if head is None:
        raise ResultsNotReady(f"RolloutBatch {meta['namespace']}/{meta['name']} has no results yet "
                              f"(ConfigMap {name}; phase {status.get('phase') or 'Pending'})")
    if not recorded(cm):
        yield from refresh(lambda: recorded(cm))
    if not recorded(cm):
        where = f"RolloutBatch {meta['namespace']}/{meta['name']}: results ConfigMap {name}"
        if is_finished(status):
            raise ResultsNotReady(f"{where} changed since the operator wrote it: its content is not what the "
                                  "batch's status records (status.resultsDigests); do not trust it")
        raise ResultsNotReady(f"{where} is not yet confirmed by the batch's status "
                              f"(phase {status.get('phase') or 'Pending'}), try again")
    if "shards" not in head:
        return head
    readable, unreadable = [], []
    for shard_cm in (yield from list_configmaps(meta["namespace"], shard_selector(meta["uid"]))):
        doc = decode_results(shard_cm)
        if doc is None or doc.get("uid") != meta["uid"]:
            unreadable.append(shard_cm["metadata"]["name"])
        else:
            readable.append((shard_cm, doc))
    if not refreshed and not all(recorded(c) for c, _ in readable):
        # a shard written since the status we hold
        yield from refresh(lambda: all(recorded(c) for c, _ in readable))
    docs = [doc for c, doc in readable if recorded(c)]
    unverified = [c["metadata"]["name"] for c, _ in readable if not recorded(c)]
    document = assemble(head, docs)
    if unreadable:
        document["unreadable_shards"] = sorted(unreadable)
    if unverified:
        document["unverified_shards"] = sorted(unverified)
    return document


def sandbox_namespace(batch: Mapping) -> str | None:
    """The batch's own sandbox namespace (Dedicated isolation), None when it shares its namespace.

    From the status, else the deterministic name: the status may not name it yet (read just
    after submit) or any more (removed once the sandbox was deleted).
    """
    meta = batch["metadata"]
    ns = (batch.get("status") or {}).get("sandboxNamespace")
    if ns:
        return None if ns == meta["namespace"] else ns
    isolation = ((batch.get("spec") or {}).get("isolation") or {}).get("namespace") or ISOLATION_NAMESPACE[0]
    if isolation != ISOLATION_NAMESPACE[0] or not meta.get("uid"):   # [0] is Dedicated, the default
        return None
    return naming.sandbox_namespace(BatchRef(meta["namespace"], meta["name"], meta["uid"]))


def namespace_exists(name: str, uid: str | None = None) -> Op:
    try:
        live = yield Call("get", (resources.object_path("Namespace", name), f"get Namespace {name}"))
    except NotFound:
        return False
    labels = live.get("metadata", {}).get("labels") or {}
    return uid is None or labels.get(naming.LABEL_BATCH_UID) == uid


def delete(batch: Mapping, *, wait: bool = True, timeout: float = 300, interval: float = 1.0) -> Op:
    """Delete a batch (UID precondition); with ``wait``, until it and its sandbox namespace are gone."""
    meta = batch["metadata"]
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}}
    try:
        yield Call("delete", (resources.object_path("RolloutBatch", meta["name"], meta["namespace"]),
                              f"delete RolloutBatch {meta['namespace']}/{meta['name']}", body))
    except (NotFound, Conflict):
        pass   # gone already, or replaced by a namesake that must not be touched
    if not wait:
        return
    sandbox = sandbox_namespace(batch)
    deadline = time.monotonic() + timeout
    while True:
        try:
            live = yield Call("get", (resources.object_path("RolloutBatch", meta["name"], meta["namespace"]),
                                      f"get RolloutBatch {meta['namespace']}/{meta['name']}"))
        except NotFound:
            live = None
        batch_gone = live is None or live["metadata"].get("uid") != meta["uid"]
        sandbox_gone = sandbox is None or not (yield from namespace_exists(sandbox, meta["uid"]))
        if batch_gone and sandbox_gone:
            return
        if time.monotonic() >= deadline:
            what = f"RolloutBatch {meta['namespace']}/{meta['name']}" if not batch_gone \
                else f"sandbox namespace {sandbox}"
            hint = " (its finalizer needs the operator: is it running?)" if not batch_gone else ""
            raise TimeoutError(f"{what} still exists after {timeout:g}s{hint}")
        yield Sleep(interval)
