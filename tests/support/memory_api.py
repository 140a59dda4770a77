"""An API server in memory, for the service layer's unit tests: ``kube.client.Api``'s methods
over a dict of objects, with the rules of the real one that the operator relies on.

- create: 409 AlreadyExists on a taken name; ``generateName`` completed with 5 random characters
  (drawn again while taken); 404 when the namespace is missing and 403 when it is
  terminating; ``uid``, ``resourceVersion``, ``creationTimestamp`` and ``generation`` assigned;
  ``dryRun`` stores nothing. A namespace carries the ``kubernetes.io/metadata.name`` label.
- replace (PUT): 409 Conflict when ``metadata.resourceVersion`` is not the live one.
- merge patch: RFC 7386; ``metadata.uid`` / ``resourceVersion`` in the patch are preconditions
  (409); the ``/status`` subresource changes status only, the object itself never its status.
- JSON patch: RFC 6902 (the ``jsonpatch`` library); a failed ``test`` is 422.
- delete: ``preconditions.uid`` (409); an object with finalizers gets a deletionTimestamp and
  goes when they are removed; a namespace takes everything in it; dependents whose owners are all
  gone are collected (the garbage collector), at once or on :meth:`collect_garbage` when
  ``gc_delay`` is set. ``propagationPolicy: Foreground``: the owner gets the
  ``foregroundDeletion`` finalizer, its dependents are deleted, and it goes once none with
  ``blockOwnerDeletion`` is left (a dependent's own finalizer holds it).
- list: label selectors (``k=v``, ``k!=v``, ``k``, ``!k``), the field selectors the operator uses,
  ``limit``/``continue`` pages, and the metadata-only list (``as=PartialObjectMetadataList``).
- pod logs (``raw(.../log)``) from :meth:`set_log`, cut at ``limitBytes``.
- pods/exec (``exec_in_pod``, a coroutine as on ``kube.client.Api``): the handler a test set with
  :meth:`set_exec` for the pod gets the command and stdin and returns the ``ExecResult``; the
  refusals are the real server's: 404 for a missing pod, 400 for an unscheduled pod, a container
  not in the pod, or no container named in a pod of several, 500 ``container not found`` for a
  pod that has ended. Output is cut at ``limit_bytes``; an async handler is bounded by ``timeout``
  (``TimedOut``); ``on_output`` hears the whole of each stream once, before the result returns. Recorded as a POST of ``.../pods/<name>/exec`` and in :attr:`execs`. (The
  real exec is a GET upgraded to a WebSocket, which RBAC checks as get and then as create on
  pods/exec: a Role needs both, which a POST here does not show.)
- pods/attach (``attach_to_pod``): the handler a test set with :meth:`set_attach` gets the
  container and the bytes written to its stdin, and returns once the container confirmed them or
  raises; the refusals are exec's. Recorded as a POST of ``.../pods/<name>/attach`` and in
  :attr:`attaches`.
- evictions (POST ``.../pods/<name>/eviction``): the pod gets the ``DisruptionTarget`` condition
  (reason ``EvictionByEvictionAPI``) and is deleted, as the real eviction does; a ``uid``
  precondition (409) is honoured; a pod already terminating is left as it is. There are no
  PodDisruptionBudgets here: a 429 is injected with :meth:`fail`.
- discovery: ``GET /apis/<group>/<version>`` lists the kinds served there (404 for any other).
- Leases (coordination.k8s.io/v1), for leader election: created once (409), replaced over the
  resourceVersion read (409 when stale), as any kind.

A watch is :meth:`subscribe`: a callback sees every change to an object of a kind, as a
``(type, object)`` pair. Faults are injected with :meth:`fail` (the next matching calls raise the
error the real client maps that HTTP status to); a writer racing the caller with
:meth:`meanwhile` (its writes land just before the next matching call).
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import inspect
import itertools
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

import jsonpatch

from rolloutbatch.kube.errors import TimedOut, Unavailable, classify
from rolloutbatch.kube.pod_exec import LIMIT_BYTES, ExecResult

# plural -> (kind, namespaced, has a status subresource)
KINDS = {
    "namespaces": ("Namespace", False, True),
    "configmaps": ("ConfigMap", True, False),
    "secrets": ("Secret", True, False),
    "serviceaccounts": ("ServiceAccount", True, False),
    "resourcequotas": ("ResourceQuota", True, True),
    "pods": ("Pod", True, True),
    "events": ("Event", True, False),
    "jobs": ("Job", True, True),
    "networkpolicies": ("NetworkPolicy", True, False),
    "rolloutbatches": ("RolloutBatch", True, True),
    "rolloutpools": ("RolloutPool", True, True),
    "priorityclasses": ("PriorityClass", False, False),
    "runtimeclasses": ("RuntimeClass", False, False),
    "servicecidrs": ("ServiceCIDR", False, False),
    "nodes": ("Node", False, True),
    "endpointslices": ("EndpointSlice", True, False),
    "leases": ("Lease", True, False),
    # Kueue's (its CRDs installed, as on the devcluster)
    "localqueues": ("LocalQueue", True, True),
    "workloads": ("Workload", True, True),
}
_PATH = re.compile(r"^/apis?/(?:[\w.-]+/)?v\w+(?:/namespaces/(?P<ns>[^/]+)(?=/))?/(?P<plural>[a-z]+)"
                   r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status|log|exec|attach|eviction))?$")

_DISCOVERY = re.compile(r"^(?P<base>/apis/[\w.-]+/v\w+)/?$")
FOREGROUND = "foregroundDeletion"
NAME_LABEL = "kubernetes.io/metadata.name"   # the API server labels every namespace with its name

Key = tuple[str, str | None, str]   # (plural, namespace, name)
# What a test's exec handler is: (command, stdin) -> ExecResult, or a coroutine of one.
ExecHandler = Callable[[list[str], bytes], Any]
AttachHandler = Callable[[str, bytes], Any]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(status: int, message: str, what: str):
    reasons = {404: "NotFound", 409: "Conflict", 403: "Forbidden", 422: "Invalid"}
    return classify(status, message, reasons.get(status, ""), what)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a mapping merges key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def selects(selector: str | None, labels: dict) -> bool:
    """Whether a label selector of the forms the operator writes matches ``labels``."""
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def fields_select(selector: str | None, obj: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if str(_field(obj, key)) == value:
                return False
        else:
            key, value = term.split("=", 1)
            if str(_field(obj, key)) != value:
                return False
    return True


class Response:
    """What ``Api.request``/``Api.raw`` return, as far as ``kube.resources`` reads it."""

    def __init__(self, body: Any = None, content: bytes = b"") -> None:
        self._body, self._content, self.closed = body, content, False

    def json(self) -> Any:
        return self._body

    def iter_content(self, chunk_size: int = 65536):
        for start in range(0, len(self._content), chunk_size):
            yield self._content[start:start + chunk_size]

    def close(self) -> None:
        self.closed = True


class MemoryApi:
    """``kube.client.Api`` over objects in memory (see the module docstring)."""

    url = "memory://"

    def __init__(self, *, gc_delay: bool = False) -> None:
        self.objects: dict[Key, dict] = {}
        self.logs: dict[tuple[str, str, str], bytes] = {}
        self.exec_handlers: dict[tuple[str, str | None], ExecHandler] = {}
        self.execs: list[tuple[str, str, str | None, list[str], bytes]] = []   # (ns, pod, container, command, stdin)
        self.attach_handlers: dict[tuple[str, str | None], AttachHandler] = {}
        self.attaches: list[tuple[str, str, str, bytes]] = []   # (ns, pod, container, stdin)
        self.opened_channels: list[MemoryChannel] = []            # open_attach's, in order
        self.calls: list[tuple[str, str]] = []
        self.gc_delay = gc_delay
        self._versions = itertools.count(1)
        self._faults: list[tuple[str, str | None, Callable[[str], bool], Exception, list[int]]] = []
        self._races: list[tuple[str, str | None, Callable[[str], bool], Callable[[], Any]]] = []
        self._subscribers: dict[str, list[Callable[[str, dict], None]]] = {}
        self._lock = threading.RLock()   # Storage runs each call in a worker thread

    # -- what a test arranges ------------------------------------------------------------------
    def put(self, obj: dict) -> dict:
        """Store an object as if created by someone else (no checks but the namespace's). A
        ``metadata.uid`` given is kept (the API server assigns its own to a create), so a test can
        arrange the object a fixed ``BatchRef`` names."""
        plural = _plural_of(obj["kind"])
        meta = obj["metadata"]
        path = _object_path(plural, meta["name"], meta.get("namespace"))
        return self._create(path.rsplit("/", 1)[0], obj, "put", uid=meta.get("uid"))

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        with self._lock:
            obj = self.objects.get((_plural_of(kind), namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, kind: str, namespace: str | None = None) -> list[dict]:
        plural = _plural_of(kind)
        with self._lock:
            return [copy.deepcopy(o) for (p, ns, _), o in sorted(self.objects.items(), key=lambda kv: kv[0][2])
                    if p == plural and (namespace is None or ns == namespace)]

    def set_log(self, namespace: str, pod: str, container: str, data: bytes) -> None:
        self.logs[(namespace, pod, container)] = data

    def set_exec(self, namespace: str, pod: str | None, handler: ExecHandler) -> None:
        """What an exec into ``pod`` (None: any pod of ``namespace`` without its own) does:
        ``handler(command, stdin)`` returns the ``ExecResult`` (or a coroutine of one), or raises."""
        self.exec_handlers[(namespace, pod)] = handler

    def set_attach(self, namespace: str, pod: str | None, handler: AttachHandler) -> None:
        """What an attach to ``pod`` (None: any pod of ``namespace`` without its own) does:
        ``handler(container, stdin)`` returns once the container confirmed (None, or a coroutine),
        or raises (``Unavailable``: the container ended first)."""
        self.attach_handlers[(namespace, pod)] = handler

    def subscribe(self, kind: str, callback: Callable[[str, dict], None]) -> None:
        """``callback(type, object)`` after every change to an object of ``kind`` (a watch)."""
        self._subscribers.setdefault(_plural_of(kind), []).append(callback)

    def fail(self, method: str, kind: str | None, error: Exception, *, times: int = 1,
             when: Callable[[str], bool] = lambda path: True) -> None:
        """The next ``times`` calls of ``method`` (GET, POST, PUT, PATCH, DELETE) on ``kind``
        (None: any) whose path passes ``when`` raise ``error``."""
        self._faults.append((method, _plural_of(kind) if kind else None, when, error, [times]))

    def meanwhile(self, method: str, kind: str | None, action: Callable[[], Any], *,
                  when: Callable[[str], bool] = lambda path: True) -> None:
        """Run ``action()`` (someone else's writes) just before the next call of ``method`` on
        ``kind`` whose path passes ``when`` is served: a race the caller loses."""
        self._races.append((method, _plural_of(kind) if kind else None, when, action))

    def collect_garbage(self) -> None:
        """Remove what the garbage collector and the namespace controller would by now."""
        with self._lock:
            self._collect()

    # -- kube.client.Api -----------------------------------------------------------------------
    def request(self, method: str, path: str, what: str, **kwargs: Any) -> Response:
        params = dict(kwargs.get("params") or {})
        if method != "GET":
            raise NotImplementedError(f"MemoryApi.request {method}")
        if path.endswith("/version"):
            return Response({"gitVersion": "v1.37.2"})
        if _DISCOVERY.match(path):
            return Response(self.get(path, what, **params))
        body = self.get(path, what, **params)
        if "PartialObjectMetadataList" in (kwargs.get("headers") or {}).get("Accept", ""):
            body = dict(body, items=[{"metadata": item["metadata"]} for item in body.get("items") or []])
        return Response(body)

    def request_json(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        return self.request(method, path, what, **kwargs).json()

    def get(self, path: str, what: str, **params: Any) -> dict:
        discovery = _DISCOVERY.match(path)
        if discovery:
            return self._discover(path, discovery["base"], what)
        plural, ns, name, sub = self._route("GET", path, what)
        with self._lock:
            if name is None:
                return self._list(plural, ns, params)
            return copy.deepcopy(self._live(plural, ns, name, what))

    def create(self, path: str, body: dict, what: str, *, dry_run: bool = False) -> dict:
        if path.endswith("/eviction"):
            return self._evict(path, body, what)
        return self._create(path, body, what, dry_run=dry_run)

    def _create(self, path: str, body: dict, what: str, *, dry_run: bool = False, uid: str | None = None) -> dict:
        plural, ns, name, _ = self._route("POST", path, what)
        assert name is None, f"create at an object's path {path}"
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        kind, namespaced, _ = KINDS[plural]
        ns = ns if namespaced else None
        if "name" not in meta and meta.get("generateName"):
            # the server's 5 random characters, drawn again while taken (as an API server since
            # Kubernetes 1.31 does: RetryGenerateName)
            while True:
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                if (plural, ns, meta["name"]) not in self.objects:
                    break
        name = meta["name"]
        with self._lock:
            if namespaced:
                namespace = self.objects.get(("namespaces", None, ns))
                if namespace is None:
                    raise _error(404, f'namespaces "{ns}" not found', what)
                if namespace["metadata"].get("deletionTimestamp"):
                    raise _error(403, f"unable to create new content in namespace {ns} because it is being "
                                      "terminated", what)
            if (plural, ns, name) in self.objects:
                raise _error(409, f'{plural} "{name}" already exists', what)
            obj["kind"] = kind
            if namespaced:
                meta["namespace"] = ns
            if dry_run:
                return obj
            meta.update(uid=uid or str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            meta.pop("deletionTimestamp", None)
            if plural == "namespaces":
                obj.setdefault("status", {})["phase"] = "Active"
                meta.setdefault("labels", {})[NAME_LABEL] = name
            self._store(plural, ns, name, obj, "ADDED")
            return copy.deepcopy(obj)

    def replace(self, path: str, body: dict, what: str) -> dict:
        plural, ns, name, sub = self._route("PUT", path, what)
        with self._lock:
            live = self._live(plural, ns, name, what)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != live["metadata"]["resourceVersion"]:
                raise _error(409, f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                                  "modified; please apply your changes to the latest version and try again", what)
            new = copy.deepcopy(body)
            self._keep_server_fields(plural, live, new, sub)
            return self._changed(plural, ns, name, live, new)

    def merge_patch(self, path: str, patch: dict, what: str) -> dict:
        plural, ns, name, sub = self._route("PATCH", path, what)
        with self._lock:
            live = self._live(plural, ns, name, what)
            self._check_preconditions(plural, name, live, patch.get("metadata") or {}, what)
            new = merge_patch(live, patch)
            self._keep_server_fields(plural, live, new, sub)
            return self._changed(plural, ns, name, live, new)

    def json_patch(self, path: str, ops: list, what: str) -> dict:
        plural, ns, name, sub = self._route("PATCH", path, what)
        with self._lock:
            live = self._live(plural, ns, name, what)
            try:
                new = jsonpatch.apply_patch(live, ops)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise _error(422, f"the server rejected our request due to an error in our request: {exc}",
                             what) from None
            self._keep_server_fields(plural, live, new, sub)
            return self._changed(plural, ns, name, live, new)

    def delete(self, path: str, what: str, body: dict | None = None) -> dict:
        plural, ns, name, _ = self._route("DELETE", path, what)
        with self._lock:
            live = self._live(plural, ns, name, what)
            self._check_preconditions(plural, name, live, (body or {}).get("preconditions") or {}, what)
            self._delete(plural, ns, name, foreground=(body or {}).get("propagationPolicy") == "Foreground")
            if not self.gc_delay:
                self._collect()
            return {"kind": "Status", "status": "Success"}

    def raw(self, path: str, what: str, *, timeout: Any = None, **params: Any) -> Response:
        plural, ns, name, sub = self._route("GET", path, what)
        assert plural == "pods" and sub == "log", f"raw GET of {path}"
        with self._lock:
            self._live(plural, ns, name, what)
        data = self.logs.get((ns, name, params.get("container") or ""), b"")
        limit = params.get("limitBytes")
        return Response(content=data[:limit] if limit else data)

    async def exec_in_pod(self, namespace: str, pod: str, container: str | None, command: list[str], *,
                          stdin: bytes = b"", timeout: float, limit_bytes: int = LIMIT_BYTES,
                          on_output: Callable[[str, bytes], None] | None = None) -> ExecResult:
        what = f"exec in pod {namespace}/{pod}" + (f" container {container}" if container else "")
        assert command, "exec needs a command"
        handler = self._stream_handler("exec", self.exec_handlers, namespace, pod, container, what)
        self.execs.append((namespace, pod, container, list(command), stdin))
        result = handler(list(command), stdin)
        if inspect.isawaitable(result):
            try:
                result = await asyncio.wait_for(result, timeout)
            except asyncio.TimeoutError:
                raise TimedOut(f"{what}: no exit status within {timeout:g}s") from None
        assert isinstance(result, ExecResult), f"an exec handler returns an ExecResult, not {result!r}"
        for stream, data in (("stdout", result.stdout), ("stderr", result.stderr)):
            if on_output is not None and data:
                on_output(stream, data)
        return dataclasses.replace(result, stdout=result.stdout[:limit_bytes], stderr=result.stderr[:limit_bytes],
                                   stdout_truncated=result.stdout_truncated or len(result.stdout) > limit_bytes,
                                   stderr_truncated=result.stderr_truncated or len(result.stderr) > limit_bytes)

    async def attach_to_pod(self, namespace: str, pod: str, container: str, data: bytes, *, ack: bytes,
                            timeout: float, hello: tuple[bytes, bytes] | None = None) -> None:
        what = f"attach to pod {namespace}/{pod} container {container}"
        handler = self._stream_handler("attach", self.attach_handlers, namespace, pod, container, what)
        self.attaches.append((namespace, pod, container, data))
        result = handler(container, data)
        if inspect.isawaitable(result):
            try:
                await asyncio.wait_for(result, timeout)
            except asyncio.TimeoutError:
                raise TimedOut(f"{what}: the container did not confirm its input within {timeout:g}s") from None

    async def open_attach(self, namespace: str, pod: str, container: str, *, ack: bytes, timeout: float,
                          hello: tuple[bytes, bytes] | None = None, keepalive: float | None = None) -> "MemoryChannel":
        """An attach kept open (kube.pod_attach.AttachChannel): the pod's attach handler is
        called when it delivers; refused at once as the real server refuses."""
        what = f"attach to pod {namespace}/{pod} container {container}"
        self._stream_handler("attach", self.attach_handlers, namespace, pod, container, what)
        channel = MemoryChannel(self, namespace, pod, container)
        self.opened_channels.append(channel)
        return channel

    def _stream_handler(self, sub: str, handlers: dict, namespace: str, pod: str, container: str | None,
                        what: str) -> Any:
        """pods/exec or pods/attach: the call recorded, the real server's refusals, the test's handler."""
        self._route("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/{sub}", what)
        with self._lock:
            live = copy.deepcopy(self._live("pods", namespace, pod, what))
        self._exec_refusal(live, container, what)
        handler = handlers.get((namespace, pod)) or handlers.get((namespace, None))
        assert handler is not None, f"MemoryApi: no {sub} handler for pod {namespace}/{pod} (set_{sub})"
        return handler

    # -- the rules -----------------------------------------------------------------------------
    @staticmethod
    def _exec_refusal(pod: dict, container: str | None, what: str) -> None:
        """The real server's answers to an exec into a pod that cannot take one."""
        name = pod["metadata"]["name"]
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        names = [c.get("name") for c in spec.get("containers") or []]
        scheduled = spec.get("nodeName") or any(c.get("type") == "PodScheduled" and c.get("status") == "True"
                                                for c in status.get("conditions") or [])
        if not scheduled:
            raise _error(400, f"pod {name} does not have a host assigned", what)
        if container is None and len(names) > 1:
            raise _error(400, f"a container name must be specified for pod {name}, choose one of: "
                              f"[{' '.join(names)}]", what)
        if container is not None and names and container not in names:
            raise _error(400, f"container {container} is not valid for pod {name}", what)
        if status.get("phase") in ("Succeeded", "Failed"):
            # the API server's answer for an ended pod: a 500 (kubectl's own message is client-side)
            raise _error(500, f'container not found ("{container or (names or [name])[0]}")', what)

    def _evict(self, path: str, body: dict, what: str) -> dict:
        plural, ns, name, sub = self._route("POST", path, what)
        assert plural == "pods" and sub == "eviction" and name, f"eviction at {path}"
        with self._lock:
            live = self._live(plural, ns, name, what)
            preconditions = (body.get("deleteOptions") or {}).get("preconditions") or {}
            if preconditions.get("uid") and preconditions["uid"] != live["metadata"]["uid"]:
                raise _error(409, f'Operation cannot be fulfilled on Pod "{name}": the UID in the precondition '
                                  f"({preconditions['uid']}) does not match the UID in record "
                                  f"({live['metadata']['uid']}). The object might have been deleted and then "
                                  "recreated", what)
            if not live["metadata"].get("deletionTimestamp"):
                pod = copy.deepcopy(live)
                conditions = [c for c in (pod.setdefault("status", {}).get("conditions") or [])
                              if c.get("type") != "DisruptionTarget"]
                conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                                   "message": "Eviction API: evicting", "lastTransitionTime": _now()})
                pod["status"]["conditions"] = conditions
                self._store(plural, ns, name, pod, "MODIFIED")
                self._delete(plural, ns, name)
                if not self.gc_delay:
                    self._collect()
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _discover(self, path: str, base: str, what: str) -> dict:
        self.calls.append(("GET", path))
        self._inject("GET", None, path)
        served = [plural for plural in KINDS if _collection_base(plural) == base]
        if not served:
            raise _error(404, "the server could not find the requested resource", what)
        return {"kind": "APIResourceList", "groupVersion": base.split("/", 2)[-1],
                "resources": [{"name": plural, "kind": KINDS[plural][0], "namespaced": KINDS[plural][1]}
                              for plural in served]}

    def _route(self, method: str, path: str, what: str) -> tuple[str, str | None, str | None, str | None]:
        match = _PATH.match(path)
        if not match or match["plural"] not in KINDS:
            raise AssertionError(f"MemoryApi does not serve {method} {path}")
        plural = match["plural"]
        for race in list(self._races):
            r_method, r_plural, when, action = race
            if r_method == method and r_plural in (None, plural) and when(path):
                self._races.remove(race)
                action()   # its own calls are recorded before this one: they were served first
        self.calls.append((method, path))
        if plural == "namespaces" and match["ns"] is None and match["name"]:
            ns, name = None, match["name"]
        else:
            ns, name = match["ns"], match["name"]
        self._inject(method, plural, path)
        return plural, ns, name, match["sub"]

    def _inject(self, method: str, plural: str | None, path: str) -> None:
        for fault in list(self._faults):
            f_method, f_plural, when, error, left = fault
            if f_method == method and f_plural in (None, plural) and when(path):
                left[0] -= 1
                if left[0] <= 0:
                    self._faults.remove(fault)
                raise error

    def _live(self, plural: str, ns: str | None, name: str, what: str) -> dict:
        obj = self.objects.get((plural, ns if KINDS[plural][1] else None, name))
        if obj is None:
            raise _error(404, f'{plural} "{name}" not found', what)
        return obj

    def _check_preconditions(self, plural: str, name: str, live: dict, wanted: dict, what: str) -> None:
        for key in ("uid", "resourceVersion"):
            if wanted.get(key) and wanted[key] != live["metadata"].get(key):
                raise _error(409, f'Operation cannot be fulfilled on {plural} "{name}": Precondition failed: '
                                  f"{key} in precondition: {wanted[key]}, {key} in object meta: "
                                  f"{live['metadata'].get(key)}", what)

    @staticmethod
    def _keep_server_fields(plural: str, live: dict, new: dict, sub: str | None) -> None:
        """What a write cannot change: identity, the other half of a status subresource."""
        meta = new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name", "generation"):
            if key in live["metadata"]:
                meta[key] = live["metadata"][key]
            else:
                meta.pop(key, None)
        new["kind"] = live["kind"]
        if plural == "namespaces":
            meta["labels"] = {**(meta.get("labels") or {}), NAME_LABEL: live["metadata"]["name"]}
        if KINDS[plural][2]:
            if sub == "status":   # only the status changes
                kept = {k: v for k, v in live.items() if k != "status"}
                status = new.get("status")
                new.clear()
                new.update(copy.deepcopy(kept))
                if status is not None:
                    new["status"] = status
            elif "status" in live:
                new["status"] = copy.deepcopy(live["status"])
            else:
                new.pop("status", None)
        if sub != "status" and new.get("spec") != live.get("spec"):
            meta["generation"] = live["metadata"].get("generation", 1) + 1

    def _changed(self, plural: str, ns: str | None, name: str, live: dict, new: dict) -> dict:
        self._store(plural, ns if KINDS[plural][1] else None, name, new, "MODIFIED")
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._remove(plural, ns if KINDS[plural][1] else None, name)
            if not self.gc_delay:
                self._collect()
        return copy.deepcopy(new)

    def _store(self, plural: str, ns: str | None, name: str, obj: dict, event: str) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[(plural, ns, name)] = obj
        self._notify(plural, event, obj)

    def _notify(self, plural: str, event: str, obj: dict) -> None:
        for callback in self._subscribers.get(plural, []):
            callback(event, copy.deepcopy(obj))

    def _delete(self, plural: str, ns: str | None, name: str, *, foreground: bool = False) -> None:
        key = (plural, ns if KINDS[plural][1] else None, name)
        obj = self.objects[key]
        meta = obj["metadata"]
        # a namespace's content goes through the namespace controller, whatever the propagation
        if foreground and plural != "namespaces" and not meta.get("deletionTimestamp"):
            meta["finalizers"] = [*(meta.get("finalizers") or []), FOREGROUND]
        if plural == "namespaces" or meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = _now()
                if plural == "namespaces":
                    obj.setdefault("status", {})["phase"] = "Terminating"
                self._store(*key, obj, "MODIFIED")
            return
        self._remove(*key)

    def _remove(self, plural: str, ns: str | None, name: str) -> None:
        obj = self.objects.pop((plural, ns, name), None)
        if obj is not None:
            self._notify(plural, "DELETED", obj)

    def _collect(self) -> None:
        """The namespace controller and the garbage collector, run until nothing changes."""
        while True:
            changed = False
            uids = {o["metadata"]["uid"] for o in self.objects.values()}
            foreground = {o["metadata"]["uid"] for o in self.objects.values()
                          if o["metadata"].get("deletionTimestamp") and FOREGROUND in (o["metadata"].get("finalizers") or [])}
            for (plural, ns, name), obj in list(self.objects.items()):
                if (plural, ns, name) not in self.objects:
                    continue
                meta = obj["metadata"]
                namespace = self.objects.get(("namespaces", None, ns)) if ns else None
                owners = [o.get("uid") for o in meta.get("ownerReferences") or []]
                orphaned = bool(owners) and not any(uid in uids for uid in owners)
                in_dying_namespace = namespace is not None and namespace["metadata"].get("deletionTimestamp")
                owner_going = any(uid in foreground for uid in owners)
                if (orphaned or in_dying_namespace or owner_going) and not meta.get("deletionTimestamp"):
                    self._delete(plural, ns, name)
                    changed = True
            for key, obj in list(self.objects.items()):
                meta = obj["metadata"]
                if FOREGROUND not in (meta.get("finalizers") or []) or not meta.get("deletionTimestamp"):
                    continue
                blocking = any(ref.get("uid") == meta["uid"] and ref.get("blockOwnerDeletion")
                               for other in self.objects.values()
                               for ref in other["metadata"].get("ownerReferences") or [])
                if not blocking:
                    meta["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND]
                    if not meta["finalizers"]:
                        del meta["finalizers"]
                        self._remove(*key)
                    else:
                        self._store(*key, obj, "MODIFIED")
                    changed = True
            for (plural, ns, name), obj in list(self.objects.items()):
                if plural == "namespaces" and obj["metadata"].get("deletionTimestamp") \
                        and not obj["metadata"].get("finalizers") \
                        and not any(key[1] == name for key in self.objects):
                    self._remove(plural, ns, name)
                    changed = True
            if not changed:
                return

    def _list(self, plural: str, ns: str | None, params: dict) -> dict:
        items = [copy.deepcopy(o) for (p, o_ns, _), o in sorted(self.objects.items(), key=lambda kv: kv[0][2])
                 if p == plural and (ns is None or o_ns == ns)
                 and selects(params.get("labelSelector"), o["metadata"].get("labels") or {})
                 and fields_select(params.get("fieldSelector"), o)]
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or 0) or len(items)
        page = items[start:start + limit]
        more = start + limit < len(items)
        return {"kind": f"{KINDS[plural][0]}List", "items": page,
                "metadata": {"continue": str(start + limit)} if more else {}}


