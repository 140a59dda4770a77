"""The words of the API, defined once: phases, conditions, spec choices, episode outcomes, reasons,
well-known keys and the limits the operator and its readers share.

Every module (core, service, SDK, CLI, metrics, tests) imports these names instead of spelling
the strings again, so a phase or a reason cannot drift between the operator and its readers.
docs/design.md lists what each reason means; tests tie the CRD's enums to the enums here.

Each kind of word is an enum (``Phase``, ``StallReason``, ``EpisodeReason``, ...) whose members
are strings (``Word``): they compare equal to the plain strings the API server hands back, hash
like them (dict keys, sets), and print, format, JSON- and YAML-dump as their value. Not
``enum.StrEnum``: the SDK and the CLI import this module and run on Python 3.10. The tuples
(``PHASES``, ``STALL_REASONS``, ...) are the enums' members in order, never a second list; the
flat names (``RUNNING``, ``STALL_IMAGE``, ...) are the members themselves, for the many callers
that read better with them.
"""

from __future__ import annotations

import enum

import yaml


class Word(str, enum.Enum):
    """A word of the API: a str everywhere a str goes, its value wherever it is printed."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# yaml's safe representer knows str but not its subclasses, and the full one would write a Python
# object tag: both write a Word as the plain string it is (``rolloutbatch submit --dry-run -o yaml``
# dumps specs built with these words). Registered on the representer bases, so every dumper built
# on them (SafeDumper, CSafeDumper, Dumper and their subclasses) sees it.
def _represent_word(representer: yaml.representer.BaseRepresenter, word: Word) -> yaml.Node:
    return representer.represent_str(word.value)   # the value: libyaml's emitter takes no str subclass


for _representer in (yaml.representer.SafeRepresenter, yaml.representer.Representer):
    _representer.add_multi_representer(Word, _represent_word)


# --- batch phases (status.phase) ---------------------------------------------------------------
class Phase(Word):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    # spec.queueName: the Job waits, suspended, until Kueue admits it (again, after an eviction)
    QUEUED = "Queued"
    RUNNING = "Running"
    COLLECTING = "Collecting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    # spec.stop: the batch was stopped before every episode ended; what finished is kept. Its own
    # phase, not Failed: a stop is the owner's decision, not an error (its conditions still say
    # Finished, not Ready: core.conditions).
    STOPPED = "Stopped"


PENDING, PROVISIONING, RUNNING, COLLECTING = Phase.PENDING, Phase.PROVISIONING, Phase.RUNNING, Phase.COLLECTING
QUEUED = Phase.QUEUED
SUCCEEDED, FAILED, STOPPED = Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED
PHASES = tuple(Phase)
TERMINAL_PHASES = (SUCCEEDED, FAILED, STOPPED)
# A batch in these has not started its episodes; its status's reason and message say why it waits.
WAITING_PHASES = (PENDING, PROVISIONING, QUEUED)


# --- status.conditions: types, in the order the status lists them, and their statuses -----------
class ConditionType(Word):
    READY = "Ready"
    SUCCEEDED = "Succeeded"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    # True once the batch ended either way: what `kubectl wait` needs to wait for "done"
    FINISHED = "Finished"


class ConditionStatus(Word):
    """As every Kubernetes condition spells its status (metav1.ConditionStatus)."""
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


CONDITION_READY, CONDITION_SUCCEEDED = ConditionType.READY, ConditionType.SUCCEEDED
CONDITION_RECONCILING, CONDITION_STALLED = ConditionType.RECONCILING, ConditionType.STALLED
CONDITION_FINISHED = ConditionType.FINISHED
CONDITION_TYPES = tuple(ConditionType)
CONDITION_TRUE, CONDITION_FALSE, CONDITION_UNKNOWN = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
CONDITION_STATUSES = tuple(ConditionStatus)


# --- spec choices (each enum's first member is the default, as in the CRD) ----------------------
class IsolationMode(Word):
    """spec.isolation.namespace"""
    DEDICATED = "Dedicated"
    SHARED = "Shared"


class NetworkMode(Word):
    """spec.isolation.network"""
    DENY_ALL = "DenyAll"
    ALLOW_EGRESS = "AllowEgress"


class CleanupPolicy(Word):
    """spec.cleanup.sandbox. Not Kubernetes' restartPolicy/imagePullPolicy values, which share two words."""
    DELETE_ON_SUCCESS = "DeleteOnSuccess"
    ALWAYS = "Always"
    NEVER = "Never"


