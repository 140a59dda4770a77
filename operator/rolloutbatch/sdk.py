"""Python API for RL trainers: build a RolloutBatch, submit it, wait, read the rewards, delete it.

    from rolloutbatch.sdk import Client, Task, build_batch

    task = Task(files={"episode.py": source}, command=["python", "-B", "/task/episode.py"])
    handle = Client().submit(build_batch("step-", task, episodes=64, parallelism=16, namespace="rl"))
    status = handle.wait(timeout=1800, on_progress=lambda s: print(s.get("progress")))
    rows = handle.results()            # one dict per episode: pod, index, reward, outcome, reason, ...
    handle.delete()                    # waits until the sandbox namespace is gone

Everything goes through the same plain-dict API layer as the operator (``rolloutbatch.kube``),
which asks the API server for strict field validation: a misspelt field is refused, never dropped.

Errors (all but ``ValueError`` and ``TimeoutError`` are ``rolloutbatch.kube.errors.KubeError``;
``status`` is the HTTP status, the message is the API's own):

    ValueError        build_batch: a spec the operator would refuse (``core.spec.SpecError``),
                      an unknown spec field, a bad name; before any network call
    ConfigError       Client(): the kubeconfig is missing or unusable (also at the first call,
                      when a certificate file it names is gone)
    InvalidBatch      submit/create: the API refused the RolloutBatch: an unknown or duplicate
                      field (``unknown_fields`` names them), the schema, a CEL rule; an ``Invalid``
    TooLarge          the object is bigger than the API or etcd accept (1.5-3 MiB): not retryable
    BadRequest        another 400
    CRDNotInstalled   the cluster does not serve RolloutBatches
    NotFound          no such batch or namespace
    Forbidden         RBAC or admission refused the call
    Conflict          the name exists (create), or the object changed under a precondition
    Unavailable       no connection, 5xx or 429: the only one worth retrying as is
    ResultsNotReady   results() before the results ConfigMap exists
    TimeoutError      wait() and delete(wait=True) past their timeout
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolloutbatch import GROUP, KIND, PLURAL, VERSION
from rolloutbatch.core import naming
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.naming import LABEL_BATCH_UID
from rolloutbatch.core.results import decode_results
from rolloutbatch.core.spec import ISOLATION_NAMESPACE, SPEC_FIELDS, check_batch_name, parse_spec
from rolloutbatch.core.vocabulary import TERMINAL_PHASES
from rolloutbatch.kube import resources
from rolloutbatch.kube.client import Api, load_config
from rolloutbatch.kube.errors import (BadRequest, Conflict, ConfigError, Forbidden, Invalid, KubeError, NotFound,
                                      TooLarge, Unavailable)

__all__ = ["Client", "BatchHandle", "Task", "build_batch", "condition", "is_finished", "is_succeeded",
           "CRDNotInstalled", "ResultsNotReady", "InvalidBatch", "KubeError", "ConfigError", "BadRequest",
           "Invalid", "TooLarge", "NotFound", "Forbidden", "Conflict", "Unavailable"]

API_VERSION = f"{GROUP}/{VERSION}"
INSTALL_HINT = "the RolloutBatch CRD is not installed: kubectl apply -k manifests/default"


class CRDNotInstalled(KubeError):
    """The cluster does not serve rl.agentruntime.io/v1alpha1 RolloutBatches."""


class ResultsNotReady(KubeError):
    """The batch has no results ConfigMap yet (still running, or it was deleted)."""


class InvalidBatch(Invalid):
    """The API refused the RolloutBatch itself: an unknown or duplicate field under strict field
    validation (``unknown_fields``), the schema or a CEL rule. The message is the API's."""


# --- building -------------------------------------------------------------------------------


