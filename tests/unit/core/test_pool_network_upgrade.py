"""The network of a pool's pods made before naming.LABEL_NETWORK (core.pool_children.network_before_labels,
unlabelled_jobs, unlabelled_egress_policy): what the upgrade reads from the live policies."""
from __future__ import annotations

import pytest

from rolloutbatch.core import naming, pool_children, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pool_spec import PoolRef

POOL = PoolRef(name="swe", namespace="team", uid="0123456789abcdef")
ALLOW, DENY = str(v.NETWORK_ALLOW_EGRESS), str(v.NETWORK_DENY_ALL)


def _policy(types: list[str]) -> dict:
    return {"spec": {"podSelector": {}, "policyTypes": types}}


@pytest.mark.parametrize("base, unlabelled, spec_network, ran_under", [
    (_policy(["Ingress"]), None, DENY, ALLOW),             # the earlier operator's, AllowEgress: not the spec's
    (_policy(["Ingress", "Egress"]), None, ALLOW, DENY),   # its DenyAll, or today's default-deny
    (_policy(["Ingress", "Egress"]), {"spec": {}}, DENY, ALLOW),   # after the upgrade of an AllowEgress pool
    (None, None, ALLOW, ALLOW),                            # no policy at all: the spec's
    (None, None, DENY, DENY),
])
def test_the_network_before_the_label_is_the_live_policies(base, unlabelled, spec_network, ran_under):
    assert pool_children.network_before_labels(base, unlabelled, spec_network) == ran_under


def test_the_jobs_that_keep_the_unlabelled_policy():
    def job(uid: str, network: str | None, done: bool = False) -> dict:
        labels = {naming.LABEL_NETWORK: network} if network else {}
        return {"metadata": {"labels": {naming.LABEL_POOL_UID: uid}},
                "spec": {"template": {"metadata": {"labels": labels}}},
                "status": {"conditions": [{"type": "Complete", "status": "True"}] if done else []}}
    old, new, ended, other = job(POOL.uid, None), job(POOL.uid, ALLOW), job(POOL.uid, None, True), job("x", None)
    assert pools.unlabelled_jobs([old, new, ended, other], POOL.uid) == [old]


def test_the_unlabelled_policy_opens_only_pods_without_the_label():
    spec = pool_children.unlabelled_egress_policy(POOL)["spec"]
    assert spec["podSelector"] == {"matchExpressions": [{"key": naming.LABEL_NETWORK, "operator": "DoesNotExist"}]}
    assert spec["policyTypes"] == ["Egress"] and spec["egress"] == [{}]
