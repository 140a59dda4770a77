"""Kueue on the devcluster: upstream's controller (sigs.k8s.io/kueue, built from its module by
`make kueue`), its CRDs and webhooks, and one queue to submit to.

Kueue runs, like CoreDNS, as a process beside the apiserver rather than as a pod: node chaos
cannot stop it, and the apiserver reaches its webhooks at 127.0.0.1. Upstream's install serves
them behind a Service with a certificate Kueue makes itself; here the webhook configurations
are upstream's (`config/components/webhook/manifests.yaml`, copied out of the module at build
time) with each `service` reference turned into a `url` and the devcluster CA as their
`caBundle`, and Kueue serves a certificate our PKI issued (internal certificate management off).
Only the webhooks of what Kueue manages here are kept (its own kinds and batch/v1 Jobs): a
webhook for a framework Kueue does not run (Pods, Deployments, ...) would refuse every such
object, since all of them fail closed.

The queue objects `make cluster` creates (:func:`queue_objects`): a ResourceFlavor, a
ClusterQueue that admits workloads from every namespace, and a LocalQueue in `default`.
Pure functions here build everything; cluster.py starts the process and applies the objects.

With its own certificate management off, Kueue reads a metrics certificate from the fixed path
/etc/kueue/metrics/certs and exits without one (even with metrics off). So it is started by
:func:`main` in a mount namespace of its own (``unshare --mount``), where an overlay over /etc
holds that directory, bound to our webhook certificate: the host's /etc is never written.
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

API_GROUP = "kueue.x-k8s.io"
API_VERSION = f"{API_GROUP}/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "devcluster"
LOCAL_QUEUE = "devcluster"          # in namespace `default`
# What the devcluster's ClusterQueue lends: enough for the suite's batches, small enough that a
# test can fill it (tests make their own ClusterQueues with tighter quotas).
QUOTA = {"cpu": "8", "memory": "32Gi", "pods": "500"}
# Webhook paths kept: Kueue's own kinds and batch/v1 Jobs (the only framework enabled here).
_KEPT_PATH_PARTS = ("-kueue-x-k8s-io-", "-batch-v1-job")


def configuration(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict:
    """Kueue's Configuration file (config.kueue.x-k8s.io/v1beta2): one replica, no leader
    election, batch/v1 Jobs only, metrics off (controller-runtime's "0"), our certificate."""
    return {
        "apiVersion": CONFIG_API_VERSION, "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        # the on-demand visibility API is an aggregated apiserver: not registered here
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(manifests: str, *, port: int, ca_pem: bytes) -> list[dict]:
    """Upstream's webhook configurations, served at https://127.0.0.1:``port``: each kept
    webhook's service reference becomes a url, its caBundle our CA (see the module docstring)."""
    ca = base64.b64encode(ca_pem).decode()
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not isinstance(doc, Mapping) or doc.get("kind") not in ("MutatingWebhookConfiguration",
                                                                    "ValidatingWebhookConfiguration"):
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path") or ""
            if not any(part in path for part in _KEPT_PATH_PARTS):
                continue
            hook = dict(hook)
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            # upstream's kustomization keeps Kueue's webhooks off the system namespaces
            hook["namespaceSelector"] = {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}]}
            hooks.append(hook)
        if hooks:
            name = f"kueue-{doc['metadata']['name']}"
            out.append({"apiVersion": doc.get("apiVersion", "admissionregistration.k8s.io/v1"),
                        "kind": doc["kind"], "metadata": {"name": name}, "webhooks": hooks})
    return out


def crds(texts: Iterable[str]) -> list[dict]:
    """Every CustomResourceDefinition in ``texts`` (upstream's config/components/crd/bases)."""
    out = []
    for text in texts:
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, Mapping) and doc.get("kind") == "CustomResourceDefinition":
                out.append(dict(doc))
    return out


def queue_objects() -> list[dict]:
    """The devcluster's ResourceFlavor, ClusterQueue (every namespace) and LocalQueue `default/devcluster`."""
    resources = [{"name": name, "nominalQuota": quota} for name, quota in QUOTA.items()]
    return [
        {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {},
                  "resourceGroups": [{"coveredResources": list(QUOTA),
                                      "flavors": [{"name": FLAVOR, "resources": resources}]}]}},
        {"apiVersion": API_VERSION, "kind": "LocalQueue",
         "metadata": {"name": LOCAL_QUEUE, "namespace": "default"},
         "spec": {"clusterQueue": CLUSTER_QUEUE}},
    ]


METRICS_CERTS = Path("/etc/kueue/metrics/certs")   # where Kueue's main reads them (not configurable)


def main(argv: list[str] | None = None) -> int:
    """``python -m devcluster.kueue --certs DIR --scratch DIR -- KUEUE ARGS...``, run inside
    ``unshare --mount --propagation private``: /etc overlaid (its upper layer in ``--scratch``),
    the metrics certificate directory bound to ``--certs``, then Kueue exec'd."""
    parser = argparse.ArgumentParser(prog="devcluster.kueue")
    parser.add_argument("--certs", required=True, type=Path)
    parser.add_argument("--scratch", required=True, type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    upper, work = args.scratch / "upper", args.scratch / "work"
    for path in (upper, work):
        path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir=/etc,upperdir={upper},workdir={work}",
                    "/etc"], check=True)
    METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(args.certs), str(METRICS_CERTS)], check=True)
    os.execv(command[0], command)
    return 1   # not reached


if __name__ == "__main__":
    sys.exit(main())
