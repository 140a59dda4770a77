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
import warnings
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutbatch import GROUP, PLURAL, POOL_KIND, POOL_PLURAL, VERSION
from rolloutbatch.core import naming
from rolloutbatch.core.k8s_rules import InvalidName, check_namespace_name, is_dns_subdomain
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import STOP_FIELD, stop_requested
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.vocabulary import TERMINAL_PHASES
from rolloutbatch.kube import resources
from rolloutbatch.core.pool_conversion import manifest_conflict
from rolloutbatch.core.pools import DELETING_MESSAGE
from rolloutbatch.kube.errors import (BadRequest, Conflict, Forbidden, Invalid, KubeError, NotFound, TooLarge,
                                      Unavailable)
from rolloutbatch.sdk.build import LABEL_INPUTS_TOKEN, checked_batch, owner_reference, plan_inputs, with_pool
from rolloutbatch.sdk.timeouts import checked_timeout

INSTALL_HINT = "the RolloutBatch CRD is not installed: kubectl apply -k manifests/default"
POOL_INSTALL_HINT = "the RolloutPool CRD is not installed: kubectl apply -k manifests/default"
INSTALL_HINTS = {PLURAL: INSTALL_HINT, POOL_PLURAL: POOL_INSTALL_HINT}


class CRDNotInstalled(KubeError):
    """The cluster does not serve rl.agentruntime.io/v1alpha1 RolloutBatches."""


class ResultsNotReady(KubeError):
    """The batch has no results ConfigMap yet (still running, or it was deleted), or none that
    the batch's status vouches for (``status.resultsDigests``)."""


class ResultsIncomplete(ResultsNotReady):
    """The head of a sharded batch is the operator's, but shards it lists are gone or not what the
    operator wrote (``shards`` names them): ``results()`` raises this rather than return part of
    the rows; ``document()`` returns the rest, naming them in ``missing_shards``."""

    def __init__(self, message: str, *, shards: list[str] | None = None) -> None:
        super().__init__(message)
        self.shards = list(shards or [])


class InvalidBatch(Invalid):
    """The API refused the RolloutBatch itself: an unknown or duplicate field under strict field
    validation (``unknown_fields``), the schema or a CEL rule. The message is the API's."""


class InvalidPool(Invalid):
    """The API refused the RolloutPool itself (strict field validation, the schema, a CEL rule
    such as size <= maxSize). The message is the API's."""


class PoolStalled(KubeError):
    """wait_pool: the pool's pods cannot run (its Stalled condition: an image that cannot be
    pulled, a RuntimeClass missing, a prepare that fails); its reason and message are said."""


def close(op: Op) -> None:
    """An op its driver leaves (a cancellation, an interrupt, any error not its own) runs its
    ``finally`` blocks now, not whenever the garbage collector closes it: a session's end()
    cancelled mid-way must leave it endable at once (sdk.session_commands). One that would go on
    (a cleanup that needs more calls) cannot, as before."""
    try:
        op.close()
    except RuntimeError:   # it yielded a call on GeneratorExit
        pass


@dataclass
class Call:
    method: str                       # a method of kube.client.Api (or sdk.aio.AsyncApi)
    args: tuple
    kwargs: dict = field(default_factory=dict)
    # Run by the driver when it leaves this call unanswered (a cancellation, an interrupt, an
    # error not the API's), its own errors ignored: the op that stops the work the call began in
    # a sandbox, which closing the call's stream leaves running.
    abandoned: Op | None = None


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
    stalled = (condition(status, v.CONDITION_STALLED) or {}).get("status") == v.CONDITION_TRUE
    return status.get("phase") in TERMINAL_PHASES or stalled


def is_succeeded(status: Mapping | None) -> bool:
    return (status or {}).get("phase") == v.SUCCEEDED


def crd_installed(plural: str = PLURAL) -> Op:
    """Whether the cluster serves ``plural`` of our group (the RolloutBatch CRD may be installed
    without the RolloutPool one)."""
    try:
        found = yield Call("get", (f"/apis/{GROUP}/{VERSION}", f"discover {GROUP}/{VERSION}"))
    except NotFound:
        return False
    return any(r.get("name") == plural for r in found.get("resources") or [])


def not_found(what: str, plural: str = PLURAL) -> Op:
    """A 404's meaning: the object is missing, or its CRD is not installed (said with the fix)."""
    if not (yield from crd_installed(plural)):
        return CRDNotInstalled(INSTALL_HINTS[plural], status=404, reason="NotFound")
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


