"""Python API for RL trainers: build a RolloutBatch, submit it, follow it, read the rewards.

    from rolloutbatch.sdk import Client, Task, build_batch

    task = Task(files={"episode.py": source}, command=["python", "-B", "/task/episode.py"])
    batch = build_batch("step-", task, episodes=len(tasks) * 8, inputs=tasks, samples_per_input=8,
                        namespace="rl")
    handle = Client().submit(batch)        # large inputs go into ConfigMaps the batch owns
    for group in handle.groups():          # each group once its 8 samples are final
        ...                                # group["rows"], group["reward_mean"], group["reward_std"]
    rows = handle.results()                # every row (sharded results reassembled), by index
    handle.stop(wait=True)                 # or stop early: spec.stop, every finished row kept
    handle.delete()                        # waits until the sandbox namespace is gone

Warm pools: ``client.create_pool("warm", 8, task_files=files, prepare=["sh", "/task/setup.sh"])``
keeps 8 prepared pods ready; ``client.submit(batch, pool="warm")`` runs a batch in them
(``spec.poolRef``), ``scale_pool``, ``list_pools``, ``get_pool`` and ``delete_pool`` manage it.

Trainer-driven sessions (``sdk.sessions``): on a pool with a verifier, the trainer runs the agent
loop and the sandbox executes its commands::

    with client.open_sessions("graded", 8, verifier={"files": {"verify.py": grader}}) as batch:
        with batch.session(0) as s:
            s.write_file("fix.py", code.encode())   # bytes
            result = s.run("python -m pytest -q", on_output=lambda stream, data: print(data.decode()))
        rows = batch.wait()        # graded by the verifier; row["session"]: the session's stats

The asyncio twin, ``AsyncClient`` (``await handle.wait()``, ``async for row in
handle.stream()``), shares every rule with ``Client``: the verbs are sans-IO generators
(``sdk.ops``) and following a batch is a state machine fed by watches (``sdk.follow``); each
client only carries the requests. Rows and groups are typed (``sdk.types.Row``, ``Group``).

Modules: ``build`` (Task, build_batch, build_pool, with_pool, where inputs go), ``ops`` (the verbs),
``sessions`` (trainer-driven sessions: the session batch, its sans-IO verbs), ``retained``
(results a deleted batch retained: ``Client.retained_results(name)``, ``delete_retained``),
``follow`` (watches and the follower), ``client`` (blocking), ``aio`` (asyncio, aiohttp), ``types``.

Everything goes through the same plain-dict API layer as the operator (``rolloutbatch.kube``),
which asks the API server for strict field validation: a misspelt field is refused, never dropped.

Errors (all but ``ValueError``, ``TimeoutError``, ``FileNotFoundError``, ``PermissionError``,
``IsADirectoryError`` and a link loop's ``OSError`` are ``rolloutbatch.kube.errors.KubeError``; ``status`` is the HTTP status, the message is the API's own):

    ValueError        build_batch: a spec the operator would refuse (``core.spec.SpecError``),
                      an unknown spec field, a bad name; before any network call
    InvalidName       a ValueError: get, get_pool, scale_pool, delete_pool of a name that names no
                      object ('', '..', 'A/b'), and any call or client given a namespace that
                      names none ('', '../x', 'a/b'); before any call (an empty name is the
                      collection; an empty namespace, a script's unset variable, is not the
                      kubeconfig's)
    ConfigError       Client(): the kubeconfig is missing or unusable (also at the first call,
                      when a certificate file it names is gone)
    InvalidBatch      submit/create: the API refused the RolloutBatch: an unknown or duplicate
                      field (``unknown_fields`` names them), the schema, a CEL rule; an ``Invalid``
    InvalidPool       create_pool/scale_pool: the API refused the RolloutPool (e.g. size > maxSize)
    PoolStalled       wait_pool: the pool's pods cannot run (its Stalled reason and message)
    TooLarge          the object is bigger than the API or etcd accept (1.5-3 MiB): not retryable
    BadRequest        another 400
    CRDNotInstalled   the cluster does not serve RolloutBatches (or, for the pool verbs, RolloutPools)
    NotFound          no such batch or namespace; stream()/wait() of a batch deleted meanwhile
    Unauthorized      401: the API server refused the credentials (an expired or rotated token);
                      stream()/wait()/groups() end with it at once, not at their timeout
    Forbidden         RBAC or admission refused the call
    Conflict          the name exists (create), or the object changed under a precondition
    Unavailable       no connection, 5xx or 429: the only one worth retrying as is
    ResultsNotReady   results() before the results ConfigMap exists, or one the newest status does not vouch for
    ResultsIncomplete a ResultsNotReady: results(), stream(), groups() of a batch whose listed result shards
                      are gone or not what the operator wrote (``shards`` names them); document() returns the rest
    TimeoutError      wait(), stream(), groups(), wait_pool() and delete(wait=True) past their timeout; session(i)
                      while the episode's pod holds no session
    SessionOver       a session's run/write_file/read_file once it ended (end(), its deadline, its pod gone)
    SessionLost       a SessionOver: its pod was lost (evicted, node lost) before it ended; session(i) opens the retry
    SessionError      another session failure (its message is the sandbox's); SessionOver is one
    ExecForbidden     a Forbidden: the trainer lacks pods (get, list) or pods/exec (get, create) in the
                      pool's namespace; the message says so
    FileNotFoundError read_file of a path where nothing is (a FIFO, a socket or a device there: SessionError)
    PermissionError   read_file of a file the sandbox's user may not read, or under a directory it cannot
                      search (a symbolic link into one too)
    OSError           read_file through symbolic links that loop (errno ELOOP, as Python's open)
    IsADirectoryError write_file or read_file of a directory (or a symbolic link to one)
    TimedOut          a session's run/write_file/read_file past its timeout (it counts as run; run's
                      command is stopped in the sandbox first, a file verb's may still run); not a
                      TimeoutError nor a SessionError
"""

