"""The pure core: every rule of the operator, with no I/O and no framework imports.

Modules: ``model`` (typed values), ``naming`` (deterministic names and labels), ``defaults`` (the
spec's defaults and bounds, defined once), ``crd`` with ``crd_spec``, ``crd_sandbox``,
``crd_status`` and ``openapi`` (the CRD's one definition: crds/ is generated from it), ``spec``
(the operator's reading of a spec: defaults and the checks a schema cannot make), ``events`` (log parsing), ``verdict`` (pod facts and the episode
verdict), ``stats`` (the guide's statistics), ``tracker`` (counting one batch exactly once),
``conditions`` and ``status`` (the status subresource), ``manifests`` (child objects),
``results`` (the results document), ``admission`` (can the cluster serve a spec).

Allowed imports: the standard library and each other. Never kopf, kubernetes, pykube or
prometheus_client (a unit test enforces it).
"""