def refused(exc: KubeError) -> bool:
    """Whether the API answered a create with a refusal, so that nothing was created: a 4xx, or
    etcd's "too large" (which may come as a 5xx). No answer, another 5xx or a timeout may hide a
    create that was stored."""
    return isinstance(exc, TooLarge) or (exc.status is not None and 400 <= exc.status < 500)


# Pauses before the tries of making the batch the owner of an input ConfigMap again (Unavailable,
# Conflict): the batch exists by then, and a submit retried by its caller would make a second one.
OWNER_PATCH_PAUSES = (0.5, 1.0, 2.0, 4.0)


def _created_unanswered(body: Mapping, namespace: str, token: str) -> Op:
    """The batch of ``body`` when its create went unanswered yet was stored, else None. Found by
    the inputs' token it carries (``LABEL_INPUTS_TOKEN``; a generateName has no name to get)."""
    try:
        found = yield Call("get", (resources.collection_path("RolloutBatch", namespace), "list RolloutBatches"),
                           {"labelSelector": f"{LABEL_INPUTS_TOKEN}={token}"})
    except KubeError:
        return None
    names = (body.get("spec") or {}).get("inputsFrom", {}).get("configMaps")
    return next((item for item in found.get("items") or []
                 if (item.get("spec") or {}).get("inputsFrom", {}).get("configMaps") == names), None)


def _own(configmap: dict, owner: dict, namespace: str) -> Op:
    """Make the batch ``owner`` the owner of an input ConfigMap; retried on Unavailable and
    Conflict. False when it still failed: the ConfigMap stays, labelled, as when the SDK dies."""
    name = configmap["metadata"]["name"]
    error = None
    for pause in (0.0, *OWNER_PATCH_PAUSES):
        if pause:
            yield Sleep(pause)
        try:
            yield Call("merge_patch", (resources.object_path("ConfigMap", name, namespace),
                                       {"metadata": {"ownerReferences": [owner]}},
                                       f"make ConfigMap {namespace}/{name} owned by the batch"))
            return True
        except KubeError as exc:
            error = exc
            if not isinstance(exc, (Unavailable, Conflict)):
                break
    warnings.warn(f"RolloutBatch {namespace}/{owner['name']} was created, but its input ConfigMap {name} could not "
                  f"be made owned by it ({error}): it stays when the batch is deleted (labelled "
                  f"{LABEL_INPUTS_TOKEN}={configmap['metadata']['labels'][LABEL_INPUTS_TOKEN]}); delete it by hand",
                  RuntimeWarning)
    return False


def submit(batch: Mapping, namespace: str) -> Op:
    """Create the batch; large inputs first become ConfigMaps (``spec.inputsFrom``) that the
    created batch then owns. A refused batch leaves none of them behind. A create that went
    unanswered (Unavailable: the batch may have been stored) keeps them: the batch found by their
    token is returned, else Unavailable says they were kept. A batch that exists is returned even
    when some of them could not be made its own (a warning names them): submitting again would
    make a second batch."""
    namespace = (checked_batch(batch).get("metadata") or {}).get("namespace") or namespace
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
    except BaseException:
        yield from _delete_configmaps(created)
        raise
    try:
        obj = yield from create(body, namespace)
    except KubeError as exc:
        if refused(exc):
            yield from _delete_configmaps(created)
            raise
        token = body["metadata"]["labels"][LABEL_INPUTS_TOKEN]
        obj = yield from _created_unanswered(body, namespace, token)
        if obj is None:
            raise Unavailable(f"{exc}; the batch may have been created: its input ConfigMaps were kept, labelled "
                              f"{LABEL_INPUTS_TOKEN}={token} as the batch would be (kubectl get rolloutbatches,"
                              f"configmaps -l {LABEL_INPUTS_TOKEN}={token})", status=exc.status,
                              reason=exc.reason) from exc
    owner = owner_reference(obj)
    for cm in created:
        yield from _own(cm, owner, namespace)
    return obj


def submit_on_pool(batch: Mapping, pool: str, namespace: str) -> Op:
    """:func:`submit` of ``batch`` as it runs on the RolloutPool ``pool`` (``sdk.build.with_pool``:
    the pool's own fields left out), once what it names (image, task files, resources, ...) is
    found to be the pool's, as ``rolloutbatch submit --pool`` does: otherwise its episodes would
    silently run the pool's task on the pool's image (ValueError, before anything is created). A
    pool not there is NotFound, before anything is created (the operator would fail the batch at
    once, PoolNotFound), unless the batch waits for its pool (``poolRef.whenEmpty: Wait``, which
    waits for a pool made after it too); one not ours to read leaves the word to the operator; a
    cluster without the RolloutPool CRD is CRDNotInstalled (:func:`get_pool`)."""
    pooled = with_pool(checked_batch(batch), pool)
    namespace = (batch.get("metadata") or {}).get("namespace") or namespace
    try:
        live = yield from get_pool(pool, namespace)
    except NotFound as exc:
        if not waits_for_its_pool(pooled):
            raise NotFound(missing_pool(namespace, pool), status=exc.status, reason=exc.reason) from None
        live = None
    except Forbidden:
        live = None
    problem = live and manifest_conflict(batch.get("spec") or {}, live.get("spec") or {})
    if problem:
        name = (batch.get("metadata") or {}).get("name") or (batch.get("metadata") or {}).get("generateName", "")
        raise ValueError(f"RolloutBatch {namespace}/{name} on RolloutPool {pool}: {problem}")
    return (yield from submit(pooled, namespace))


