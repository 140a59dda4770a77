"""service.egress_checks: the Service CIDR is the cluster's, else --service-cidr, else unchecked
(never a guess); a selector peer that matches no pod is a warning; a read that fails skips it."""
import asyncio
import logging

import pytest

from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Forbidden, NotFound, Unavailable
from rolloutbatch.service import egress_checks, provisioning
from tests.unit.core.factories import MINIMAL, REF

LOG = logging.getLogger("t")
MODEL = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
         "podSelector": {"matchLabels": {"app": "policy-server"}}}


def spec(*peers, isolation="Dedicated"):
    return parse_spec({**MINIMAL, "isolation": {"namespace": isolation, "egress": [{"to": list(peers)}]}})


class Cluster:
    """Answers the reads; ``service_cidrs`` may be an exception to raise."""

    def __init__(self, service_cidrs=("10.96.0.0/12",), namespaces=None, pods=None, fail=None):
        # fail: (function name, exception) raised by that read
        self.service_cidrs = service_cidrs
        self.namespaces = namespaces or {}     # selector -> names
        self.pods = pods or set()              # (namespace, selector) with a live pod
        self.fail = fail
        self.calls = []

    async def call(self, fn, *args):
        self.calls.append(fn.__name__)
        if fn is resources.service_cidrs:
            if isinstance(self.service_cidrs, Exception):
                raise self.service_cidrs
            return list(self.service_cidrs)
        if self.fail is not None and fn.__name__ == self.fail[0]:
            raise self.fail[1]
        if fn is resources.namespace_names:
            return list(self.namespaces.get(args[0], ()))[:args[1]]
        if fn is resources.has_live_pod:
            return (args[0], args[1]) in self.pods
        if fn is resources.dry_run_create:
            return None
        raise AssertionError(fn.__name__)


def refuse(cluster, s, fallback=()):
    return asyncio.run(egress_checks.refuse_service_ips(cluster.call, s, fallback, LOG))


CLUSTER_IP = spec({"ipBlock": {"cidr": "10.96.0.10/32"}})


def test_a_cluster_ip_stalls_as_an_invalid_spec():
    with pytest.raises(Stalled) as err:
        refuse(Cluster(), CLUSTER_IP)
    assert err.value.reason == "InvalidSpec" and "10.96.0.0/12" in err.value.message
    assert "select the Service's backing pods" in err.value.message


def test_provisioning_refuses_it_before_anything_exists():
    cluster = Cluster()
    with pytest.raises(Stalled):
        asyncio.run(provisioning.check(cluster.call, REF, CLUSTER_IP, {}, logger=LOG))
    assert "service_cidrs" in cluster.calls


@pytest.mark.parametrize("error", [NotFound("list ServiceCIDRs: 404", status=404),
                                   Forbidden("list ServiceCIDRs: forbidden", status=403)])
def test_the_flag_stands_in_where_the_api_cannot_be_read(error, caplog):
    caplog.set_level(logging.INFO)
    with pytest.raises(Stalled):
        refuse(Cluster(service_cidrs=error), CLUSTER_IP, fallback=("10.96.0.0/16",))
    assert "--service-cidr 10.96.0.0/16" in caplog.text


@pytest.mark.parametrize("error", [NotFound("404", status=404), Forbidden("403", status=403)])
def test_without_either_the_check_is_skipped_and_said(error, caplog):
    caplog.set_level(logging.INFO)
    refuse(Cluster(service_cidrs=error), CLUSTER_IP)
    assert "Service CIDR unknown" in caplog.text and "not checked" in caplog.text


def test_an_unavailable_api_is_retried_not_skipped():
    with pytest.raises(Unavailable):
        refuse(Cluster(service_cidrs=Unavailable("503", status=503)), CLUSTER_IP)


def test_no_ip_block_no_read():
    cluster = Cluster()
    refuse(cluster, spec(MODEL))
    assert cluster.calls == []


def empty(cluster, s):
    return asyncio.run(egress_checks.empty_peers(cluster.call, REF, s, LOG))


def test_a_peer_with_a_running_pod_is_quiet_one_without_is_named():
    ns = "kubernetes.io/metadata.name=models"
    other = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
             "podSelector": {"matchLabels": {"app": "typo"}}}
    cluster = Cluster(namespaces={ns: ["models"]}, pods={("models", "app=policy-server")})
    (message,) = empty(cluster, spec(MODEL, other))
    assert message == ("spec.isolation.egress[0].to[1]: podSelector app=typo matches no running pod in namespace "
                       "models")


def test_a_namespace_selector_matching_no_namespace_is_named():
    (message,) = empty(Cluster(), spec(MODEL))
    assert "matches no namespace" in message


def test_a_dedicated_bare_pod_selector_is_named_without_a_read():
    cluster = Cluster()
    (message,) = empty(cluster, spec({"podSelector": {"matchLabels": {"app": "model"}}}))
    assert "sandbox rb-7d9f22ce63" in message and cluster.calls == []


def test_a_shared_bare_pod_selector_looks_in_the_batchs_namespace():
    peer = {"podSelector": {"matchLabels": {"app": "model"}}}
    assert empty(Cluster(pods={(REF.namespace, "app=model")}), spec(peer, isolation="Shared")) == []
    (message,) = empty(Cluster(), spec(peer, isolation="Shared"))
    assert message.endswith(f"matches no running pod in namespace {REF.namespace}")


def test_a_selector_matching_many_namespaces_is_not_judged():
    ns = "team=ml"
    many = Cluster(namespaces={ns: [f"n{i}" for i in range(40)]})
    assert empty(many, spec({"namespaceSelector": {"matchLabels": {"team": "ml"}}})) == []
    assert "has_live_pod" not in many.calls


def test_a_read_that_fails_skips_the_peer(caplog):
    caplog.set_level(logging.INFO)
    cluster = Cluster(fail=("namespace_names", Forbidden("namespaces is forbidden", status=403)))
    assert empty(cluster, spec(MODEL)) == []
    assert "Not checking whether spec.isolation.egress[0].to[0] selects a pod" in caplog.text
