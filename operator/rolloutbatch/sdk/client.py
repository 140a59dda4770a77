"""The blocking client: runs the verbs of ``sdk.ops`` and the followers of ``sdk.follow`` with
the operator's own API layer (``kube.client.Api``: pykube's pooled ``requests`` session).

Watches run in daemon threads (one per watched collection) that feed one queue; the caller's
thread does all the bookkeeping, so a generator the caller stops early leaves nothing running
past the current watch request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import requests

from rolloutbatch.kube.client import Api, load_config
from rolloutbatch.kube.errors import KubeError, Unavailable
from rolloutbatch.sdk import ops, result_ops, retained, session_commands, sessions
from rolloutbatch.sdk.build import build_pool, pool_options
from rolloutbatch.sdk.follow import Follower, ListWatch, awaits_job_complete
from rolloutbatch.sdk.timeouts import checked_timeout
from rolloutbatch.sdk.types import Group, Row


def run(api: Any, op: ops.Op) -> Any:
    """Drive a sans-IO operation with a blocking API object."""
    answer: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(answer)
            except StopIteration as stop:
                return stop.value
            answer, error = None, None
            if isinstance(step, ops.Sleep):
                time.sleep(step.seconds)
                continue
            try:
                answer = _settled(getattr(api, step.method)(*step.args, **step.kwargs))
            except KubeError as exc:
                error = exc
            except BaseException as exc:   # Ctrl-C among them
                if step.abandoned is not None:
                    ops.close(op)   # its finally blocks first: a command's time is its own, not its stop's
                    _abandon(api, step.abandoned, exc)
                raise
    finally:
        ops.close(op)


def _abandon(api: Any, op: ops.Op, error: BaseException) -> None:
    """``op`` (a Call's ``abandoned``) run to its end, its errors ignored: ``error``, which left
    the call it stops, is what the caller gets. A second Ctrl-C stops this wait too."""
    try:
        run(api, op)
    except Warning as said:   # made an error by a filter (-W error): said with the caller's error
        error.add_note(str(said))
    except Exception:   # noqa: BLE001 - best effort; the caller's own error follows
        pass


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _settled(answer: Any) -> Any:
    """An answer that is awaitable (pods/exec is a coroutine on every API object) run to its end:
    on a loop of its own, or, called from a thread whose loop runs (a notebook), on a thread."""
    if not inspect.isawaitable(answer):
        return answer
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(answer))
    return _on_a_thread(answer)


def _on_a_thread(answer: Any) -> Any:
    """``answer`` awaited on a loop of a thread of its own. Left (Ctrl-C in a notebook, whose loop
    turns no SIGINT into a cancellation), it is cancelled there and the caller goes on at once:
    waiting for the thread would wait for the exec's own end, its whole timeout."""
    lock = threading.Lock()
    running: list = []   # (loop, task) once it runs; None when it was left before it began

    async def main() -> Any:
        with lock:
            if running == [None]:
                if inspect.iscoroutine(answer):
                    answer.close()   # never awaited, and never said to be
                raise asyncio.CancelledError
            running.append((asyncio.get_running_loop(), asyncio.current_task()))
        return await answer

    worker = concurrent.futures.ThreadPoolExecutor(1)
    future = worker.submit(asyncio.run, main())
    try:
        return future.result()
    except BaseException:
        if future.done():   # the exec's own answer (an API error): nothing is left to cancel
            raise
        with lock:
            if running:
                loop, task = running[0]
                try:
                    loop.call_soon_threadsafe(task.cancel)
                except RuntimeError:   # its loop closed meanwhile: the exec ended on its own
                    pass
            else:
                running.append(None)
        raise
    finally:
        worker.shutdown(wait=False)


def _watch_thread(api: Api, watch: ListWatch, events: queue.Queue, stop: threading.Event, open_: list) -> None:
    what = f"watch {watch.path}"
    while not stop.is_set():
        try:
            if watch.listing:
                for event in watch.on_list(api.get(watch.path, f"list {watch.path}", **watch.list_params())):
                    events.put((watch, event))
                continue
            response = api.raw(watch.path, what, timeout=(10, watch.watch_seconds + 30), **watch.watch_params())
            open_.append(response)
            watch.started()
            try:
                for line in response.iter_lines(chunk_size=65536):
                    if stop.is_set():
                        return
                    event = watch.on_line(line)
                    if event is not None:
                        events.put((watch, event))
            finally:
                response.close()
                open_.remove(response)
        except (KubeError, requests.RequestException, OSError, ValueError) as exc:
            if stop.is_set():
                return      # the follower closed our response under us
            if isinstance(exc, (requests.RequestException, OSError)):
                exc = Unavailable(f"{what}: {exc}")
            delay = watch.on_error(exc)
            if delay is None:
                events.put((watch, ("FAIL", exc)))
                return
            stop.wait(delay)
        except Exception as exc:  # noqa: BLE001 - a surprise ends the follow with it, not at its timeout
            # (an AttributeError from http.client when the follower closed our response under us:
            # nothing to say then; else a page that is no object, a bug)
            if not stop.is_set():
                events.put((watch, ("FAIL", exc)))
            return


def _interrupt(response: requests.Response) -> None:
    """Wake the thread blocked reading a watch ``response``, from another thread, at once.

    Closing the response here would wait for that thread's read to end: the TLS socket's close
    and read share the connection, and a quiet watch is only answered at the server's watch
    timeout (the caller of stream() waited ~60 s after the batch was final). Shutting the
    socket down ends the read with an error (the thread sees ``stop`` and closes the response
    itself) and takes no lock the reader holds."""
    raw = getattr(response, "raw", None)
    sock = getattr(getattr(raw, "_connection", None), "sock", None)
    if sock is None:      # urllib3 without the connection on the response: http.client's socket
        sock = getattr(getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None), "_sock", None)
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)   # the plain socket's, not SSLSocket's
    except (OSError, TypeError, ValueError):
        pass