def waits_for_its_pool(batch: Mapping) -> bool:
    """Whether a pooled batch waits for its pool (``spec.poolRef.whenEmpty: Wait``), one not made
    yet too; otherwise the operator fails it at once when the pool is not there (PoolNotFound)."""
    ref = (batch.get("spec") or {}).get("poolRef")
    return isinstance(ref, Mapping) and ref.get("whenEmpty") == v.POOL_WAIT


def missing_pool(namespace: str, pool: str) -> str:
    """Why a batch is not submitted on a pool that does not exist, and the fixes."""
    return (f"RolloutPool {namespace}/{pool} not found: create it first (rolloutbatch pool create, kubectl apply), "
            "or set spec.poolRef.whenEmpty: Wait to have the batch wait for it")


def client_namespace(given: str | None, config: Any) -> str:
    """A client's namespace: ``given`` when it can name one, else InvalidName ("" is a script's
    unset variable, never taken for the kubeconfig's, as namespace_of does per call); not given,
    the kubeconfig context's, or "default" where it has none (an empty or null one too, as
    kubectl reads it) and on an API given by hand."""
    if given is not None:
        return check_namespace_name(given)
    return (config.namespace if config is not None else None) or "default"


def namespace_of(given: str | None, default: str) -> str:
    """The namespace a call was given, else the client's. Only None means "not given": "" (a
    script's unset variable) goes on to be refused (kube.resources.collection_path), never taken
    for the client's namespace."""
    return default if given is None else given


def object_name(name: object, kind: str) -> str:
    """``name`` when it names one object, else ValueError before any call: the API server reads
    ``rolloutpools/`` (an empty name: a script's unset variable) as the collection, where a DELETE
    deletes every pool of the namespace, and a client may resolve ``..`` to the namespace itself."""
    if not is_dns_subdomain(name):
        raise InvalidName(f"{name!r} is not a {kind} name (a DNS subdomain: lowercase letters, digits, '-' and '.', "
                         "at most 253 characters)")
    assert isinstance(name, str)
    return name


def get(name: str, namespace: str) -> Op:
    object_name(name, "RolloutBatch")
    try:
        return (yield Call("get", (resources.object_path("RolloutBatch", name, namespace),
                                   f"get RolloutBatch {namespace}/{name}")))
    except NotFound:
        raise (yield from not_found(f'rolloutbatch "{name}" not found in namespace {namespace}')) from None


def not_a_namesake(batch: Mapping, live: dict) -> dict:
    """``live``, the object that has ``batch``'s name now, when it is ``batch``; NotFound when it
    is a namesake (``batch`` was deleted and another made with its name: another uid)."""
    meta, uid = batch["metadata"], (live.get("metadata") or {}).get("uid")
    if uid != meta.get("uid"):
        raise NotFound(f'rolloutbatch "{meta["name"]}" in namespace {meta["namespace"]} was replaced by a namesake '
                       f'(uid {meta.get("uid")} -> {uid})', status=404, reason="NotFound")
    return live


def list_(namespace: str, all_namespaces: bool = False) -> Op:
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}" if all_namespaces else resources.collection_path("RolloutBatch", namespace)
    try:
        return (yield Call("get", (path, "list RolloutBatches"))).get("items", [])
    except NotFound:
        raise (yield from not_found("RolloutBatches not found")) from None


def stop(batch: Mapping) -> Op:
    """Ask a batch to stop (``spec.stop: true``, UID precondition); returns the object. A batch
    that already ended is left as it is: nothing to stop, and its verdict stands."""
    meta = batch["metadata"]
    live = not_a_namesake(batch, (yield from get(meta["name"], meta["namespace"])))
    if (live.get("status") or {}).get("phase") in TERMINAL_PHASES or stop_requested(live.get("spec")):
        return live
    return (yield Call("merge_patch", (resources.object_path("RolloutBatch", meta["name"], meta["namespace"]),
                                       {"metadata": {"uid": meta["uid"]}, "spec": {STOP_FIELD: True}},
                                       f"stop RolloutBatch {meta['namespace']}/{meta['name']}")))



