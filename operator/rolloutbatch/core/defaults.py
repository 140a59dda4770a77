"""The RolloutBatch spec's defaults and bounds, defined once.

Three readers need the same numbers: the CRD (``core.crd``: the API server applies the defaults
and refuses what is out of bounds at ``kubectl apply``), ``core.spec.parse_spec`` (the operator's
own reading, which must give an object stored without the API server's defaults the same
meaning) and the SDK (``sdk.build``: what a trainer gets when it leaves a field out). Each imports
these names; none spells a value again. A default that is another field's value (parallelism and
minSuccessfulEpisodes default to episodes, the verifier's image and resources to the agent's) is
said in parse_spec and in the field's description, not here.
"""

from __future__ import annotations

# --- defaults ------------------------------------------------------------------------------------
IMAGE = "python:3.12-alpine"
RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}
TASK_MOUNT_PATH = "/task"
EPISODE_SCRIPT = "episode.py"          # the default command runs <task.mountPath>/episode.py
WORKSPACE_MOUNT_PATH = "/workspace"
WORKSPACE_SIZE_LIMIT = "1Gi"
SAMPLES_PER_INPUT = 1
EPISODE_TIMEOUT_SECONDS = 600
ACTIVE_DEADLINE_SECONDS = 3600
INFRASTRUCTURE_RETRIES = 2
SANDBOX_QUOTA = False                  # spec.isolation.resourceQuota
VERIFIER_MOUNT_PATH = "/verifier"
VERIFIER_SCRIPT = "verify.py"          # the verifier's default command runs <verifier.mountPath>/verify.py
VERIFIER_TIMEOUT_SECONDS = 300
# RolloutPool (docs/design.md §5.17)
POOL_MAX_SIZE = 100                    # spec.maxSize
PREPARE_TIMEOUT_SECONDS = 600          # spec.prepare.timeoutSeconds
# The enums' defaults are the first word of their core.vocabulary tuple (ISOLATION_MODES, ...).


def default_command(mount_path: str, script: str) -> tuple[str, ...]:
    """The default entrypoint of the agent (``EPISODE_SCRIPT``) or the verifier (``VERIFIER_SCRIPT``)."""
    return ("python", "-B", f"{mount_path.rstrip('/')}/{script}")


# --- bounds --------------------------------------------------------------------------------------
MAX_EPISODES = 100_000
MAX_SAMPLES_PER_INPUT = 1024
MAX_EPISODE_TIMEOUT_SECONDS = 7 * 24 * 3600        # also the verifier's timeoutSeconds
MAX_ACTIVE_DEADLINE_SECONDS = 30 * 24 * 3600
MAX_INFRASTRUCTURE_RETRIES = 10
MAX_INT32 = 2**31 - 1                              # spec.cleanup.ttlSecondsAfterFinished
MAX_IMAGE_LENGTH = 512
MAX_PATH_LENGTH = 1024                             # every mountPath
MAX_NAME_BYTES = 255                               # a path's component (NAME_MAX of Linux file systems)
MAX_COMMAND_ITEMS, MAX_ARGS_ITEMS, MAX_ARG_LENGTH = 64, 256, 4096
MAX_ENV_ITEMS, MAX_ENV_NAME_LENGTH, MAX_ENV_VALUE_LENGTH = 128, 256, 32768
# Linux's bound on one argument or environment string, its NUL included (MAX_ARG_STRLEN, 32 pages of
# 4 KiB, include/uapi/linux/binfmts.h): execve fails (E2BIG) with a longer one, so no container
# could start. A value of MAX_ENV_VALUE_LENGTH characters can pass it in bytes (4-byte UTF-8).
MAX_ARG_STRLEN = 32 * 4096
MAX_FILES = 64                                     # task.files, verifier.files
MAX_CONFIG_BYTES = 900 * 1024                      # ConfigMaps are capped at 1 MiB; keep a margin
# How deep an input (inline or by reference) or another free-form object of the spec (podTemplate's
# affinity) may nest: far beyond any real one, well within what Python's json reads and writes.
MAX_JSON_DEPTH = 100
MAX_INPUT_CONFIGMAPS = 64                          # inputsFrom: at most 64 shards of <= 1 MiB
# The emptyDir holding an episode's copy of its one input (a ConfigMap key: under 1 MiB), with room.
INPUT_COPY_SIZE_LIMIT = "2Mi"
# spec.inputImages stays in the object (it cannot move into ConfigMaps as inputs can): bounded so
# the RolloutBatch stays far below etcd's ~1.5 MiB object limit.
MAX_INPUT_IMAGES_BYTES = 512 * 1024
MAX_TOLERATIONS = 64                               # bounds the CRD's per-toleration rules (CEL cost)
MAX_EGRESS_RULES, MAX_EGRESS_PEERS = 32, 16
# A name of 55 is a valid label value (63) with room to spare, so label_value(name) never
# truncates and two batches never share one. The CRD bounds the name as made, so a generateName
# prefix is at most 55 - 5: the API server appends 5 random characters.
MAX_BATCH_NAME_LENGTH = 55
GENERATED_NAME_SUFFIX = 5
MAX_POOL_SIZE = 1000                               # a RolloutPool's maxSize
MAX_PREPARE_TIMEOUT_SECONDS = 3600

