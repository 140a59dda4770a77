"""A pooled batch's hand-overs: each claimed pod is given its episode (core.pool_delivery).

:class:`EpisodeDelivery` runs every round of the batch: each pod of the batch whose container
has started (its startupProbe passed: prepared and waiting) and that was not yet handed its
episode gets it on its stdin through ``pods/attach`` (core.pool_delivery: no process is started
in the container for it, which an exec's was): through the channel the pool opened to the pod
while it waited (service.warm_channels), else an attach opened then; then the pod is annotated
with the time. A claimed pod's record waits for its batch's labels while the first wave is
handed over (:meth:`EpisodeDelivery.settled`), and goes with them: one write per pod where two
were, in the seconds twenty hand-overs share the node with them. A pod whose
delivery fails is evicted: it never ran an episode, so its eviction is an infrastructure retry
of the index (a DisruptionTarget, counted by the Job's podFailurePolicy), not a failed episode.
With ``spec.verifier`` the episode goes to the ``agent`` container, and once that container has
ended, the verifier's files and input to the ``verifier-files`` container (the one that can write
them: core.pool_children.pod_spec), then the verifier's phase to the ``verifier`` container the same way
(annotated apart).

An eviction re-rolls an attempt, so it is kept for what the operator caused:
- a pod that existed before this delivery began (an earlier operator may have handed it its
  phase and died before annotating it) is never evicted: a repeat writes to a stdin its launcher
  no longer reads (or completes a cut script, which the launcher refuses), or meets the agent's
  output, so the pod's deadline ends it instead, which for a pod that never
  got its episode is not counted either (the cost: such a pod waits out its deadline before its
  retry);
- a hand-over that sent every byte and heard nothing back is not evicted either (the pod may run
  its phase, its line lost or buried by the agent's output): its deadline is lowered as if the
  phase began when the bytes began to go, and ends it;
- the time left is checked once the hand-over has its slot, so an episode queued behind others is
  never handed less than its time;
- an agent that ran past its own time (it can kill its watchdog) is handed its verifier all the
  same when that is late: what the pod's deadline then cuts short is the agent's failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from rolloutbatch.core import defaults as d
from rolloutbatch.core import launchers, naming, pool_delivery, pool_spec, pools, verdict
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.groups import group_and_sample
from rolloutbatch.core.model import BatchRef, BatchSpec, PodFacts, SpecError
from rolloutbatch.core.spec import INPUT_KEY
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.faults import crash_point
from rolloutbatch.kube.errors import KubeError, Unconfirmed
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service.warm_channels import WarmChannels
from rolloutbatch.service.context import Emit

DELIVERY_TIMEOUT = 20.0      # one hand-over; past it the pod is evicted
WRITER_END_PAUSE = 2.0       # between tries to end a files writer whose verifier ended before its phase
MAX_DELIVERIES = 32          # hand-overs in flight at once per batch
ANNOTATE_TRIES = 3


class EpisodeDelivery:
    """Hands every started, undelivered pod of a pooled batch its episode, and with a verifier,
    once the agent's container has ended, the verifier its phase (see the module docstring)."""

    def __init__(self, storage: Storage, pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec, emit: Emit,
                 log: logging.Logger, observe: Callable[[str, str, bool, float], None] | None = None,
                 since: float | None = None, channels: WarmChannels | None = None,
                 handed: Callable[[str, float, bool], None] | None = None) -> None:
        self.storage, self.pool_storage, self.ref, self.spec = storage, pool_storage, ref, spec
        self.channels = channels   # attaches the pool opened to its warm pods (service.warm_channels)
        self.emit, self.log, self.observe = emit, log, observe   # observe: Metrics.claim_observed
        # hears of each hand-over confirmed (pod uid, when, the verifier's phase): BatchTracker.handed_over
        self.handed = handed
        # (pod uid, phase): _done is kept whole (one per episode): a pod delivered at its claim may
        # be seen by the watch only later, with a snapshot from before its annotation
        self._in_flight: set[tuple[str, str]] = set()
        self._done: set[tuple[str, str]] = set()
        # when to try again (time.monotonic): a verifier phase whose files went unconfirmed (unless
        # its writer is seen to have ended), a files writer's end whose attach failed
        self._retry_after: dict[tuple[str, str], float] = {}
        self._tasks: set[asyncio.Task] = set()
        self._failures_said = 0   # EpisodeDeliveryFailed Events posted (at most v.MAX_POD_EVENTS)
        # agent hand-overs to claimed pods held for the enrolment's write while the first wave is
        # handed over: pod uid -> its record
        self._holding = False
        self._unrecorded: dict[str, pools.HandOverRecord] = {}
        self._slots = asyncio.Semaphore(MAX_DELIVERIES)
        self._task_path: str | None = None
        self._input_copies: dict[str, str] | None = None   # spec.inputsFrom: key -> the group's input
        # pods claimed or created before this (default: now, the batch's first round in this
        # process) may have been handed over by an earlier operator (maybe_handed_over)
        self._since = time.time() if since is None else since

    def claimed(self, pods: list[dict], held: bool = False) -> None:
        """Warm pods just claimed: handed their episodes at once, while the Job is being created
        (a claimed pod is started, so it waits for nothing else). ``held``: their records wait for
        :meth:`settled` to give them to the enrolment (which then always follows)."""
        self._holding = self._holding or held
        for pod in pods:
            self._start(pod_facts(pod))

    def cancel(self) -> None:
        """The hand-overs in flight stopped (the batch stalled: no episode starts from now). A pod
        cut off mid-script refuses it (core.pool_delivery), and its deadline or the Job's deletion
        ends it."""
        for task in list(self._tasks):
            task.cancel()

    async def settled(self, within: float) -> dict[str, pools.HandOverRecord]:
        """Until the hand-overs in flight now are done, or ``within`` seconds; then the records of
        those held (pod uid -> record), for the enrolment to write with the pods'
        labels and take out (service.pool_claims.enrol). Hand-overs done from now on record
        themselves, and the next :meth:`round` writes any record the enrolment left."""
        if self._tasks and within > 0:
            await asyncio.wait(set(self._tasks), timeout=within)
        self._holding = False
        return self._unrecorded

    def round(self, tracker: BatchTracker) -> None:
        # Rounds come after the provisioning: a hold its failure left (no enrolment, no
        # settled()) ends here, and what it held is written alone.
        self._holding = False
        if self._unrecorded:
            self._record_left()
        if not self.spec.pool_name or tracker.stopping:
            return
        live = tracker.live_pods()
        # as the tracker's own rule (a claim before its adoption, one ended); once per round
        held = pools.held_indexes(tracker.index_holders())
        for facts in live:
            # an index already final (its verdict recorded) or held by another pod gets no second episode
            if facts.index not in tracker.results and not pools.shadowed(facts, held):
                self._start(facts)
            if self.spec.verifier is not None:
                self._start_verifier(facts)
                self._end_writer(facts)

    def _start(self, facts: PodFacts) -> None:
        if facts.delivered_at is None and facts.container_started:
            self._launch(facts, _AGENT_PHASE)

    def _start_verifier(self, facts: PodFacts) -> None:
        """The agent's container ended (its launcher wrote the record, or it never ran): the verifier's
        turn. It never starts before: the agent's processes are all gone by then."""
        # its files writer too, where it has one: an attach to a container not started yet fails,
        # and would evict a pod whose agent ran (a cold pod's containers start one after another)
        writer_ready = not facts.has_files_writer or facts.files_writer_started or facts.files_writer_exit is not None
        if facts.verifier_delivered_at is None and facts.verifier_started and writer_ready and facts.agent is not None \
                and facts.agent.state == "terminated":
            self._launch(facts, _VERIFIER_PHASE)

    def _end_writer(self, facts: PodFacts) -> None:
        """The verifier's container ended before its phase (a kill, its memory): the files writer,
        still waiting, would keep the pod running to its deadline, and the row would say that
        deadline, not the verifier's end. It is handed nothing to write, and ends."""
        key = (facts.uid, _WRITER_END)
        if not (facts.has_files_writer and facts.files_writer_started and facts.files_writer_exit is None
                and facts.exit_code is not None and facts.phase == v.PodPhase.RUNNING) \
                or key in self._done or (facts.uid, _VERIFIER_PHASE) in self._in_flight \
                or time.monotonic() < self._retry_after.get(key, 0.0):
            return
        self._done.add(key)

        async def end() -> None:
            try:
                await self.storage.attach_to_pod(facts.namespace, facts.name, naming.VERIFIER_FILES_CONTAINER,
                                                 pool_delivery.delivery(b""), ack=pool_delivery.RECEIVED.encode(),
                                                 timeout=DELIVERY_TIMEOUT, hello=pool_delivery.HELLO)
            except Exception as exc:  # noqa: BLE001 - tried again by a later round (a repeat is refused whole)
                self.log.warning("Ending the verifier's files writer of pod %s failed (%s); tried again",
                                 facts.name, exc)
                self._done.discard(key)
                self._retry_after[key] = time.monotonic() + WRITER_END_PAUSE
        task = asyncio.create_task(end())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _launch(self, facts: PodFacts, phase: str) -> None:
        key = (facts.uid, phase)
        if key in self._done or key in self._in_flight or facts.phase != v.PodPhase.RUNNING or facts.deleting \
                or facts.index is None:
            return
        if key in self._retry_after and facts.files_writer_exit is None and time.monotonic() < self._retry_after[key]:
            return
        self._in_flight.add(key)
        task = asyncio.create_task(self._deliver(facts, phase))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def episode(self, index: int, task_mount_path: str = d.TASK_MOUNT_PATH,
                input_json: str | None = None) -> pool_delivery.Episode:
        """Episode ``index``; without spec.command, the default one under the pool's task path.
        ``input_json``: its group's input when it comes from spec.inputsFrom (:meth:`_input`)."""
        spec = self.spec
        command = spec.command or d.default_command(task_mount_path, d.EPISODE_SCRIPT)
        return pool_delivery.Episode(batch_name=self.ref.name, index=index, samples_per_input=spec.samples_per_input,
                                     command=(*command, *spec.args), env=_plain(spec.env),
                                     input_json=input_json if input_json is not None else
                                     pool_delivery.input_json(spec.inputs, index, spec.samples_per_input),
                                     timeout_seconds=spec.episode_timeout_seconds)

    def verification(self, index: int, input_json: str | None = None) -> pool_delivery.Episode:
        """The verifier phase of episode ``index``: its command, env, files and time."""
        ver = self.spec.verifier
        assert ver is not None
        return dataclasses.replace(
            self.episode(index, input_json=input_json), command=(*ver.command, *ver.args), env=_plain(ver.env),
            timeout_seconds=ver.timeout_seconds, files=tuple(sorted(ver.files.items())), files_dir=ver.mount_path,
            write_failed_exit=1)

    async def _input(self, index: int) -> str | None:
        """The group's input from the batch's copies of spec.inputsFrom (read once), or None
        without spec.inputsFrom. A copy gone (deleted by hand) is the delivery's failure."""
        if not self.spec.inputs_from:
            return None
        if self._input_copies is None:
            data: dict[str, str] = {}
            for j in range(len(self.spec.inputs_from)):
                name = naming.inputs_shard_name(self.ref, j)
                copy = await self.storage.get("ConfigMap", name, self.ref.namespace)
                if copy is None:
                    raise RuntimeError(f"the batch's copy of spec.inputsFrom, ConfigMap {name}, is gone")
                data.update((copy.get("data") or {}))
            self._input_copies = data
        group, _ = group_and_sample(index, self.spec.samples_per_input)
        key = INPUT_KEY.format(group)
        if key not in self._input_copies:
            raise RuntimeError(f"no {key} in the batch's copies of spec.inputsFrom")
        return self._input_copies[key]

    async def _task_mount_path(self, facts: PodFacts) -> str:
        """Where the pod mounts the task: its own spec says (PodFacts.task_mount_path). Claims an
        earlier operator made before the pool's task.mountPath moved keep the old path, while the
        Job, made from the pool as it is now, and the pool say the new one. Only a pod that does
        not say: the batch's Job's template, else the pool (its Job not made yet), read once."""
        if facts.task_mount_path is not None:
            return facts.task_mount_path
        if self._task_path is None:
            job = await self.storage.get("Job", naming.job_name(self.ref), facts.namespace)
            found = pool_spec.task_mount_path_in((((job or {}).get("spec") or {}).get("template") or {}).get("spec")
                                                 or {})
            if found is None:
                body = await self.pool_storage.get_pool(self.ref.namespace, self.spec.pool_name or "")
                try:
                    found = pool_spec.parse_pool_spec((body or {}).get("spec") or {}).task_mount_path
                except SpecError:
                    found = d.TASK_MOUNT_PATH
            self._task_path = found
        return self._task_path

    async def _deliver(self, facts: PodFacts, phase: str) -> None:
        assert facts.index is not None
        key = (facts.uid, phase)
        try:
            try:
                await self._hand_over(facts, phase)
            except asyncio.CancelledError:
                raise
            except _FilesUnconfirmed as exc:
                # The writer may have written and ended (its line lost): not a failure yet. A
                # later round sees it ended 0 (then only the verifier is handed its phase) or
                # hands the files again (a writer that never got them); its deadline bounds this.
                self.log.warning("Handing the verifier's files of episode %s to pod %s went unconfirmed (%s); "
                                 "tried again once the pod's status says where the writer is", facts.index,
                                 facts.name, exc)
                if key not in self._retry_after:   # the first time: said, as every hand-over's trouble is
                    self._say_failed(f"pod {facts.name} (episode {facts.index}) was sent its verifier's files and did "
                                     f"not confirm them ({exc}); tried again until the pod's status shows its files "
                                     "writer ended, or the pod's deadline")
                self._retry_after[key] = time.monotonic() + DELIVERY_TIMEOUT
                return
            except _SentUnconfirmed as sent:
                # Every byte went and no word came back: the pod may run its phase (its line lost).
                # Evicting it would re-roll an attempt that may be running, so its deadline ends
                # it, lowered as if it had its episode when the bytes began to go.
                if phase == _AGENT_PHASE:
                    await self._annotate(facts.namespace, facts.name,
                                         {naming.ANNOTATION_UNCONFIRMED_AT: _stamp(sent.began)},
                                         self._tightened(facts, sent.began))
                self._leave_to_deadline(facts, phase, sent.error)
                return
            except Exception as exc:  # noqa: BLE001 - any failure: the pod never ran this episode
                if self.maybe_handed_over(facts):
                    self._leave_to_deadline(facts, phase, exc)
                else:
                    await self._evict(facts, phase, exc)
                return
            crash_point("pool:delivered")
            now = time.time()
            self._done.add(key)
            if self.handed is not None:
                self.handed(facts.uid, now, phase == _VERIFIER_PHASE)
            if phase == _AGENT_PHASE and self.observe is not None and self.spec.pool_name:
                # claim latency: from the claim (a hit) or the cold pod's creation (a miss)
                self.observe(self.ref.namespace, self.spec.pool_name, facts.claimed_at is not None, now - facts.created)
            # the time the hand-over waited is not the agent's
            deadline = self._tightened(facts, now) if phase == _AGENT_PHASE else None
            if phase == _AGENT_PHASE and self._holding and facts.claimed_at is not None:
                self._unrecorded[facts.uid] = pools.HandOverRecord(facts.namespace, facts.name,
                                                                   {_ANNOTATIONS[phase]: _stamp(now)}, deadline)
                return
            await self._annotate(facts.namespace, facts.name, {_ANNOTATIONS[phase]: _stamp(now)}, deadline)
        finally:
            self._in_flight.discard(key)

    def _tightened(self, facts: PodFacts, handed_at: float) -> int | None:
        return pools.tightened_deadline(facts.active_deadline_seconds, facts.own_deadline_at, handed_at,
                                        self._episode_seconds(), verified=self.spec.verifier is not None)

    def _episode_seconds(self) -> int:
        return pools.batch_episode_seconds(self.spec)

    def maybe_handed_over(self, facts: PodFacts) -> bool:
        return pool_delivery.maybe_handed_over(facts, self._since)

    def agent_overran(self, facts: PodFacts) -> bool:
        return verdict.agent_overran(facts, self.spec.episode_timeout_seconds)

    def _too_late(self, facts: PodFacts, phase: str, now: float) -> str | None:
        """Why the phase can no longer have its whole time before the pod's deadline (set at the
        claim), or None. Handed over late (queued behind others), the phase would be cut
        short by the kubelet and read as the episode's own failure; the pod is evicted instead: an
        infrastructure retry of the index (a pod an earlier operator may have served is left to
        its deadline instead: :meth:`maybe_handed_over`). Not when the agent made it late
        (:meth:`agent_overran`): a re-roll would reward that."""
        if facts.own_deadline_at is None:
            return None
        spec = self.spec
        if phase == _VERIFIER_PHASE and (self.agent_overran(facts) or (
                facts.agent is not None and facts.agent.exit_code == v.AGENT_OVERRAN_EXIT)):
            return None   # the agent made it late (its launcher said so, or the API's times do)
        if phase == _AGENT_PHASE:
            need = self._episode_seconds()
        else:
            assert spec.verifier is not None
            need = spec.verifier.timeout_seconds + launchers.VERIFIER_SLACK_SECONDS
        left = facts.own_deadline_at - now
        if left >= need:
            return None
        return f"too late to hand over its {phase} phase: {max(0, int(left))} s left before the pod's deadline, {need} s needed"

    async def _script(self, facts: PodFacts, phase: str) -> tuple[bytes, bytes | None]:
        """The phase's script, and what the verifier's files writer is handed first (None: no
        writer, or it has written already: an earlier operator handed it over)."""
        assert facts.index is not None
        writer = naming.VERIFIER_FILES_CLAIM_MOUNT_PATH if phase == _VERIFIER_PHASE and facts.has_files_writer \
            and facts.files_writer_exit is None else None
        if phase == _AGENT_PHASE:
            episode = self.episode(facts.index, await self._task_mount_path(facts),
                                   await self._input(facts.index))
            return pool_delivery.episode_script(dataclasses.replace(episode, episode_id=facts.name)), None
        if facts.agent is None or facts.agent.exit_code != 0:
            # the agent never ran, or its launcher failed: nothing to grade (the writer only ends)
            return pool_delivery.ABORT_SCRIPT, b"" if writer else None
        if facts.files_writer_exit not in (None, 0):
            # it ended without the files (deleted, or a cut delivery it refused): nothing to grade with
            raise RuntimeError(f"the verifier's files writer ended with exit code {facts.files_writer_exit} "
                               "before it was handed the files")
        episode = dataclasses.replace(self.verification(facts.index, await self._input(facts.index)),
                                      episode_id=facts.name)
        script = pool_delivery.episode_script(episode, naming.VERIFIER_CLAIM_MOUNT_PATH,
                                              written_by=naming.VERIFIER_FILES_CLAIM_MOUNT_PATH
                                              if facts.has_files_writer else None)
        return script, pool_delivery.files_script(episode, writer) if writer else None

    async def _hand_over(self, facts: PodFacts, phase: str) -> None:
        """The phase's script on the container's stdin (pods/attach); returns once its launcher
        said it read the whole of it (core.pool_delivery.RECEIVED). The verifier's is handed
        over only after its files writer said it wrote them."""
        script, files = await self._script(facts, phase)
        container = _CONTAINERS[phase] if self.spec.verifier is not None else naming.CONTAINER_NAME
        async with self._slots:
            late = self._too_late(facts, phase, time.time())   # after the queue: its wait counts
            if late:
                raise RuntimeError(late)
            if files is not None:
                try:
                    await self.storage.attach_to_pod(facts.namespace, facts.name, naming.VERIFIER_FILES_CONTAINER,
                                                     pool_delivery.delivery(files),
                                                     ack=pool_delivery.RECEIVED.encode(), timeout=DELIVERY_TIMEOUT,
                                                     hello=pool_delivery.HELLO)
                except Unconfirmed as exc:
                    raise _FilesUnconfirmed(str(exc)) from None
                # the writer's attach took time of the verifier's: checked again
                late = self._too_late(facts, phase, time.time())
                if late:
                    raise RuntimeError(late)
            # The pool's channel to the pod when it has a live one (taken even for the verifier's
            # phase: no channel is opened to a pod once taken), else an attach opened now.
            channel = await self.channels.take(facts.uid, container) if self.channels is not None else None
            began = time.time()
            try:
                if channel is not None and phase == _AGENT_PHASE:
                    await channel.deliver(pool_delivery.delivery(script), timeout=DELIVERY_TIMEOUT)
                else:
                    if channel is not None:
                        await channel.close()
                    await self.storage.attach_to_pod(facts.namespace, facts.name, container,
                                                     pool_delivery.delivery(script),
                                                     ack=pool_delivery.RECEIVED.encode(), timeout=DELIVERY_TIMEOUT,
                                                     hello=pool_delivery.HELLO)
            except Unconfirmed as exc:
                raise _SentUnconfirmed(exc, began) from None

    async def _annotate(self, namespace: str, name: str, annotations: dict[str, str], deadline: int | None) -> None:
        """The delivery's time on the pod (its record across a restart), with its deadline lowered
        to ``deadline`` when given. The phase runs already: a failure here is retried, never a
        reason to evict it (a repeated delivery is a no-op)."""
        for attempt in range(ANNOTATE_TRIES):
            try:
                await self.pool_storage.annotate_pod(namespace, name, annotations, active_deadline_seconds=deadline)
                return
            except KubeError as exc:
                self.log.warning("Annotating pod %s as delivered failed (%s)", name, exc)
                await asyncio.sleep(0.5 * (attempt + 1))

    def _record_left(self) -> None:
        """The held records the enrolment did not write (its pod gone, its index annotation edited,
        its write failed), each written alone."""
        records, self._unrecorded = list(self._unrecorded.values()), {}
        for record in records:
            task = asyncio.create_task(self._annotate(record.namespace, record.name, dict(record.annotations),
                                                      record.active_deadline_seconds))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _leave_to_deadline(self, facts: PodFacts, phase: str, exc: BaseException) -> None:
        """A pod that may have its phase (an earlier operator may have handed it over:
        :meth:`maybe_handed_over`; or every byte went and the answer did not come) is not evicted:
        its deadline ends it, and a pod that never got its episode is not counted."""
        what = "episode" if phase == _AGENT_PHASE else "verifier phase"
        self.log.warning("Delivering the %s of episode %s to pod %s failed (%s); it may have been handed over: "
                         "left to its deadline", what, facts.index, facts.name, exc)
        self._say_failed(
                  f"pod {facts.name} (episode {facts.index}) could not be handed its {what} ({exc}); it may have it "
                  "(an earlier operator's hand-over, or this one's answer lost), so it runs to its deadline (if it "
                  "never got its episode, it is not counted and the index runs again)")
        self._done.add((facts.uid, phase))

    def _say_failed(self, message: str) -> None:
        """An EpisodeDeliveryFailed Event, up to v.MAX_POD_EVENTS per batch (the log has every one)."""
        if self._failures_said >= v.MAX_POD_EVENTS:
            return
        self._failures_said += 1
        if self._failures_said == v.MAX_POD_EVENTS:
            # first: the Event's message is cut at its end (handlers.batches.event_message)
            message = f"further delivery failures of this batch are in the operator's log only; {message}"
        self.emit("Warning", v.EVENT_DELIVERY_FAILED, message)

    async def _evict(self, facts: PodFacts, phase: str, exc: BaseException) -> None:
        what = "episode" if phase == _AGENT_PHASE else "verifier phase"
        self.log.warning("Delivering the %s of episode %s to pod %s failed (%s); evicting it",
                         what, facts.index, facts.name, exc)
        self._say_failed(
                  f"pod {facts.name} (episode {facts.index}) could not be handed its {what} ({exc}); it is "
                  "evicted and the index runs again")
        try:
            await self.storage.evict_pod(facts.namespace, facts.name)
        except Exception as evict_error:  # noqa: BLE001 - its deadline ends it (NOT_DELIVERED_EXIT: lost)
            self.log.warning("Evicting pod %s failed: %s", facts.name, evict_error)
        self._done.add((facts.uid, phase))