def follow(api: Api, follower: Follower, timeout: float) -> Iterator[tuple[str, Any]]:
    """The follower's outputs until the batch is final (or deleted before it was seen final:
    NotFound); TimeoutError."""
    checked_timeout(timeout, zero_ok=True)   # before any watch starts
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    open_: list = []
    for watch in follower.watches():
        threading.Thread(target=_watch_thread, args=(api, watch, events, stop, open_), daemon=True,
                         name=f"rolloutbatch {watch.path}").start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            if follower.needs_sweep():
                yield from follower.swept_with(run(api, follower.sweep(deadline)))
            left = deadline - time.monotonic()
            if follower.done(out_of_time=left <= 0):
                if (error := follower.end_error()) is not None:
                    raise error
                yield from follower.leftover_groups()
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise follower.timeout_error(timeout)
            try:
                watch, (kind, obj) = events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if kind == "FAIL":
                raise obj
            yield from follower.feed(watch, kind, obj)
    finally:
        stop.set()
        for response in list(open_):
            _interrupt(response)    # a thread waiting on a quiet watch ends, and closes it


class Client:
    """A connection to one cluster (kubeconfig file, ``$KUBECONFIG``: files merged as kubectl does, or in-cluster).

    Raises ``ConfigError`` when the kubeconfig is missing or unusable.
    """

    def __init__(self, kubeconfig: str | None = None, *, namespace: str | None = None,
                 api: Api | None = None, timeout: float = 30) -> None:
        checked_timeout(timeout)
        self.config = load_config(kubeconfig) if api is None else None
        self.namespace = ops.client_namespace(namespace, self.config)
        self.api = api if api is not None else Api(self.config, pool=8, timeout=timeout)

    @property
    def context(self) -> str:
        return getattr(self.config, "current_context", None) or "in-cluster"

    def _run(self, op: ops.Op) -> Any:
        return run(self.api, op)

    def crd_installed(self) -> bool:
        return self._run(ops.crd_installed())

    def create(self, batch: Mapping, *, dry_run: bool = False) -> dict:
        """Create the batch as given; ``dry_run``: the API checks it completely and stores nothing."""
        return self._run(ops.create(batch, self.namespace, dry_run=dry_run))

    def submit(self, batch: Mapping, *, pool: str | None = None) -> BatchHandle:
        """Create the batch; inputs too large for the object go first into ConfigMaps that the
        batch owns (``spec.inputsFrom``), deleted again if the batch is refused. ``pool``: run it
        in the warm pods of that RolloutPool (``spec.poolRef``; the batch's own image, task,
        resources, workspace, isolation and pod template are left out: ``sdk.build.with_pool``),
        refused (ValueError) when what it names is not the pool's (``ops.submit_on_pool``)."""
        return BatchHandle(self, self._run(ops.submit_on_pool(batch, pool, self.namespace) if pool is not None else
                                           ops.submit(batch, self.namespace)))

    def get(self, name: str, namespace: str | None = None) -> dict:
        return self._run(ops.get(name, ops.namespace_of(namespace, self.namespace)))

    def handle(self, name: str, namespace: str | None = None) -> BatchHandle:
        return BatchHandle(self, self.get(name, namespace))

    def list(self, namespace: str | None = None, *, all_namespaces: bool = False) -> list[dict]:
        return self._run(ops.list_(ops.namespace_of(namespace, self.namespace), all_namespaces))

    def results_document(self, batch: Mapping) -> dict:
        return self._run(result_ops.results_document(batch))

    def sandbox_namespace(self, batch: Mapping) -> str | None:
        return ops.sandbox_namespace(batch)

    def namespace_exists(self, name: str, uid: str | None = None) -> bool:
        return self._run(ops.namespace_exists(name, uid))

    def delete(self, batch: Mapping, *, wait: bool = True, timeout: float = 300, interval: float = 1.0) -> None:
        """Delete a batch (UID precondition); with ``wait``, until it and its sandbox namespace are gone."""
        self._run(ops.delete(batch, wait=wait, timeout=timeout, interval=interval))

    def stop(self, batch: Mapping) -> dict:
        """Set ``spec.stop`` (one-way; a batch that already ended is left as it is); the object."""
        return self._run(ops.stop(batch))

    def open_sessions(self, pool: str, episodes: int, *, verifier: Mapping, name: str = "session-",
                      **options: Any) -> Sessions:
        """Trainer-driven episodes on the RolloutPool ``pool`` (one with ``spec.verifier``): a batch
        of ``episodes`` sessions, each a sandbox the trainer runs commands in until it ends it, then
        graded by ``verifier``. ``options``: :func:`~rolloutbatch.sdk.sessions.build_sessions`'s
        (inputs, samples_per_input, episode_timeout_seconds: each session's deadline, env, and
        other spec fields). ``with client.open_sessions(...) as s:`` ends what is left open."""
        batch = sessions.build_sessions(pool, episodes, verifier=verifier, name=name,
                                        namespace=ops.namespace_of(options.pop("namespace", None), self.namespace),
                                        **options)
        return Sessions(self.submit(batch))

    # --- warm pools (RolloutPool) -------------------------------------------------------------
    def create_pool(self, name: str, size: int, *, task_files: Mapping[str, str], namespace: str | None = None,
                    dry_run: bool = False, **options: Any) -> dict:
        """Create a RolloutPool of ``size`` warm pods with ``task_files``; the object. ``options``
        are :func:`~rolloutbatch.sdk.build.build_pool`'s (image, max_size, env, resources,
        runtime_class_name, task_mount_path, prepare, prepare_timeout_seconds, network,
        workspace, pod_template, verifier). ValueError before any call for what the operator would
        refuse; InvalidPool when the API refuses it."""
        pool = build_pool(name, size, task_files=task_files, namespace=ops.namespace_of(namespace, self.namespace),
                          **pool_options(options))
        return self._run(ops.create_pool(pool, self.namespace, dry_run=dry_run))

    def get_pool(self, name: str, namespace: str | None = None) -> dict:
        return self._run(ops.get_pool(name, ops.namespace_of(namespace, self.namespace)))

    def list_pools(self, namespace: str | None = None, *, all_namespaces: bool = False) -> list[dict]:
        return self._run(ops.list_pools(ops.namespace_of(namespace, self.namespace), all_namespaces))

    def scale_pool(self, name: str, size: int, namespace: str | None = None) -> dict:
        """Set the pool's ``spec.size`` (as ``kubectl scale rp/NAME --replicas=N``); the object."""
        return self._run(ops.scale_pool(name, ops.namespace_of(namespace, self.namespace), size))

    def wait_pool(self, name: str, namespace: str | None = None, *, timeout: float = 300) -> dict:
        """The pool once ``spec.size`` of its pods are warm (its Ready condition for its current
        spec), so that a batch submitted next claims them; PoolStalled when its pods cannot run,
        TimeoutError after ``timeout`` with what the pool says."""
        return self._run(ops.wait_pool(name, ops.namespace_of(namespace, self.namespace), timeout=timeout))

    def delete_pool(self, name: str, namespace: str | None = None, *, wait: bool = True,
                    timeout: float = 300, on_waiting: Callable[[str], None] | None = None) -> None:
        """Delete the pool; with ``wait``, until it is gone (the operator removes its pods first,
        once no batch runs on them: ``on_waiting(message)`` hears which it waits for)."""
        self._run(ops.delete_pool(name, ops.namespace_of(namespace, self.namespace), wait=wait, timeout=timeout,
                                  on_waiting=on_waiting))

    def retained_document(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> dict:
        """The retained results of a batch that is gone, by its name (``sdk.retained``: checked
        only against the shard digests their head records; ``document["retained"]`` says so).
        ``uid``: only those of the batch that had it, e.g. while a new batch of the name exists.
        ResultsNotReady when the batch that had them still exists: read them through it."""
        return self._run(retained.retained_document(name, ops.namespace_of(namespace, self.namespace), uid))

    def retained_results(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> list[Row]:
        """Every row of :meth:`retained_document`; ResultsIncomplete when listed shards are gone."""
        namespace = ops.namespace_of(namespace, self.namespace)
        document = self.retained_document(name, namespace, uid=uid)
        return result_ops.rows(document, retained.retained_batch(document, name, namespace))

    def retained_uids(self, name: str, namespace: str | None = None) -> list[str]:
        """The uids of the batches named ``name`` whose retained results ConfigMaps exist (the
        batch of that name that exists now among them, when it retains its results)."""
        return self._run(retained.retained_uids(name, ops.namespace_of(namespace, self.namespace)))

    def delete_retained(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> list[str]:
        """Delete the retained results ConfigMaps of batches named ``name`` that are gone (a batch
        of the name that exists keeps its own, even by its ``uid``); ``uid``: of that batch only.
        The names deleted."""
        return self._run(retained.delete_retained(name, ops.namespace_of(namespace, self.namespace), uid))


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
        """Read the batch again; its status. NotFound when it is gone or was replaced by a
        namesake (the handle keeps what it had: stop/delete/results never act on another batch)."""
        self.obj = ops.not_a_namesake(self.obj, self.client.get(self.name, self.namespace))
        return self.status

    def settle(self, seconds: float = 10.0) -> dict:
        """The status, read again every half second for up to ``seconds`` while the batch is final
        and its ``jobCompleteSeconds`` is still to come (as :meth:`wait`'s ``settle``): a watch
        that returned with the phase would show the summary without it. A batch gone or an API
        that does not answer ends the wait with what the handle has."""
        end = time.monotonic() + seconds
        while awaits_job_complete(self.status) and time.monotonic() < end:
            time.sleep(0.5)
            try:
                self.refresh()
            except KubeError:
                break
        return self.status

    def _follow(self, follower: Follower, timeout: float) -> Iterator[tuple[str, Any]]:
        for kind, value in follow(self.client.api, follower, timeout):
            if kind == "status":
                self.obj = dict(self.obj, status=value)
            yield kind, value

    def wait(self, timeout: float = 3600, on_progress: Callable[[dict], None] | None = None,
             settle: float = 10.0) -> dict:
        """Watch until Succeeded, Failed or Stalled; ``on_progress(status)`` on every change.

        Returns the final status (check ``status["phase"]``), also when the batch is deleted
        once it was seen final; raises ``TimeoutError``, and ``NotFound`` when the batch is
        deleted before. After the phase is final it waits up to
        ``settle`` seconds for ``jobCompleteSeconds`` (not when the batch stalled or was stopped:
        its Job never completes), and no longer than ``timeout``: a final batch
        returns its status then, without it, never a TimeoutError.
        """
        follower = Follower(self.obj, rows=False, settle_seconds=settle)
        if on_progress is not None:
            on_progress(copy.deepcopy(self.status))
        for _, status in self._follow(follower, timeout):
            if on_progress is not None:
                on_progress(copy.deepcopy(status))
        return self.status

    def stream(self, timeout: float = 3600, *, watch_seconds: int | None = None) -> Iterator[Row]:
        """Each episode's row once, as soon as the operator published it and the batch's status
        records it (completion order), until the batch is final. Raises ``TimeoutError`` after
        ``timeout`` seconds. ``watch_seconds``: how long each watch runs before it is resumed
        (None: ``follow.WATCH_SECONDS``; 0 is refused, as a timeout of 0 is)."""
        follower = Follower(self.obj, watch_seconds=watch_seconds)
        for kind, value in self._follow(follower, timeout):
            if kind == "row":
                yield value

    def groups(self, timeout: float = 3600, *, watch_seconds: int | None = None) -> Iterator[Group]:
        """Each group (``group``, ``rows``, ``reward_mean``, ``reward_std``, ``valid``, ...) once all
        its samples have rows; a batch that ends short yields its other groups with ``final: False``."""
        follower = Follower(self.obj, groups=True, watch_seconds=watch_seconds)
        for kind, value in self._follow(follower, timeout):
            if kind == "group":
                yield value

    def document(self) -> dict:
        """The whole results document (summary fields, ``pods`` and ``groups``), across shards.

        Only ConfigMaps whose digest the batch's newest status records count (anyone with
        ConfigMap rights can write one with the batch's labels): ResultsNotReady when the head is
        not one; listed shards left out (gone, or not what the operator wrote) are named in
        ``missing_shards`` (and ``unverified_shards``, ``unreadable_shards``)."""
        return self.client.results_document(self.obj)

    def results(self) -> list[Row]:
        """One row per episode, ordered by episode index; ResultsIncomplete (a ResultsNotReady)
        when shards of the results are gone or not the operator's, never a partial list."""
        return result_ops.rows(self.document(), self.obj)

    def stop(self, wait: bool = False, timeout: float = 3600) -> dict:
        """Stop the batch early (``spec.stop``): no new episode starts, running ones end within
        their grace period, every finished row is kept. Returns the status, the final one with
        ``wait`` (phase ``Stopped``, or the batch's own verdict when it ended first)."""
        checked_timeout(timeout, zero_ok=True)   # before the stop, not after it
        self.obj = self.client.stop(self.obj)
        return self.wait(timeout=timeout) if wait else self.status

    def delete(self, wait: bool = True, timeout: float = 300) -> None:
        self.client.delete(self.obj, wait=wait, timeout=timeout)


class Sessions(session_commands.EndsOnExit):
    """A session batch (:meth:`Client.open_sessions`): ``session(i)`` opens episode ``i``'s
    sandbox, ``wait()`` returns the rows once the verifier graded them. A context manager: on
    exit, every session still holding is ended (episodes not started yet are not stopped)."""

    def __init__(self, handle: BatchHandle) -> None:
        self.handle = handle
        self._core = session_commands.SessionsCore(handle.obj)

    @property
    def name(self) -> str:
        return self.handle.name

    def _end_left_open(self) -> None:
        self.end_all()

    def session(self, index: int, timeout: float = sessions.SESSION_TIMEOUT) -> Session:
        """Episode ``index``'s sandbox, once its pod runs and holds (at most ``timeout`` s:
        TimeoutError); SessionOver when its session ended already or the batch did."""
        return Session(self.handle.client, self.handle.client._run(self._core.session(self.handle.obj, index,
                                                                                      timeout)))

    def end_all(self) -> None:
        self.handle.client._run(self._core.end_all(self.handle.obj))

    def wait(self, timeout: float = 3600) -> list[Row]:
        """Wait for the batch to end; its rows (``BatchHandle.results()``), each of a session
        opened here with ``session``: that session's stats (SessionStats, as the SDK saw them).
        The batch ends once every episode's session did: one never ended (``end()``, its ``with``
        block left, ``end_all()``), or never opened, holds until ``episodeTimeoutSeconds``."""
        self.handle.wait(timeout=timeout)
        return self._core.with_stats(self.handle.results())


class Session(session_commands.SessionView, session_commands.EndsOnExit):
    """One episode's sandbox, held for the trainer: ``run``, ``write_file``, ``read_file``,
    ``end``; ``index``, ``pod``, ``stats``, ``ended``. A context manager that ends it on exit."""

    def __init__(self, client: Client, core: session_commands.SessionCore) -> None:
        self._client, self._core = client, core

    def _end_left_open(self) -> None:
        self.end()

    def run(self, command: str | Sequence[str], *, on_output: sessions.OnOutput | None = None,
            timeout: float | None = None, stdin: bytes = b"",
            limit_bytes: int = sessions.RUN_LIMIT_BYTES) -> sessions.CommandResult:
        """Run ``command`` in the workspace (a string under ``/bin/sh -c``, a list as it is) with
        the episode's variables; ``on_output(stream, data)`` as output arrives. Its exit code is
        the result's (never raised); SessionOver once the session ended, TimedOut past ``timeout``
        (default: the episode's time), once the command and every process it started were
        stopped in the sandbox (the error says whether they were); interrupted (Ctrl-C), they are
        stopped so before KeyboardInterrupt goes on. It returns when its output closes: a process
        left in the background that holds it (``server &``) keeps it until the timeout, so
        redirect that process's output: ``nohup server > /dev/null 2>&1 &``."""
        return self._client._run(self._core.run(command, stdin=stdin, timeout=timeout, on_output=on_output,
                                                limit_bytes=limit_bytes))

    def write_file(self, path: str, data: bytes, *, timeout: float = sessions.FILE_TIMEOUT) -> None:
        """Write ``data`` to ``path`` (relative: in the workspace), whole or not at all; through a
        symbolic link, to the file it names. IsADirectoryError for a directory, SessionOver once
        the session ended (also when its end cut the write off), TimedOut past ``timeout``."""
        self._client._run(self._core.write_file(path, data, timeout=timeout))

    def read_file(self, path: str, *, max_bytes: int = sessions.MAX_FILE_BYTES,
                  timeout: float = sessions.FILE_TIMEOUT) -> bytes:
        """The file's bytes; FileNotFoundError when there is none, IsADirectoryError for a
        directory, SessionError past ``max_bytes``, SessionOver once the session ended (also when
        its end cut the read off), TimedOut past ``timeout``."""
        return self._client._run(self._core.read_file(path, max_bytes=max_bytes, timeout=timeout))

    def end(self) -> None:
        """End the session: the agent phase ends (exit 0) and the verifier grades the workspace.
        Idempotent; run() afterwards raises SessionOver. SessionLost (once) when its pod was lost
        before the end: nothing is graded, and ``session(i)`` opens the Job's retry."""
        self._client._run(self._core.end())