class PoolWhenEmpty(Word):
    """spec.poolRef.whenEmpty: what a pooled batch does when its pool has fewer warm pods than
    its first wave (core.pools): start the rest cold at once, or wait until the pool has them."""
    COLD = "Cold"
    WAIT = "Wait"


class ResultsPolicy(Word):
    """spec.cleanup.results: Delete (the results ConfigMaps are owned by the batch and go with it) or
    Retain (unowned, labelled, left when the batch is deleted or its TTL passes), as a
    PersistentVolume's reclaimPolicy says it."""
    DELETE = "Delete"
    RETAIN = "Retain"


ISOLATION_DEDICATED, ISOLATION_SHARED = IsolationMode.DEDICATED, IsolationMode.SHARED
ISOLATION_MODES = tuple(IsolationMode)
NETWORK_DENY_ALL, NETWORK_ALLOW_EGRESS = NetworkMode.DENY_ALL, NetworkMode.ALLOW_EGRESS
NETWORK_MODES = tuple(NetworkMode)
CLEANUP_DELETE_ON_SUCCESS, CLEANUP_ALWAYS = CleanupPolicy.DELETE_ON_SUCCESS, CleanupPolicy.ALWAYS
CLEANUP_NEVER = CleanupPolicy.NEVER
CLEANUP_POLICIES = tuple(CleanupPolicy)
POOL_COLD, POOL_WAIT = PoolWhenEmpty.COLD, PoolWhenEmpty.WAIT
POOL_WHEN_EMPTY = tuple(PoolWhenEmpty)
RESULTS_DELETE, RESULTS_RETAIN = ResultsPolicy.DELETE, ResultsPolicy.RETAIN
RESULTS_POLICIES = tuple(ResultsPolicy)