from __future__ import annotations

from typing import Any

from rolloutbatch.core.spec import SPEC_FIELDS
from rolloutbatch.core.vocabulary import TERMINAL_PHASES
from rolloutbatch.kube.errors import (BadRequest, Conflict, ConfigError, Forbidden, Invalid, KubeError, NotFound,
                                      TimedOut, TooLarge, Unauthorized, Unavailable)
from rolloutbatch.sdk.build import INLINE_INPUTS_MAX, Task, build_batch, build_pool, with_pool
from rolloutbatch.sdk.client import BatchHandle, Client, Session, Sessions
from rolloutbatch.sdk.ops import (INSTALL_HINT, CRDNotInstalled, InvalidBatch, InvalidName, InvalidPool,
                                  PoolStalled, ResultsIncomplete, ResultsNotReady, condition, is_finished,
                                  is_succeeded)
from rolloutbatch.sdk.sessions import (CommandResult, ExecForbidden, SessionError, SessionLost, SessionOver,
                                       SessionStats, build_sessions)
from rolloutbatch.sdk.types import Group, Row

__all__ = ["Client", "BatchHandle", "AsyncClient", "AsyncBatchHandle", "Task", "build_batch", "build_pool",
           "with_pool", "Row", "Group", "Sessions", "Session", "AsyncSessions", "AsyncSession", "build_sessions",
           "CommandResult", "SessionStats", "SessionError", "SessionOver", "SessionLost", "ExecForbidden",
           "condition", "is_finished", "is_succeeded", "SPEC_FIELDS", "TERMINAL_PHASES", "INLINE_INPUTS_MAX",
           "INSTALL_HINT", "CRDNotInstalled", "ResultsNotReady", "ResultsIncomplete", "InvalidBatch", "InvalidPool",
           "PoolStalled", "InvalidName", "KubeError", "ConfigError",
           "BadRequest", "Invalid", "TooLarge", "NotFound", "Unauthorized", "Forbidden", "Conflict", "Unavailable",
           "TimedOut"]


def __getattr__(name: str) -> Any:
    # aiohttp is imported only by those who use the async client (the CLI never does).
    if name in ("AsyncClient", "AsyncBatchHandle", "AsyncSessions", "AsyncSession"):
        from rolloutbatch.sdk import aio

        return getattr(aio, name)
    raise AttributeError(f"module 'rolloutbatch.sdk' has no attribute {name!r}")
