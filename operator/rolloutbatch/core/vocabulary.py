"""The words of the API, defined once: phases, conditions, spec choices, episode outcomes, reasons,
well-known keys and the limits the operator and its readers share.

Every module (core, service, SDK, CLI, metrics, tests) imports these names instead of spelling
the strings again, so a phase or a reason cannot drift between the operator and its readers.
docs/design.md lists what each reason means.
"""

from __future__ import annotations

# --- batch phases (status.phase) ---------------------------------------------------------------
PENDING, PROVISIONING, RUNNING, COLLECTING = "Pending", "Provisioning", "Running", "Collecting"
SUCCEEDED, FAILED = "Succeeded", "Failed"
# spec.stop: the batch was stopped before every episode ended; what finished is kept. Its own
# phase, not Failed: a stop is the owner's decision, not an error (its conditions still say
# Finished, not Ready: core.conditions).
STOPPED = "Stopped"
PHASES = (PENDING, PROVISIONING, RUNNING, COLLECTING, SUCCEEDED, FAILED, STOPPED)
TERMINAL_PHASES = (SUCCEEDED, FAILED, STOPPED)

# --- status.conditions: types, in the order the status lists them, and their statuses -----------
CONDITION_READY, CONDITION_SUCCEEDED = "Ready", "Succeeded"
CONDITION_RECONCILING, CONDITION_STALLED = "Reconciling", "Stalled"
# True once the batch ended either way: what `kubectl wait` needs to wait for "done"
CONDITION_FINISHED = "Finished"
CONDITION_TYPES = (CONDITION_READY, CONDITION_SUCCEEDED, CONDITION_RECONCILING, CONDITION_STALLED,
                   CONDITION_FINISHED)
CONDITION_TRUE, CONDITION_FALSE, CONDITION_UNKNOWN = "True", "False", "Unknown"
CONDITION_STATUSES = (CONDITION_TRUE, CONDITION_FALSE, CONDITION_UNKNOWN)

# --- spec choices (each tuple's first is the default, as in the CRD) ----------------------------
# spec.isolation.namespace
ISOLATION_DEDICATED, ISOLATION_SHARED = "Dedicated", "Shared"
ISOLATION_MODES = (ISOLATION_DEDICATED, ISOLATION_SHARED)
# spec.isolation.network
NETWORK_DENY_ALL, NETWORK_ALLOW_EGRESS = "DenyAll", "AllowEgress"
NETWORK_MODES = (NETWORK_DENY_ALL, NETWORK_ALLOW_EGRESS)
# spec.cleanup.sandbox. Not Kubernetes' restartPolicy/imagePullPolicy values, which share two words.
CLEANUP_DELETE_ON_SUCCESS, CLEANUP_ALWAYS, CLEANUP_NEVER = "DeleteOnSuccess", "Always", "Never"
CLEANUP_POLICIES = (CLEANUP_DELETE_ON_SUCCESS, CLEANUP_ALWAYS, CLEANUP_NEVER)
# spec.cleanup.results: Delete (the results ConfigMaps are owned by the batch and go with it) or
# Retain (unowned, labelled, left when the batch is deleted or its TTL passes), as a
# PersistentVolume's reclaimPolicy says it.
RESULTS_DELETE, RESULTS_RETAIN = "Delete", "Retain"
RESULTS_POLICIES = (RESULTS_DELETE, RESULTS_RETAIN)

# --- episode outcomes (row["outcome"]) ---------------------------------------------------------
# succeeded: a graded attempt whose reward counts; failed: the agent's failure (core.outcomes),
# graded with the worst reward; lost: what the agent cannot cause (infrastructure, the API, the
# image, the batch): it says nothing about the policy and is left out. stopped: cut off by
# spec.stop (the owner's decision, neither the agent's failure nor a loss): left out likewise.
OUTCOME_SUCCEEDED, OUTCOME_FAILED, OUTCOME_LOST = "succeeded", "failed", "lost"
OUTCOME_STOPPED = "stopped"
OUTCOMES = (OUTCOME_SUCCEEDED, OUTCOME_FAILED, OUTCOME_LOST, OUTCOME_STOPPED)