# The two phases a pool's pod is handed, where each goes, and the annotation that records it.
_AGENT_PHASE, _VERIFIER_PHASE = "agent", "verifier"
_WRITER_END = "writer-end"   # the files writer told to end: its verifier ended before its phase
_CONTAINERS = {_AGENT_PHASE: naming.AGENT_CONTAINER, _VERIFIER_PHASE: naming.VERIFIER_CONTAINER}
_ANNOTATIONS = {_AGENT_PHASE: naming.ANNOTATION_DELIVERED_AT,
                _VERIFIER_PHASE: naming.ANNOTATION_VERIFIER_DELIVERED_AT}


class _FilesUnconfirmed(Exception):
    """The verifier's files writer was sent every byte of its files and said nothing back."""


class _SentUnconfirmed(Exception):
    """A hand-over that sent every byte and heard nothing back (kube.errors.Unconfirmed), and when
    it began."""

    def __init__(self, error: Unconfirmed, began: float) -> None:
        super().__init__(str(error))
        self.error, self.began = error, began


def _stamp(seconds: float) -> str:
    """A time as the annotations hold it (unix seconds, milliseconds)."""
    return f"{seconds:.3f}"


def _plain(env: tuple[dict, ...] | list) -> tuple[tuple[str, str], ...]:
    """Plain name/value pairs (a pooled batch has no Secret keys: core.spec refuses them)."""
    return tuple((e["name"], str(e.get("value", ""))) for e in env if "valueFrom" not in e)
