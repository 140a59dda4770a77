"""rolloutbatch: a Kubernetes operator that runs reinforcement-learning rollouts of coding agents.

One ``RolloutBatch`` custom resource is N isolated sandbox episodes. The package is layered:

- ``core``: pure logic (spec, events, verdicts, statistics, status, manifests); no I/O imports.
- ``kube``: every Kubernetes API call, with errors mapped to ``kube.errors``.
- ``handlers``: thin kopf wiring that calls ``core`` and ``kube``.
- ``metrics``: prometheus-client collectors on an injected registry.
- ``cli`` and ``sdk``: the user-facing command and the trainer's Python API.
"""

__version__ = "0.1.0"

GROUP = "rl.agentruntime.io"
VERSION = "v1alpha1"
PLURAL = "rolloutbatches"
KIND = "RolloutBatch"
# Warm sandbox pools (docs/design.md §5.17): same group and version.
POOL_PLURAL = "rolloutpools"
POOL_KIND = "RolloutPool"