# --- what a submitter may not ask for --------------------------------------------------------------
# The operator sets these in every episode (core.manifests); in the order the CRD lists them.
RESERVED_ENV = ("EPISODE_ID", "EPISODE_INDEX", "EPISODE_GROUP", "EPISODE_SAMPLE", "EPISODE_INPUT", "BATCH_NAME")
# The submitter may hold rights on RolloutBatches only, and the operator cannot tell who submitted
# a batch: the pod template may ask for nothing of the cluster's own (docs/design.md §8.1).
# The API server reserves this PriorityClass prefix for the cluster's critical pods.
SYSTEM_PRIORITY_PREFIX = "system-"
# Kubernetes' HighestUserDefinablePriority: a PriorityClass above it is in the system range.
MAX_USER_PRIORITY = 1_000_000_000
# Taints that keep pods off nodes for the cluster's own safety: cordoned nodes, the control plane
# and system node pools (CriticalAddonsOnly), failing nodes (tolerated forever, a pod would stay
# bound to a dead node), nodes whose network or cloud setup is not done (NetworkPolicy may not be
# enforced yet), nodes an admin declared out of service and nodes an autoscaler is deleting (a pod
# placed there dies with the node). Keys are matched exactly, so each distribution's spelling of
# the same guard is listed. Never tolerated, in any form: the operator already tolerates not-ready
# and unreachable for NODE_LOSS_TOLERATION_SECONDS (core.manifests).
PROTECTED_TAINTS = (
    "node.kubernetes.io/unschedulable", "node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master",
    # Rancher RKE: its control plane's and its etcd nodes' taints (RKE2's etcd nodes too)
    "node-role.kubernetes.io/controlplane", "node-role.kubernetes.io/etcd",
    "CriticalAddonsOnly", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
    # k8s.io/cloud-provider api/well_known_taints.go: a node its cloud reports shut down
    "node.cloudprovider.kubernetes.io/shutdown",
    "node.kubernetes.io/network-unavailable", "node.cloudprovider.kubernetes.io/uninitialized",
    # Cilium: its agent (and so its NetworkPolicy) is not running on the node yet
    "node.cilium.io/agent-not-ready",
    # Karpenter v1: a node not yet registered (its startup taints, a CNI's among them, not yet set)
    "karpenter.sh/unregistered",
    "node.kubernetes.io/out-of-service", "ToBeDeletedByClusterAutoscaler",
    # Karpenter draining a node to delete it: v1's taint, and v0.32-v0.37's
    "karpenter.sh/disrupted", "karpenter.sh/disruption",
)