# --- batch reasons (status.reason, condition reasons, Kubernetes Events) ------------------------
REASON_PENDING = "Pending"
REASON_PROVISIONING = "Provisioning"
REASON_RUNNING = "EpisodesRunning"
REASON_COLLECTING = "CollectingResults"
REASON_SUCCEEDED = "EpisodesSucceeded"
REASON_TOO_FEW = "TooFewSuccessfulEpisodes"
REASON_FAILED = "Failed"   # a Failed phase's reason when no more precise one was given
REASON_STOPPING = "Stopping"   # spec.stop seen: no new episode starts, running ones are ending
REASON_STOPPED = "Stopped"     # the Stopped phase's reason
EVENT_CLEANUP_FAILED = "SandboxCleanupFailed"   # after the end: the verdict stands, the TTL still runs
EVENT_FOREIGN_POD = "ForeignPodIgnored"         # a pod with the batch's label that its Job did not make
EVENT_RESULTS_NAME_TAKEN = "ResultsShardNameTaken"  # a shard's name held by a foreign ConfigMap: skipped
EVENT_UNSCHEDULABLE = "EpisodesUnschedulable"   # the scheduler cannot place episode pods (yet)
EVENT_IMAGE_NOT_SET = "InputImageNotSet"         # a gated pod's image patch was refused (spec.inputImages)
# a declared egress peer selected no pod when the batch started: a warning, never a failure
EVENT_EGRESS_PEER_EMPTY = "EgressPeerSelectsNothing"
# (EVENT_EXTRAS_DROPPED, below: reward extras past their budget, once per batch)
# Stalled: the batch ended without running to completion; each names what a person must fix.
STALL_INVALID_SPEC = "InvalidSpec"
STALL_RUNTIME_CLASS = "RuntimeClassNotFound"
STALL_NAMESPACE_TERMINATING = "NamespaceTerminating"
STALL_NAMESPACE_CONFLICT = "NamespaceConflict"
STALL_NAME_CONFLICT = "NameConflict"
STALL_RESULTS_CONFLICT = "ResultsConfigMapConflict"
STALL_QUOTA = "QuotaExceeded"
STALL_REFUSED = "ProvisioningRefused"
STALL_IMAGE = "ImagePullFailed"
STALL_API_REFUSED = "ApiRequestRefused"
STALL_API_UNAVAILABLE = "ApiUnavailable"
STALL_INTERNAL = "InternalError"
STALL_SANDBOX_DELETED = "SandboxDeleted"   # the Job (or its namespace) was deleted mid-batch
STALL_PODS_NOT_CREATED = "PodsNotCreated"  # the Job controller could not create any episode pod
STALL_PRIORITY_CLASS = "PriorityClassNotFound"
STALL_PRIORITY_CLASS_DENIED = "PriorityClassNotAllowed"   # in the system range, the cluster's own
STALL_UNSCHEDULABLE = "Unschedulable"       # no episode pod could be placed for --unschedulable-grace
STALL_INPUTS_MISSING = "InputsNotFound"     # a ConfigMap of spec.inputsFrom does not exist or is not opted in
STALL_INPUTS_INVALID = "InvalidInputs"      # its keys or values are not the inputs it promised
STALL_SECRET_MISSING = "SecretNotFound"     # a Secret of an env secretKeyRef is missing, not opted in, or lacks the key
STALL_REASONS = (STALL_INVALID_SPEC, STALL_RUNTIME_CLASS, STALL_NAMESPACE_TERMINATING, STALL_NAMESPACE_CONFLICT,
                 STALL_NAME_CONFLICT, STALL_RESULTS_CONFLICT, STALL_QUOTA, STALL_REFUSED, STALL_IMAGE,
                 STALL_API_REFUSED, STALL_API_UNAVAILABLE, STALL_INTERNAL, STALL_INPUTS_MISSING,
                 STALL_INPUTS_INVALID, STALL_SANDBOX_DELETED, STALL_PODS_NOT_CREATED, STALL_PRIORITY_CLASS,
                 STALL_PRIORITY_CLASS_DENIED, STALL_UNSCHEDULABLE, STALL_SECRET_MISSING)