def sandbox_namespace(batch: Mapping) -> str | None:
    """The batch's own sandbox namespace (Dedicated isolation), None when it shares its namespace
    or runs on a pool's pods (``spec.poolRef``: they live in the pool's namespace, which is not
    the batch's to delete; :func:`pods_namespace`).

    From the status, else the deterministic name: the status may not name it yet (read just
    after submit) or any more (removed once the sandbox was deleted).
    """
    meta = batch["metadata"]
    if pool_of(batch) is not None:
        return None
    ns = (batch.get("status") or {}).get("sandboxNamespace")
    if ns:
        return None if ns == meta["namespace"] else ns
    spec = batch.get("spec") or {}
    isolation = (spec.get("isolation") or {}).get("namespace") or v.ISOLATION_MODES[0]   # unset: the default
    if isolation != v.ISOLATION_DEDICATED or not meta.get("uid"):
        return None
    return naming.sandbox_namespace(BatchRef(meta["namespace"], meta["name"], meta["uid"]))


def pool_of(batch: Mapping) -> str | None:
    """The RolloutPool a batch runs on (``spec.poolRef.name``), None for a batch of its own pods."""
    ref = (batch.get("spec") or {}).get("poolRef")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) and name else None


def pods_namespace(batch: Mapping) -> str:
    """Where the batch's episode pods are (were): its sandbox namespace, its pool's for a batch
    on a pool, else its own namespace."""
    meta = batch["metadata"]
    pool = pool_of(batch)
    if pool is not None:
        return naming.pool_namespace(meta["namespace"], pool)
    return sandbox_namespace(batch) or meta["namespace"]


def namespace_exists(name: str, uid: str | None = None) -> Op:
    try:
        live = yield Call("get", (resources.object_path("Namespace", name), f"get Namespace {name}"))
    except NotFound:
        return False
    labels = live.get("metadata", {}).get("labels") or {}
    return uid is None or labels.get(naming.LABEL_BATCH_UID) == uid


def delete(batch: Mapping, *, wait: bool = True, timeout: float = 300, interval: float = 1.0) -> Op:
    """Delete a batch (UID precondition); with ``wait``, until it and its sandbox namespace are gone.
    A user who may not read Namespaces (cluster-scoped: the README's editor and viewer roles) waits
    for the batch alone: its finalizer removes the sandbox before the batch goes."""
    checked_timeout(timeout, zero_ok=True)
    checked_timeout(interval, zero_ok=True, name="interval")
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
        try:
            sandbox_gone = sandbox is None or not (yield from namespace_exists(sandbox, meta["uid"]))
        except Forbidden:
            sandbox, sandbox_gone = None, True   # cannot tell: the batch's being gone answers
        if batch_gone and sandbox_gone:
            return
        if time.monotonic() >= deadline:
            what = f"RolloutBatch {meta['namespace']}/{meta['name']}" if not batch_gone \
                else f"sandbox namespace {sandbox}"
            hint = " (its finalizer needs the operator: is it running?)" if not batch_gone else ""
            raise TimeoutError(f"{what} still exists after {timeout:g}s{hint}")
        yield Sleep(interval)


# --- warm pools (RolloutPool, docs/design.md §5.17) ------------------------------------------------
def pools_path(namespace: str | None) -> str:
    """The RolloutPools of ``namespace`` (None: of every namespace)."""
    return resources.collection_path(POOL_KIND, namespace) if namespace is not None \
        else f"/apis/{GROUP}/{VERSION}/{POOL_PLURAL}"


def create_pool(pool: Mapping, namespace: str, *, dry_run: bool = False) -> Op:
    body = copy.deepcopy(dict(pool))
    meta = body.setdefault("metadata", {})
    namespace = meta.setdefault("namespace", namespace)
    what = f"create {POOL_KIND} {namespace}/{meta.get('name')}"
    try:
        return (yield Call("create", (pools_path(namespace), body, what), {"dry_run": dry_run}))
    except NotFound:
        raise (yield from not_found(f"namespace {namespace} not found", POOL_PLURAL)) from None
    except (Invalid, BadRequest) as exc:
        raise InvalidPool(str(exc), status=exc.status, reason=exc.reason,
                          unknown_fields=getattr(exc, "unknown_fields", ())) from None


