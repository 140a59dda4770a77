"""kopf wiring only. Importing this package registers every handler with kopf's default registry.

- ``lifecycle``: operator startup settings (finalizer name, server-side label selectors, ...).
- ``batches``: one daemon per RolloutBatch (the whole life of a batch) and its deletion.
- ``pools``: one daemon per RolloutPool (its warm pods) and its deletion.
- ``children``: watch events of the batches' Pods and Jobs, routed to their reconciler.

Handlers translate kopf's kwargs into service calls and nothing else.
"""

from rolloutbatch.handlers import batches, children, lifecycle, pools  # noqa: F401  (registration)