# --- episode reasons (row["reason"]) ------------------------------------------------------------
EP_INFRASTRUCTURE = "InfrastructureFailure"
EP_LOG_UNAVAILABLE = "LogUnavailable"
# The log read found no pod: it was deleted (a node's eviction, the taint manager, PodGC) after it
# ended and before it was read. What it did is lost with it: outcome lost, never a failure.
LOG_POD_GONE = "the pod was deleted before its log was read"
EP_TIMEOUT = "Timeout"                 # the episode ran past episodeTimeoutSeconds
EP_BATCH_TIMEOUT = "BatchTimeout"      # the batch's activeDeadlineSeconds ended it (or it never ran)
# the kubelet evicted the pod for going past its own storage limits (its emptyDir's sizeLimit, its
# ephemeral-storage limit): the episode's doing, not infrastructure, so never retried
EP_STORAGE_LIMIT = "StorageLimitExceeded"
EP_IMAGE_PULL = "ImagePullFailed"
EP_NON_ZERO_EXIT = "NonZeroExit"
EP_RESTARTED = "Restarted"
EP_NO_READY = "NoReadyEvent"
EP_NO_REWARD = "NoRewardEvent"
EP_LOG_LIMIT = "LogLimitExceeded"
EP_DUPLICATE_READY = "DuplicateReady"
EP_DUPLICATE_REWARD = "DuplicateReward"
EP_IDENTITY = "IdentityMismatch"
EP_INVALID_REWARD = "InvalidReward"
EP_MISSING_TIMESTAMP = "MissingTimestamp"
EP_CLOCK_SKEW = "ClockSkew"
EP_REWARD_BEFORE_READY = "RewardBeforeReady"
EP_JOB_FAILED = "JobFailed"            # the Job ended (for a reason other than its deadline) without it
EP_BATCH_STALLED = "BatchStalled"      # the batch stopped (a Stalled reason) before this episode ended
EP_BATCH_STOPPED = "BatchStopped"      # spec.stop cut it off: it was running, or never started
# spec.verifier: once it started, the verifier crashed, was killed, ran past its time or did not
# report one usable reward. It had the agent's work in front of it: the agent's failure.
EP_VERIFIER_FAILED = "VerifierFailed"
# spec.verifier: the agent phase ended but the verifier container never started (a create or
# start error): nothing the agent did, so the episode is lost.
EP_VERIFIER_NOT_STARTED = "VerifierNotStarted"
EPISODE_REASONS = (EP_INFRASTRUCTURE, EP_LOG_UNAVAILABLE, EP_TIMEOUT, EP_BATCH_TIMEOUT, EP_STORAGE_LIMIT, EP_IMAGE_PULL,
                   EP_NON_ZERO_EXIT, EP_RESTARTED, EP_NO_READY, EP_NO_REWARD, EP_LOG_LIMIT, EP_DUPLICATE_READY,
                   EP_DUPLICATE_REWARD, EP_IDENTITY, EP_INVALID_REWARD, EP_MISSING_TIMESTAMP, EP_CLOCK_SKEW,
                   EP_REWARD_BEFORE_READY, EP_JOB_FAILED, EP_BATCH_STALLED, EP_VERIFIER_FAILED,
                   EP_VERIFIER_NOT_STARTED, EP_BATCH_STOPPED)
FLAG_SKEW_TOLERATED = "ClockSkewWithinTolerance"
# spec.verifier: the agent printed a reward-shaped event; only the verifier's reward counts.
FLAG_AGENT_REWARD_IGNORED = "AgentRewardIgnored"
# spec.verifier: the agent ran past episodeTimeoutSeconds and was stopped; the verifier graded it.
FLAG_AGENT_TIMED_OUT = "AgentTimedOut"
# reward extras past their budget (core.events) were left out; the row's message names them
FLAG_EXTRAS_DROPPED = "RewardExtrasDropped"
# ... and said once per batch as a Warning Event of the same name
EVENT_EXTRAS_DROPPED = FLAG_EXTRAS_DROPPED

# --- event channels (row["channel"]): where an episode's events were read -----------------------
CHANNEL_TERMINATION_MESSAGE = "terminationMessage"   # state.terminated.message: no log read
CHANNEL_LOG = "log"                                  # the container's stdout/stderr, read once
CHANNELS = (CHANNEL_TERMINATION_MESSAGE, CHANNEL_LOG)

# --- limits shared by the operator and its readers ----------------------------------------------
LOG_LIMIT_BYTES = 1 << 20   # default bytes of an episode's log the operator reads and the CLI keeps
# The end of an episode's log that its results row keeps (``log_tail``), so the log outlives its
# pod (the default cleanup deletes a succeeded batch's sandbox). A failure's tail says what went
# wrong; a success's is smaller: every row of a batch shares one ConfigMap's budget
# (core.results), and the operator holds the rows in memory for the batch's life.
LOG_TAIL_BYTES = 4 * 1024             # failed and lost episodes
SUCCESS_LOG_TAIL_BYTES = 1024         # succeeded episodes

# --- Kubernetes facts we read -------------------------------------------------------------------
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
# Waiting reasons of a container whose image the node cannot run (kubelet's images package).
IMAGE_WAITING_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# Job condition reason when activeDeadlineSeconds passed (Job controller).
JOB_DEADLINE_REASON = "DeadlineExceeded"
# Terminated reasons of a container the runtime could not start (containerd, dockershim).
START_ERROR_REASONS = ("StartError", "ContainerCannotRun")
# The verifier launcher's exit code when it stopped the verifier at verifier.timeoutSeconds
# (timeout(1)'s code).
VERIFIER_TIMEOUT_EXIT = 124