def get_pool(name: str, namespace: str) -> Op:
    object_name(name, POOL_KIND)
    try:
        return (yield Call("get", (f"{pools_path(namespace)}/{name}", f"get {POOL_KIND} {namespace}/{name}")))
    except NotFound:
        raise (yield from not_found(f'rolloutpool "{name}" not found in namespace {namespace}', POOL_PLURAL)) from None


def list_pools(namespace: str, all_namespaces: bool = False) -> Op:
    try:
        return (yield Call("get", (pools_path(None if all_namespaces else namespace), "list RolloutPools"))).get(
            "items", [])
    except NotFound:
        raise (yield from not_found("RolloutPools not found", POOL_PLURAL)) from None


def scale_pool(name: str, namespace: str, size: int) -> Op:
    """Set ``spec.size`` (what ``kubectl scale rp/NAME --replicas=N`` sets); the object. The API
    refuses a size above ``spec.maxSize`` (InvalidPool)."""
    object_name(name, POOL_KIND)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"size must be a non-negative integer, got {size!r}")
    try:
        return (yield Call("merge_patch", (f"{pools_path(namespace)}/{name}", {"spec": {"size": size}},
                                           f"scale {POOL_KIND} {namespace}/{name} to {size}")))
    except NotFound:
        raise (yield from not_found(f'rolloutpool "{name}" not found in namespace {namespace}', POOL_PLURAL)) from None
    except Invalid as exc:
        raise InvalidPool(str(exc), status=exc.status, reason=exc.reason) from None


def wait_pool(name: str, namespace: str, *, timeout: float = 300, interval: float = 1.0) -> Op:
    """The pool once it is Ready for its current spec (``spec.size`` pods warm: its Ready
    condition, for the generation its status observed, so a pool just scaled is not taken for
    ready by its old status). PoolStalled when its pods cannot run; TimeoutError after ``timeout``
    with what it says; NotFound when there is none."""
    checked_timeout(timeout, zero_ok=True)
    checked_timeout(interval, zero_ok=True, name="interval")
    deadline = time.monotonic() + timeout
    while True:
        live = yield from get_pool(name, namespace)
        status = live.get("status") or {}
        current = status.get("observedGeneration") == live["metadata"].get("generation")
        conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
        stalled = conditions.get(v.CONDITION_STALLED) or {}
        if current and (conditions.get(v.CONDITION_READY) or {}).get("status") == v.CONDITION_TRUE:
            return live
        if current and stalled.get("status") == v.CONDITION_TRUE:
            raise PoolStalled(f"{POOL_KIND} {namespace}/{name} cannot fill: {stalled.get('reason')}: "
                              f"{str(stalled.get('message') or '')[:1000]}", reason=str(stalled.get("reason")))
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{POOL_KIND} {namespace}/{name} not ready after {timeout:g}s (it says: "
                               f"{str(status.get('message') or 'nothing yet: is the operator running?')[:500]})")
        yield Sleep(interval)


def delete_pool(name: str, namespace: str, *, wait: bool = True, timeout: float = 300, interval: float = 1.0,
                on_waiting: Callable[[str], None] | None = None) -> Op:
    """Delete a pool (the operator removes its warm pods and namespace); with ``wait``, until the
    object is gone. The pool read first is the one deleted (UID precondition): a namesake created
    meanwhile is never touched. NotFound when there is none. ``on_waiting(message)`` hears what the
    operator says the deletion waits for (batches that run on its pods), each time it changes."""
    checked_timeout(timeout, zero_ok=True)
    checked_timeout(interval, zero_ok=True, name="interval")
    live = yield from get_pool(name, namespace)
    uid = live["metadata"].get("uid")
    path = f"{pools_path(namespace)}/{name}"
    try:
        yield Call("delete", (path, f"delete {POOL_KIND} {namespace}/{name}",
                              {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}))
    except (NotFound, Conflict):
        return   # gone already, or replaced by a namesake that must not be touched
    deadline, heard = time.monotonic() + timeout, ""
    while wait:
        try:
            live = yield Call("get", (path, f"get {POOL_KIND} {namespace}/{name}"))
        except NotFound:
            return
        if live["metadata"].get("uid") != uid:
            return
        # what the operator says it waits for (batches on its pods), when it said anything
        said = str((live.get("status") or {}).get("message") or "")
        if on_waiting is not None and said.startswith(DELETING_MESSAGE) and said != heard:
            heard = said
            on_waiting(said[:1000])
        if time.monotonic() >= deadline:
            why = f"the pool says: {said[:500]}" if said.startswith(DELETING_MESSAGE) else \
                "its finalizer needs the operator: is it running?"
            raise TimeoutError(f"{POOL_KIND} {namespace}/{name} still exists after {timeout:g}s ({why})")
        yield Sleep(interval)