@dataclass
class Task:
    """The episode program: files mounted read-only at ``mount_path`` and the command to run."""

    files: dict[str, str]
    command: list[str]
    image: str = "python:3.12-alpine"
    env: Mapping[str, str] | Sequence[Mapping[str, str]] = field(default_factory=dict)
    resources: dict | None = None
    mount_path: str = "/task"
    args: list[str] | None = None

    def env_list(self) -> list[dict[str, str]]:
        if isinstance(self.env, Mapping):
            return [{"name": str(k), "value": str(v)} for k, v in self.env.items()]
        return [dict(e) for e in self.env]


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def build_batch(name_or_prefix: str, task: Task, episodes: int, parallelism: int | None = None,
                inputs: Sequence[Mapping[str, Any]] | None = None, namespace: str | None = None,
                **spec_overrides: Any) -> dict:
    """A RolloutBatch object (plain dict) ready for :meth:`Client.submit` or ``kubectl create``.

    ``name_or_prefix`` ending in ``-`` becomes ``metadata.generateName`` (a fresh name per
    submit, the natural choice for a training loop). ``spec_overrides`` are further spec fields,
    in camelCase or snake_case (``episode_timeout_seconds=300``, ``isolation={...}``).
    Raises ``ValueError`` (a ``SpecError`` naming the field) before any network call for an
    unknown spec field and for what the operator would refuse: the spec is read by the
    operator's own ``core.spec.parse_spec``, the name checked by ``core.spec.check_batch_name``.
    """
    check_batch_name(name_or_prefix)
    if not task.command:
        raise SpecError("task.command", "must not be empty")
    spec: dict[str, Any] = {
        "episodes": episodes,
        "image": task.image,
        "command": list(task.command),
        "task": {"mountPath": task.mount_path, "files": dict(task.files)},
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if task.args:
        spec["args"] = list(task.args)
    env = task.env_list()
    if env:
        spec["env"] = env
    if task.resources:
        spec["resources"] = copy.deepcopy(task.resources)
    if inputs is not None:
        inputs = list(inputs)
        # The CRD's items are objects (so a CEL rule can count them); parse_spec takes any JSON.
        if not all(isinstance(i, Mapping) for i in inputs):
            raise SpecError("spec.inputs", "every input must be a JSON object (a dict)")
        spec["inputs"] = [dict(i) for i in inputs]
    for key, value in spec_overrides.items():
        name = _camel(key)
        if name not in SPEC_FIELDS:
            raise SpecError(f"spec.{name}", f"unknown field (keyword {key!r}); spec fields are "
                                            f"{', '.join(sorted(SPEC_FIELDS))}")
        spec[name] = copy.deepcopy(value)
    parse_spec(spec)

    metadata: dict[str, Any] = {"generateName" if name_or_prefix.endswith("-") else "name": name_or_prefix}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


# --- talking to the cluster -------------------------------------------------------------------


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


class Client:
    """A connection to one cluster (kubeconfig file, ``$KUBECONFIG``, or in-cluster).

    Raises ``ConfigError`` when the kubeconfig is missing or unusable.
    """

    def __init__(self, kubeconfig: str | None = None, *, namespace: str | None = None,
                 api: Api | None = None, timeout: float = 30) -> None:
        if api is None:
            self.config = load_config(kubeconfig)
            api = Api(self.config, pool=8, timeout=timeout)
        else:
            self.config = None
        self.api = api
        self.namespace = namespace or (self.config.namespace if self.config is not None else "default")

    @property
    def context(self) -> str:
        return getattr(self.config, "current_context", None) or "in-cluster"

    # -- checks
    def crd_installed(self) -> bool:
        try:
            self.api.get(f"/apis/{GROUP}/{VERSION}", "discover RolloutBatch API")
        except NotFound:
            return False
        return True

    def _not_found(self, exc: NotFound, what: str) -> KubeError:
        if not self.crd_installed():
            return CRDNotInstalled(INSTALL_HINT, status=404, reason="NotFound")
        return NotFound(what, status=404, reason="NotFound")

    # -- batches
    def create(self, batch: Mapping, *, dry_run: bool = False) -> dict:
        """Create the batch; ``dry_run``: the API checks it completely and stores nothing."""
        body = copy.deepcopy(dict(batch))
        meta = body.setdefault("metadata", {})
        namespace = meta.setdefault("namespace", self.namespace)
        what = f"create RolloutBatch {namespace}/{meta.get('name') or meta.get('generateName', '')}"
        try:
            return self.api.create(resources.collection_path("RolloutBatch", namespace), body, what,
                                   dry_run=dry_run)
        except NotFound as exc:
            raise self._not_found(exc, f"namespace {namespace} not found") from None
        except (Invalid, BadRequest) as exc:
            # 422 (schema, CEL) or 400 (strict field validation, undecodable): the batch itself.
            raise InvalidBatch(str(exc), status=exc.status, reason=exc.reason,
                               unknown_fields=getattr(exc, "unknown_fields", ())) from None

    def submit(self, batch: Mapping) -> BatchHandle:
        return BatchHandle(self, self.create(batch))

    def get(self, name: str, namespace: str | None = None) -> dict:
        namespace = namespace or self.namespace
        try:
            return self.api.get(resources.object_path("RolloutBatch", name, namespace),
                                f"get RolloutBatch {namespace}/{name}")
        except NotFound as exc:
            raise self._not_found(exc, f'rolloutbatch "{name}" not found in namespace {namespace}') from None

    def handle(self, name: str, namespace: str | None = None) -> BatchHandle:
        return BatchHandle(self, self.get(name, namespace))

    def list(self, namespace: str | None = None, *, all_namespaces: bool = False) -> list[dict]:
        path = f"/apis/{GROUP}/{VERSION}/{PLURAL}" if all_namespaces else \
            resources.collection_path("RolloutBatch", namespace or self.namespace)
        try:
            return self.api.get(path, "list RolloutBatches").get("items", [])
        except NotFound as exc:
            raise self._not_found(exc, "RolloutBatches not found") from None

    def results_document(self, batch: Mapping) -> dict:
        meta, status = batch["metadata"], batch.get("status") or {}
        name = status.get("resultsConfigMap") or f"{meta['name']}-results"
        cm = resources.get_or_none(self.api, "ConfigMap", name, meta["namespace"])
        document = decode_results(cm) if cm else None
        if document is None:
            raise ResultsNotReady(f"RolloutBatch {meta['namespace']}/{meta['name']} has no results yet "
                                  f"(ConfigMap {name}; phase {status.get('phase') or 'Pending'})")
        return document

    def sandbox_namespace(self, batch: Mapping) -> str | None:
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

    def namespace_exists(self, name: str, uid: str | None = None) -> bool:
        live = resources.get_or_none(self.api, "Namespace", name)
        if live is None:
            return False
        labels = live.get("metadata", {}).get("labels") or {}
        return uid is None or labels.get(LABEL_BATCH_UID) == uid

    def delete(self, batch: Mapping, *, wait: bool = True, timeout: float = 300, interval: float = 1.0) -> None:
        """Delete a batch (UID precondition); with ``wait``, until it and its sandbox namespace are gone."""
        meta = batch["metadata"]
        resources.delete_batch(self.api, meta["namespace"], meta["name"], meta["uid"])
        if not wait:
            return
        sandbox = self.sandbox_namespace(batch)
        deadline = time.monotonic() + timeout
        while True:
            live = resources.get_batch(self.api, meta["namespace"], meta["name"])
            batch_gone = live is None or live["metadata"].get("uid") != meta["uid"]
            sandbox_gone = sandbox is None or not self.namespace_exists(sandbox, meta["uid"])
            if batch_gone and sandbox_gone:
                return
            if time.monotonic() >= deadline:
                what = f"RolloutBatch {meta['namespace']}/{meta['name']}" if not batch_gone \
                    else f"sandbox namespace {sandbox}"
                hint = " (its finalizer needs the operator: is it running?)" if not batch_gone else ""
                raise TimeoutError(f"{what} still exists after {timeout:g}s{hint}")
            time.sleep(interval)


class BatchHandle:
    """One submitted RolloutBatch. ``obj`` is the last object read from the API."""

    def __init__(self, client: Client, obj: dict) -> None:
        self.client = client
        self.obj = obj

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.obj["metadata"]["namespace"]

    @property
    def uid(self) -> str:
        return self.obj["metadata"]["uid"]

    @property
    def status(self) -> dict:
        return self.obj.get("status") or {}

    def refresh(self) -> dict:
        self.obj = self.client.get(self.name, self.namespace)
        return self.status

    def wait(self, timeout: float = 3600, on_progress: Callable[[dict], None] | None = None,
             interval: float = 1.0) -> dict:
        """Poll until Succeeded or Failed; ``on_progress(status)`` on every status change.

        Returns the final status (check ``status["phase"]``); raises ``TimeoutError``.
        """
        deadline = time.monotonic() + timeout
        last: dict | None = None
        while True:
            status = self.refresh()
            if on_progress is not None and status != last:
                on_progress(copy.deepcopy(status))
            last = status
            if is_finished(status):
                status = self.settle()
                if on_progress is not None and status != last:
                    on_progress(copy.deepcopy(status))
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"RolloutBatch {self.namespace}/{self.name} not finished after {timeout:g}s "
                                   f"(phase {status.get('phase') or 'Pending'}, {status.get('progress') or '-'})")
            time.sleep(interval)

    def settle(self, timeout: float = 10, interval: float = 0.2) -> dict:
        """After the phase turned terminal, give the last timing field a moment to land.

        The operator can publish ``phase: Succeeded`` one status patch before
        ``jobCompleteSeconds`` (it needs the Job's own completion); wait briefly for it.
        """
        deadline = time.monotonic() + timeout
        while (self.status.get("phase") in TERMINAL_PHASES and self.status.get("jobName")
               and self.status.get("jobCompleteSeconds") is None and time.monotonic() < deadline):
            time.sleep(interval)
            self.refresh()
        return self.status

    def document(self) -> dict:
        """The whole results document (summary fields and ``pods``)."""
        return self.client.results_document(self.obj)

    def results(self) -> list[dict]:
        """One row per episode, ordered by episode index."""
        return list(self.document().get("pods") or [])

    def delete(self, wait: bool = True, timeout: float = 300) -> None:
        self.client.delete(self.obj, wait=wait, timeout=timeout)