# --- episode outcomes (row["outcome"]) ---------------------------------------------------------
class Outcome(Word):
    """succeeded: a graded attempt whose reward counts; failed: the agent's failure (core.outcomes),
    graded with the worst reward; lost: what the agent cannot cause (infrastructure, the API, the
    image, the batch): it says nothing about the policy and is left out. stopped: cut off by
    spec.stop (the owner's decision, neither the agent's failure nor a loss): left out likewise."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"
    STOPPED = "stopped"


OUTCOME_SUCCEEDED, OUTCOME_FAILED, OUTCOME_LOST = Outcome.SUCCEEDED, Outcome.FAILED, Outcome.LOST
OUTCOME_STOPPED = Outcome.STOPPED
OUTCOMES = tuple(Outcome)


# --- batch reasons (status.reason, condition reasons) -------------------------------------------
class BatchReason(Word):
    """The reason of a batch on its way, or of its end when it ran to completion."""
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    QUEUED = "WaitingForAdmission"   # Kueue has not admitted the Job (its Workload's message says why)
    RUNNING = "EpisodesRunning"
    COLLECTING = "CollectingResults"
    SUCCEEDED = "EpisodesSucceeded"
    TOO_FEW = "TooFewSuccessfulEpisodes"
    FAILED = "Failed"       # a Failed phase's reason when no more precise one was given
    STOPPING = "Stopping"   # spec.stop seen: no new episode starts, running ones are ending
    STOPPED = "Stopped"     # the Stopped phase's reason
    WAITING_FOR_POOL = "WaitingForPool"   # spec.poolRef.whenEmpty Wait: the pool has too few warm pods yet


class StallReason(Word):
    """Stalled: the batch ended without running to completion; each names what a person must fix."""
    INVALID_SPEC = "InvalidSpec"
    RUNTIME_CLASS = "RuntimeClassNotFound"
    NAMESPACE_TERMINATING = "NamespaceTerminating"
    NAMESPACE_CONFLICT = "NamespaceConflict"
    NAME_CONFLICT = "NameConflict"
    RESULTS_CONFLICT = "ResultsConfigMapConflict"
    QUOTA = "QuotaExceeded"
    REFUSED = "ProvisioningRefused"
    IMAGE = "ImagePullFailed"
    API_REFUSED = "ApiRequestRefused"
    API_UNAVAILABLE = "ApiUnavailable"
    INTERNAL = "InternalError"
    INPUTS_MISSING = "InputsNotFound"     # a ConfigMap of spec.inputsFrom does not exist or is not opted in
    INPUTS_INVALID = "InvalidInputs"      # its keys or values are not the inputs it promised
    SANDBOX_DELETED = "SandboxDeleted"    # the Job (or its namespace) was deleted mid-batch
    PODS_NOT_CREATED = "PodsNotCreated"   # the Job controller could not create any episode pod
    PRIORITY_CLASS = "PriorityClassNotFound"
    PRIORITY_CLASS_DENIED = "PriorityClassNotAllowed"   # in the system range, the cluster's own
    UNSCHEDULABLE = "Unschedulable"       # no episode pod could be placed for --unschedulable-grace
    SECRET_MISSING = "SecretNotFound"     # a Secret of an env secretKeyRef is missing, not opted in, or lacks the key
    # the namespaced install (core.scope) cannot run it: Dedicated isolation, an unreadable PriorityClass
    CLUSTER_RIGHTS = "ClusterRightsRequired"
    QUEUE_NOT_FOUND = "LocalQueueNotFound"   # spec.queueName names no LocalQueue of the batch's namespace
    POOL_NOT_FOUND = "PoolNotFound"          # spec.poolRef names no RolloutPool of the batch's namespace
    POOL_CONFLICT = "PoolConflict"           # the batch asks for a sandbox other than its pool's


class EventReason(Word):
    """Reasons of the Kubernetes Events the operator writes that no status reason carries (the
    others: a batch's end, its stop and every stall reason are said as an Event of the same reason)."""
    PROVISIONED = "Provisioned"                   # the sandbox exists; the episodes start
    CLEANUP_FAILED = "SandboxCleanupFailed"       # after the end: the verdict stands, the TTL still runs
    FOREIGN_POD = "ForeignPodIgnored"             # a pod with the batch's label that its Job did not make
    RESULTS_NAME_TAKEN = "ResultsShardNameTaken"  # a shard's name held by a foreign ConfigMap: skipped
    UNSCHEDULABLE = "EpisodesUnschedulable"       # the scheduler cannot place episode pods (yet)
    IMAGE_NOT_SET = "InputImageNotSet"            # a gated pod's image patch was refused (spec.inputImages)
    # a declared egress peer selected no pod when the batch started: a warning, never a failure
    EGRESS_PEER_EMPTY = "EgressPeerSelectsNothing"
    # reward extras past their budget were left out (the rows say so: EpisodeFlag.EXTRAS_DROPPED),
    # said once per batch
    EXTRAS_DROPPED = "RewardExtrasDropped"
    ADMITTED = "Admitted"      # Kueue admitted the batch's Job: its episodes start (the queue wait is said)
    EVICTED = "EvictedByQueue"  # Kueue evicted it (preempted, ...): running episodes are cut off, it queues again
    CLAIMED = "ClaimedFromPool"  # spec.poolRef: how many episodes got a warm pod (hits) and how many start cold
    DELIVERY_FAILED = "EpisodeDeliveryFailed"  # a pod could not be handed its episode: evicted, the index re-runs
    # the later waves' claims failed GIVE_UP_AFTER times in a row: their pods start cold (service.later_claims)
    LATER_CLAIMS_FAILED = "LaterClaimsFailed"


# Events of one per-pod reason (ForeignPodIgnored, EpisodeDeliveryFailed) a batch posts: a flood
# (a neighbour's pods, a pool image that cannot take episodes) is said this many times, not once per
# pod and attempt; the operator's log still has each.
MAX_POD_EVENTS = 20


class PoolReason(Word):
    """A RolloutPool's condition reasons (core.pools): why it is, or is not, full of warm pods."""
    WARM = "PoolWarm"                      # size warm pods wait
    FILLING = "PoolFilling"                # pods are starting or preparing
    IMAGE = "ImagePullFailed"              # the template's image cannot be pulled
    RUNTIME_CLASS = "RuntimeClassNotFound"
    PRIORITY_CLASS = "PriorityClassNotFound"
    PRIORITY_CLASS_DENIED = "PriorityClassNotAllowed"   # above the user range (core.admission)
    PREPARE_FAILED = "PrepareFailed"       # spec.prepare exited non-zero or timed out
    CANNOT_START = "ContainerCannotStart"  # the runtime could not start the container (no /bin/sh, a bad mount)
    UNSCHEDULABLE = "Unschedulable"
    PODS_NOT_CREATED = "PodsNotCreated"    # the API refused the pool's pods (quota, admission)
    QUOTA = "QuotaExceeded"                # its namespace's ResourceQuota cannot hold spec.size warm pods
    CLUSTER_RIGHTS = "ClusterRightsRequired"   # a namespaced install cannot keep a pool (core.scope)
    INVALID_SPEC = "InvalidSpec"           # the operator cannot read the pool's spec (the message says why)
    REFUSED = "ProvisioningRefused"        # the API refused the pool's namespace or its objects
    API_UNAVAILABLE = "ApiUnavailable"     # transient API errors went on without a break (the give-up time)
    DELETING = "Deleting"                  # deleted: no pod is made; the deletion waits for batches on its pods


REASON_PENDING, REASON_PROVISIONING = BatchReason.PENDING, BatchReason.PROVISIONING
REASON_RUNNING, REASON_COLLECTING = BatchReason.RUNNING, BatchReason.COLLECTING
REASON_SUCCEEDED, REASON_TOO_FEW, REASON_FAILED = BatchReason.SUCCEEDED, BatchReason.TOO_FEW, BatchReason.FAILED
REASON_STOPPING, REASON_STOPPED = BatchReason.STOPPING, BatchReason.STOPPED
REASON_QUEUED = BatchReason.QUEUED
REASON_WAITING_FOR_POOL = BatchReason.WAITING_FOR_POOL
BATCH_REASONS = tuple(BatchReason)
EVENT_PROVISIONED = EventReason.PROVISIONED
EVENT_CLEANUP_FAILED = EventReason.CLEANUP_FAILED
EVENT_FOREIGN_POD = EventReason.FOREIGN_POD
EVENT_RESULTS_NAME_TAKEN = EventReason.RESULTS_NAME_TAKEN
EVENT_UNSCHEDULABLE = EventReason.UNSCHEDULABLE
EVENT_IMAGE_NOT_SET = EventReason.IMAGE_NOT_SET
EVENT_EGRESS_PEER_EMPTY = EventReason.EGRESS_PEER_EMPTY
EVENT_EXTRAS_DROPPED = EventReason.EXTRAS_DROPPED
EVENT_ADMITTED, EVENT_EVICTED = EventReason.ADMITTED, EventReason.EVICTED
EVENT_CLAIMED, EVENT_DELIVERY_FAILED = EventReason.CLAIMED, EventReason.DELIVERY_FAILED
EVENT_LATER_CLAIMS_FAILED = EventReason.LATER_CLAIMS_FAILED
POOL_REASONS = tuple(PoolReason)
# A pool stalled on a class its pods name (not on a pod that failed): no pod of its template can be made
POOL_CLASS_REASONS = (PoolReason.RUNTIME_CLASS, PoolReason.PRIORITY_CLASS, PoolReason.PRIORITY_CLASS_DENIED)
EVENT_REASONS = tuple(EventReason)
STALL_INVALID_SPEC = StallReason.INVALID_SPEC
STALL_RUNTIME_CLASS = StallReason.RUNTIME_CLASS
STALL_NAMESPACE_TERMINATING = StallReason.NAMESPACE_TERMINATING
STALL_NAMESPACE_CONFLICT = StallReason.NAMESPACE_CONFLICT
STALL_NAME_CONFLICT = StallReason.NAME_CONFLICT
STALL_RESULTS_CONFLICT = StallReason.RESULTS_CONFLICT
STALL_QUOTA = StallReason.QUOTA
STALL_REFUSED = StallReason.REFUSED
STALL_IMAGE = StallReason.IMAGE
STALL_API_REFUSED = StallReason.API_REFUSED
STALL_API_UNAVAILABLE = StallReason.API_UNAVAILABLE
STALL_INTERNAL = StallReason.INTERNAL
STALL_INPUTS_MISSING = StallReason.INPUTS_MISSING
STALL_INPUTS_INVALID = StallReason.INPUTS_INVALID
STALL_SANDBOX_DELETED = StallReason.SANDBOX_DELETED
STALL_PODS_NOT_CREATED = StallReason.PODS_NOT_CREATED
STALL_PRIORITY_CLASS = StallReason.PRIORITY_CLASS
STALL_PRIORITY_CLASS_DENIED = StallReason.PRIORITY_CLASS_DENIED
STALL_UNSCHEDULABLE = StallReason.UNSCHEDULABLE
STALL_SECRET_MISSING = StallReason.SECRET_MISSING
STALL_CLUSTER_RIGHTS = StallReason.CLUSTER_RIGHTS
STALL_QUEUE_NOT_FOUND = StallReason.QUEUE_NOT_FOUND
STALL_POOL_NOT_FOUND, STALL_POOL_CONFLICT = StallReason.POOL_NOT_FOUND, StallReason.POOL_CONFLICT
STALL_REASONS = tuple(StallReason)


# --- episode reasons (row["reason"]) and flags (row["flags"]) -----------------------------------
class EpisodeReason(Word):
    INFRASTRUCTURE = "InfrastructureFailure"
    LOG_UNAVAILABLE = "LogUnavailable"
    TIMEOUT = "Timeout"                  # the episode ran past episodeTimeoutSeconds
    BATCH_TIMEOUT = "BatchTimeout"       # the batch's activeDeadlineSeconds ended it (or it never ran)
    # the kubelet evicted the pod for going past its own storage limits (its emptyDir's sizeLimit, its
    # ephemeral-storage limit): the episode's doing, not infrastructure, so never retried
    STORAGE_LIMIT = "StorageLimitExceeded"
    IMAGE_PULL = "ImagePullFailed"
    NON_ZERO_EXIT = "NonZeroExit"
    RESTARTED = "Restarted"
    NO_READY = "NoReadyEvent"
    NO_REWARD = "NoRewardEvent"
    LOG_LIMIT = "LogLimitExceeded"
    DUPLICATE_READY = "DuplicateReady"
    DUPLICATE_REWARD = "DuplicateReward"
    IDENTITY = "IdentityMismatch"
    INVALID_REWARD = "InvalidReward"
    MISSING_TIMESTAMP = "MissingTimestamp"
    CLOCK_SKEW = "ClockSkew"
    REWARD_BEFORE_READY = "RewardBeforeReady"
    JOB_FAILED = "JobFailed"             # the Job ended (for a reason other than its deadline) without it
    BATCH_STALLED = "BatchStalled"       # the batch stopped (a Stalled reason) before this episode ended
    # spec.verifier: once it started, the verifier crashed, was killed, ran past its time or did not
    # report one usable reward. It had the agent's work in front of it: the agent's failure.
    VERIFIER_FAILED = "VerifierFailed"
    # spec.verifier: the agent phase ended but the verifier container never started (a create or
    # start error): nothing the agent did, so the episode is lost.
    VERIFIER_NOT_STARTED = "VerifierNotStarted"
    BATCH_STOPPED = "BatchStopped"       # spec.stop cut it off: it was running, or never started
    # Kueue evicted the batch's Job (preemption by a higher priority, ...) while the episode ran:
    # the Job controller deleted its pod. Nothing the agent did: lost.
    EVICTED = "EvictedByQueue"


class EpisodeFlag(Word):
    SKEW_TOLERATED = "ClockSkewWithinTolerance"
    # an event time beyond the tolerance on a row failed for another reason: no durations
    SKEW_BEYOND = "ClockSkewBeyondTolerance"
    # spec.verifier: the agent printed a reward-shaped event; only the verifier's reward counts.
    AGENT_REWARD_IGNORED = "AgentRewardIgnored"
    # spec.verifier: the agent ran past episodeTimeoutSeconds and was stopped; the verifier graded it.
    AGENT_TIMED_OUT = "AgentTimedOut"
    # reward extras past their budget (core.events) were left out; the row's message names them
    # (and EventReason.EXTRAS_DROPPED, the same word, says it once per batch)
    EXTRAS_DROPPED = "RewardExtrasDropped"


EP_INFRASTRUCTURE = EpisodeReason.INFRASTRUCTURE
EP_LOG_UNAVAILABLE = EpisodeReason.LOG_UNAVAILABLE
EP_TIMEOUT = EpisodeReason.TIMEOUT
EP_BATCH_TIMEOUT = EpisodeReason.BATCH_TIMEOUT
EP_STORAGE_LIMIT = EpisodeReason.STORAGE_LIMIT
EP_IMAGE_PULL = EpisodeReason.IMAGE_PULL
EP_NON_ZERO_EXIT = EpisodeReason.NON_ZERO_EXIT
EP_RESTARTED = EpisodeReason.RESTARTED
EP_NO_READY = EpisodeReason.NO_READY
EP_NO_REWARD = EpisodeReason.NO_REWARD
EP_LOG_LIMIT = EpisodeReason.LOG_LIMIT
EP_DUPLICATE_READY = EpisodeReason.DUPLICATE_READY
EP_DUPLICATE_REWARD = EpisodeReason.DUPLICATE_REWARD
EP_IDENTITY = EpisodeReason.IDENTITY
EP_INVALID_REWARD = EpisodeReason.INVALID_REWARD
EP_MISSING_TIMESTAMP = EpisodeReason.MISSING_TIMESTAMP
EP_CLOCK_SKEW = EpisodeReason.CLOCK_SKEW
EP_REWARD_BEFORE_READY = EpisodeReason.REWARD_BEFORE_READY
EP_JOB_FAILED = EpisodeReason.JOB_FAILED
EP_BATCH_STALLED = EpisodeReason.BATCH_STALLED
EP_VERIFIER_FAILED = EpisodeReason.VERIFIER_FAILED
EP_VERIFIER_NOT_STARTED = EpisodeReason.VERIFIER_NOT_STARTED
EP_BATCH_STOPPED = EpisodeReason.BATCH_STOPPED
EP_EVICTED = EpisodeReason.EVICTED
EPISODE_REASONS = tuple(EpisodeReason)
FLAG_SKEW_TOLERATED = EpisodeFlag.SKEW_TOLERATED
FLAG_SKEW_BEYOND = EpisodeFlag.SKEW_BEYOND
FLAG_AGENT_REWARD_IGNORED = EpisodeFlag.AGENT_REWARD_IGNORED
FLAG_AGENT_TIMED_OUT = EpisodeFlag.AGENT_TIMED_OUT
FLAG_EXTRAS_DROPPED = EpisodeFlag.EXTRAS_DROPPED
EPISODE_FLAGS = tuple(EpisodeFlag)
# The log read found no pod: it was deleted (a node's eviction, the taint manager, PodGC) after it
# ended and before it was read. What it did is lost with it: outcome lost, never a failure. (A
# row's message, not a reason.)
LOG_POD_GONE = "the pod was deleted before its log was read"


# --- event channels (row["channel"]): where an episode's events were read -----------------------
class Channel(Word):
    TERMINATION_MESSAGE = "terminationMessage"   # state.terminated.message: no log read
    LOG = "log"                                  # the container's stdout/stderr, read once


CHANNEL_TERMINATION_MESSAGE, CHANNEL_LOG = Channel.TERMINATION_MESSAGE, Channel.LOG
CHANNELS = tuple(Channel)

# --- limits shared by the operator and its readers ----------------------------------------------
LOG_LIMIT_BYTES = 1 << 20   # default bytes of an episode's log the operator reads and the CLI keeps
# The end of an episode's log that its results row keeps (``log_tail``), so the log outlives its
# pod (the default cleanup deletes a succeeded batch's sandbox). A failure's tail says what went
# wrong; a success's is smaller: every row of a batch shares one ConfigMap's budget
# (core.results), and the operator holds the rows in memory for the batch's life.
LOG_TAIL_BYTES = 4 * 1024             # failed and lost episodes
SUCCESS_LOG_TAIL_BYTES = 1024         # succeeded episodes

# --- Kubernetes facts we read -------------------------------------------------------------------
class PodPhase(Word):
    """A pod's status.phase: Kubernetes' words, not a batch's (``Phase``), though four are spelt alike."""
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class RestartPolicy(Word):
    """A pod's spec.restartPolicy. Every episode pod's (a Job's, a pool's) is Never: an ended
    container never runs again, so its end is the episode's (core.pod_reading.settled_phase)."""
    NEVER = "Never"


# Kubernetes' conditions (a pod's, a Job's) have the statuses of ``ConditionStatus``.
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
# A container the runtime saw killed for its cgroup's memory limit (any of its processes, not only
# its PID 1: the launcher may have exited 0 after it).
OOM_KILLED_REASON = "OOMKilled"
# Waiting reasons of a container whose image the node cannot run (kubelet's images package).
IMAGE_WAITING_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# Job condition reason when activeDeadlineSeconds passed (Job controller).
JOB_DEADLINE_REASON = "DeadlineExceeded"
# Terminated reasons of a container the runtime could not start (containerd, dockershim).
START_ERROR_REASONS = ("StartError", "ContainerCannotRun")
# The verifier launcher's exit code when it stopped the verifier at verifier.timeoutSeconds
# (timeout(1)'s code).
VERIFIER_TIMEOUT_EXIT = 124
# A pool pod's launcher exits with this when the pod never ran an episode (core.pool_delivery): its
# prepare failed or timed out, or its delivery was broken. An agent's own 121 is reported as 1.
NOT_DELIVERED_EXIT = 121
# The agent launcher exits with this when the agent ran more than VERIFIER_SLACK_SECONDS past its
# time (it killed its watchdog; core.launchers), in a Job's pod as in a pool's: the Job fails the
# index on it (the agent's container is judged first) and the verdict is the agent's Timeout, so
# neither a verifier grading the stolen time nor one it kept from its phase counts. A pool's
# launcher without a verifier exits with it when it stopped its agent at its time, or saw it run
# past (core.pool_delivery): Timeout too (core.verdict.stopped_at_its_time).
AGENT_OVERRAN_EXIT = 122
# A Job pod's agent launcher exits with this, after its record, when the kernel killed a process of
# its container for its memory (core.launchers.oom_killed): the runtime reports that container
# OOMKilled whatever its exit code, and the kubelet fails the pod before its verifier. Non-zero, so
# the Job fails the index on the agent's own rule (core.manifests.job). With 0 the pod was seen
# Pending until the operator's deadline ended it, and only its never-started verifier's 137 ("could
# not be located") kept the Job from counting it against backoffLimitPerIndex: a new pod would have
# run the agent again, its index already final.
AGENT_OOM_KILLED_EXIT = 123
