"""What the devcluster gives Kueue: its Configuration, its webhooks as urls, its CRDs, one queue."""
import base64
from pathlib import Path

import yaml

from devcluster import kueue

# The shape of upstream's config/components/webhook/manifests.yaml, trimmed to three webhooks.
MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}
  failurePolicy: Fail
  name: mjob.kb.io
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue}
  failurePolicy: Fail
  name: vclusterqueue.kb.io
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-apps-v1-deployment}
  failurePolicy: Fail
  name: vdeployment.kb.io
  sideEffects: None
"""


def test_webhooks_point_at_the_local_port_with_our_ca_and_only_for_what_kueue_runs():
    hooks = kueue.webhook_configurations(MANIFESTS, port=9443, ca_pem=b"PEM")
    assert [h["metadata"]["name"] for h in hooks] == ["kueue-mutating-webhook-configuration",
                                                      "kueue-validating-webhook-configuration"]
    kept = {w["name"]: w for h in hooks for w in h["webhooks"]}
    # a webhook for a framework Kueue does not run here would refuse every Pod or Deployment
    assert set(kept) == {"mjob.kb.io", "vclusterqueue.kb.io"}
    job = kept["mjob.kb.io"]
    assert job["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-batch-v1-job",
                                   "caBundle": base64.b64encode(b"PEM").decode()}
    assert job["rules"][0]["resources"] == ["jobs"] and job["failurePolicy"] == "Fail"
    assert "kube-system" in job["namespaceSelector"]["matchExpressions"][0]["values"]


def test_a_manifest_with_nothing_kept_gives_no_configuration():
    assert kueue.webhook_configurations("kind: ConfigMap\n---\n", port=1, ca_pem=b"") == []


def test_configuration_is_one_replica_jobs_only_with_our_certificate():
    config = kueue.configuration(webhook_port=9443, health_port=8081, cert_dir=Path("/pki/kueue-webhook"))
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": "/pki/kueue-webhook"}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["integrations"]["frameworks"] == ["batch/job"]
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:8081"


def test_crds_are_read_from_every_file_and_nothing_else():
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "workloads.kueue.x-k8s.io"}}
    texts = [yaml.safe_dump(crd), "---\n" + yaml.safe_dump({"kind": "Namespace"}) + "---\n"]
    assert [c["metadata"]["name"] for c in kueue.crds(texts)] == ["workloads.kueue.x-k8s.io"]


def test_the_devcluster_queue_admits_every_namespace_from_one_flavor():
    flavor, cluster_queue, local_queue = kueue.queue_objects()
    assert flavor["kind"] == "ResourceFlavor" and cluster_queue["spec"]["namespaceSelector"] == {}
    group = cluster_queue["spec"]["resourceGroups"][0]
    assert group["flavors"][0]["name"] == flavor["metadata"]["name"]
    assert group["coveredResources"] == [r["name"] for r in group["flavors"][0]["resources"]]
    assert local_queue["spec"]["clusterQueue"] == cluster_queue["metadata"]["name"]
    assert local_queue["metadata"]["namespace"] == "default"
