"""service.egress_checks: the Service CIDR is the cluster's, else --service-cidr, else unchecked
(never a guess); a selector peer that matches no pod is a warning; a read that fails skips it."""
import asyncio
import copy
import logging

import pytest

from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube.errors import Forbidden, NotFound, Unavailable
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import egress_checks, provisioning
from tests.support.memory_api import MemoryApi
from tests.unit.core.factories import MINIMAL, REF

LOG = logging.getLogger("t")
MODEL = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
         "podSelector": {"matchLabels": {"app": "policy-server"}}}


def spec(*peers, isolation="Dedicated"):
    return parse_spec({**MINIMAL, "isolation": {"namespace": isolation, "egress": [{"to": list(peers)}]}})


def cluster(service_cidrs=("10.96.0.0/12",), namespaces=(), pods=()) -> MemoryApi:
    """An API server holding the batch's namespace, ServiceCIDR objects listing ``service_cidrs``,
    ``namespaces`` (name -> labels; each also labelled with its name, as the API server does) and
    a running pod per (namespace, labels) of ``pods``."""
    api = MemoryApi()
    for name, labels in {REF.namespace: {}, **dict(namespaces)}.items():
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}})
    if service_cidrs:
        api.put({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": "kubernetes"},
                 "spec": {"cidrs": list(service_cidrs)}})
    for i, (namespace, labels) in enumerate(pods):
        api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{i}", "namespace": namespace,
                                                                "labels": dict(labels)},
                 "status": {"phase": "Running"}})
    api.calls.clear()   # what the test arranged is not what the service read
    return api


def read(api, plural: str) -> bool:
    """Whether the service listed ``plural`` (any namespace)."""
    return any(method == "GET" and path.endswith(f"/{plural}") for method, path in api.calls)


def refuse(api, s, fallback=()):
    return asyncio.run(egress_checks.refuse_service_ips(Storage(api), s, fallback, LOG))


CLUSTER_IP = spec({"ipBlock": {"cidr": "10.96.0.10/32"}})


def test_a_cluster_ip_stalls_as_an_invalid_spec():
    with pytest.raises(Stalled) as err:
        refuse(cluster(), CLUSTER_IP)
    assert err.value.reason == "InvalidSpec" and "10.96.0.0/12" in err.value.message
    assert "select the Service's backing pods" in err.value.message


def test_provisioning_refuses_it_before_anything_exists():
    api = cluster()
    before = copy.deepcopy(api.objects)
    with pytest.raises(Stalled):
        asyncio.run(provisioning.check(Storage(api), REF, CLUSTER_IP, {}, logger=LOG))
    assert read(api, "servicecidrs")
    assert api.objects == before     # the Job and the policy were only dry run


@pytest.mark.parametrize("error", [NotFound("list ServiceCIDRs: 404", status=404),
                                   Forbidden("list ServiceCIDRs: forbidden", status=403)])
def test_the_flag_stands_in_where_the_api_cannot_be_read(error, caplog):
    caplog.set_level(logging.INFO)
    api = cluster(service_cidrs=())
    api.fail("GET", "ServiceCIDR", error)
    with pytest.raises(Stalled):
        refuse(api, CLUSTER_IP, fallback=("10.96.0.0/16",))
    assert "--service-cidr 10.96.0.0/16" in caplog.text


def test_no_service_cidr_object_is_the_flag_too(caplog):
    caplog.set_level(logging.INFO)
    with pytest.raises(Stalled):
        refuse(cluster(service_cidrs=()), CLUSTER_IP, fallback=("10.96.0.0/16",))
    assert "no ServiceCIDR object lists one" in caplog.text


@pytest.mark.parametrize("error", [NotFound("404", status=404), Forbidden("403", status=403)])
def test_without_either_the_check_is_skipped_and_said(error, caplog):
    caplog.set_level(logging.INFO)
    api = cluster()
    api.fail("GET", "ServiceCIDR", error)
    refuse(api, CLUSTER_IP)
    assert "Service CIDR unknown" in caplog.text and "not checked" in caplog.text


def test_an_unavailable_api_is_retried_not_skipped():
    api = cluster()
    api.fail("GET", "ServiceCIDR", Unavailable("503", status=503))
    with pytest.raises(Unavailable):
        refuse(api, CLUSTER_IP)


def test_no_ip_block_no_read():
    api = cluster()
    refuse(api, spec(MODEL))
    assert api.calls == []


def empty(api, s):
    return asyncio.run(egress_checks.empty_peers(Storage(api), REF, s, LOG))


def test_a_peer_with_a_running_pod_is_quiet_one_without_is_named():
    other = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
             "podSelector": {"matchLabels": {"app": "typo"}}}
    api = cluster(namespaces={"models": {}}, pods=[("models", {"app": "policy-server"})])
    (message,) = empty(api, spec(MODEL, other))
    assert message == ("spec.isolation.egress[0].to[1]: podSelector app=typo matches no running pod in namespace "
                       "models")


def test_a_pod_that_ended_is_not_a_running_one():
    api = cluster(namespaces={"models": {}}, pods=[("models", {"app": "policy-server"})])
    api.merge_patch("/api/v1/namespaces/models/pods/pod-0/status", {"status": {"phase": "Succeeded"}}, "kubelet")
    (message,) = empty(api, spec(MODEL))
    assert "matches no running pod in namespace models" in message


def test_a_namespace_selector_matching_no_namespace_is_named():
    (message,) = empty(cluster(), spec(MODEL))
    assert "matches no namespace" in message


def test_a_dedicated_bare_pod_selector_is_named_without_a_read():
    api = cluster()
    (message,) = empty(api, spec({"podSelector": {"matchLabels": {"app": "model"}}}))
    assert "sandbox rb-7d9f22ce63" in message and api.calls == []


def test_a_shared_bare_pod_selector_looks_in_the_batchs_namespace():
    peer = {"podSelector": {"matchLabels": {"app": "model"}}}
    assert empty(cluster(pods=[(REF.namespace, {"app": "model"})]), spec(peer, isolation="Shared")) == []
    (message,) = empty(cluster(pods=[("elsewhere", {"app": "model"})], namespaces={"elsewhere": {}}),
                       spec(peer, isolation="Shared"))
    assert message.endswith(f"matches no running pod in namespace {REF.namespace}")


def test_a_selector_matching_many_namespaces_is_not_judged():
    api = cluster(namespaces={f"n{i}": {"team": "ml"} for i in range(40)})
    assert empty(api, spec({"namespaceSelector": {"matchLabels": {"team": "ml"}}})) == []
    assert read(api, "namespaces") and not read(api, "pods")


def test_a_read_that_fails_skips_the_peer(caplog):
    caplog.set_level(logging.INFO)
    api = cluster(namespaces={"models": {}}, pods=[("models", {"app": "policy-server"})])
    api.fail("GET", "Namespace", Forbidden("namespaces is forbidden", status=403))
    assert empty(api, spec(MODEL)) == []
    assert "Not checking whether spec.isolation.egress[0].to[0] selects a pod" in caplog.text
