"""The RolloutBatch CustomResourceDefinition, built from one definition.

``build_crd()`` returns the whole CRD as a plain dict: names, the version with its printer
columns, and the openAPIV3Schema assembled from ``core.crd_spec`` (the spec's fields) and
``core.crd_status`` (the status). crds/rl.agentruntime.io_rolloutbatches.yaml is its output,
written by ``python -m rolloutbatch.crdgen`` (``make generate``); a unit test fails when the
committed file differs from what this module builds, so the file is never edited by hand.

Why generated: the spec used to be written three times (the CRD, ``core.spec.parse_spec`` and
``core.model.BatchSpec``) with its defaults repeated in each. Now the defaults and bounds live in
``core.defaults`` and the words in ``core.vocabulary``, read by this definition and by parse_spec
alike; parse_spec keeps only what a schema cannot say. Pure, like all of core: no YAML, no I/O.
"""

from __future__ import annotations

from rolloutbatch import GROUP, KIND, PLURAL, VERSION
from rolloutbatch.core import defaults as d
from rolloutbatch.core.crd_spec import spec_schema
from rolloutbatch.core.crd_status import status_schema
from rolloutbatch.core.openapi import Schema, obj, rule, string

NAME = f"{PLURAL}.{GROUP}"
SHORT_NAMES = ["rb"]
CATEGORIES = ["rl"]
LABELS = {"app.kubernetes.io/name": "rolloutbatch", "app.kubernetes.io/part-of": "rolloutbatch"}


def _column(name: str, kind: str, path: str, *, priority: int = 0, description: str | None = None) -> dict:
    column: dict = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        column["priority"] = priority
    if description:
        column["description"] = description
    return column


# What `kubectl get rb` prints; priority 1 only with `-o wide`.
PRINTER_COLUMNS = [
    _column("Status", "string", ".status.phase"),
    _column("Progress", "string", ".status.progress"),
    _column("Running", "integer", ".status.runningEpisodes"),
    _column("Succeeded", "integer", ".status.succeededEpisodes"),
    _column("Failed", "integer", ".status.failedEpisodes"),
    # infrastructure losses: invalid samples, masked out of their group (a batch whose pool was
    # missing read PROGRESS 5/5 with SUCCEEDED and FAILED 0)
    _column("Lost", "integer", ".status.lostEpisodes"),
    _column("Reward", "number", ".status.rewardSum"),
    _column("Age", "date", ".metadata.creationTimestamp"),
    _column("P50-Ready", "number", ".status.podToReadySeconds.p50", priority=1),
    _column("P95-Ready", "number", ".status.podToReadySeconds.p95", priority=1),
    # Not "Namespace": `kubectl get -A` adds its own NAMESPACE column (the batch's).
    _column("Sandbox", "string", ".status.sandboxNamespace", priority=1,
            description="Namespace of the episode pods while they exist: rb-<uid10> (Dedicated) or the batch's "
                        "own (Shared)."),
    _column("Message", "string", ".status.message", priority=1),
]


def openapi_schema() -> Schema:
    """The version's openAPIV3Schema: the object, its spec and its status."""
    limit = d.MAX_BATCH_NAME_LENGTH
    return obj(
        "RolloutBatch runs N isolated sandbox episodes of a coding agent and collects their rewards.", {
            "apiVersion": string(f"{GROUP}/{VERSION}."),
            "kind": string(f"{KIND}."),
            "metadata": obj(),
            "spec": spec_schema(),
            "status": status_schema(),
        }, required=["spec"], rules=[
            # The sandbox namespace is rb-<uid>, but the results ConfigMap is <name>-results and
            # labels carry the name: keep names to what fits a label value and a DNS label.
            rule(f"size(self.metadata.name) <= {limit}",
                 f"metadata.name must be at most {limit} characters (the results ConfigMap is named "
                 "<name>-results)"),
        ])


def crd_object(kind: str, plural: str, short_names: list[str], columns: list[dict], schema: Schema,
               subresources: dict) -> dict:
    """A namespaced CustomResourceDefinition of our group, one version (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": dict(LABELS)},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                      "shortNames": list(short_names), "categories": list(CATEGORIES)},
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": subresources,
                "additionalPrinterColumns": [dict(c) for c in columns],
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    }


def build_crd() -> dict:
    """The whole RolloutBatch CustomResourceDefinition object."""
    return crd_object(KIND, PLURAL, SHORT_NAMES, PRINTER_COLUMNS, openapi_schema(), {"status": {}})