def _plural_of(kind: str) -> str:
    for plural, (name, _, _) in KINDS.items():
        if name == kind:
            return plural
    raise KeyError(kind)


def _collection_base(plural: str) -> str:
    return _GROUPS.get(plural, "/api/v1")


def _object_path(plural: str, name: str, namespace: str | None) -> str:
    base = _collection_base(plural)
    where = f"/namespaces/{namespace}" if namespace and KINDS[plural][1] else ""
    return f"{base}{where}/{plural}/{name}"


_GROUPS = {"jobs": "/apis/batch/v1", "networkpolicies": "/apis/networking.k8s.io/v1",
           "rolloutbatches": "/apis/rl.agentruntime.io/v1alpha1", "rolloutpools": "/apis/rl.agentruntime.io/v1alpha1",
           "priorityclasses": "/apis/scheduling.k8s.io/v1",
           "runtimeclasses": "/apis/node.k8s.io/v1", "servicecidrs": "/apis/networking.k8s.io/v1",
           "endpointslices": "/apis/discovery.k8s.io/v1", "leases": "/apis/coordination.k8s.io/v1",
           "localqueues": "/apis/kueue.x-k8s.io/v1beta2", "workloads": "/apis/kueue.x-k8s.io/v1beta2"}


class AsyncMemoryApi:
    """A MemoryApi's methods as coroutines (what AsyncClient awaits); its exec is one already."""

    def __init__(self, api: MemoryApi) -> None:
        self.api = api

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.api, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            answer = method(*args, **kwargs)
            return await answer if inspect.isawaitable(answer) else answer
        return call


class MemoryChannel:
    """MemoryApi.open_attach's channel: one delivery through the pod's attach handler (recorded in
    ``attaches`` as a channel's, with ``via_channel``), then closed."""

    def __init__(self, api: MemoryApi, namespace: str, pod: str, container: str) -> None:
        self.api, self.namespace, self.pod, self.container = api, namespace, pod, container
        self.closed = False
        self.via_channel: list[bytes] = []

    @property
    def alive(self) -> bool:
        return not self.closed

    async def deliver(self, data: bytes, *, timeout: float) -> None:
        if self.closed:
            raise Unavailable(f"attach to pod {self.namespace}/{self.pod}: the channel is closed or used")
        self.closed = True
        self.via_channel.append(data)
        await self.api.attach_to_pod(self.namespace, self.pod, self.container, data, ack=b"", timeout=timeout)

    async def close(self) -> None:
        self.closed = True
