"""The operator's rights against the calls it makes, in every install the project ships
(manifests/rbac, manifests/namespaced, the chart cluster-wide and with watchNamespaces).

The unit tests' in-memory API checks no RBAC, and the e2e RBAC test runs a batch that never
reaches the rarer calls: here they run with every request the role does not grant answered 403,
as the API server would. Single pods are read by name in two places: the image gate, after a
refused image patch (a changed pod or an admission refusal?), and the judge, before an empty log
is the agent's own (was the pod deleted?).
"""
from __future__ import annotations

import copy
import re

import pytest
import yaml

from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.errors import Forbidden
from tests.unit.core.test_verifier_core import facts
from tests.unit.service import test_episode_judge as judging
from tests.unit.service import test_image_gate as gating
from tests.unit.test_chart import ROOT, template

_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_PATH = re.compile(r"^/apis?/(?:(?P<group>[\w.-]+)/)?v\w+/(?:namespaces/(?P<ns>[^/]+)/)?(?P<resource>[a-z]+)"
                   r"(?:/(?P<name>[^/?]+))?(?:/(?P<sub>[a-z]+))?")


def _rules(docs, kinds=("ClusterRole", "Role"), name="rolloutbatch-operator") -> list[dict]:
    return [rule for doc in docs if doc and doc.get("kind") in kinds and doc["metadata"]["name"] == name
            for rule in doc["rules"]]


def _file(path: str) -> list[dict]:
    return list(yaml.safe_load_all((ROOT / path).read_text()))


def granted(rules: list[dict], method: str, path: str) -> bool:
    match = _PATH.match(path)
    assert match, path
    group = "" if path.startswith("/api/") else match["group"]
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    verb = _VERB.get(method) or ("get" if match["name"] else "list")
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


VARIANTS = {
    "manifests/rbac (cluster-wide)": lambda: _rules(_file("manifests/rbac/role.yaml")),
    "manifests/namespaced": lambda: _rules(_file("manifests/namespaced/role.yaml")),
    "chart, default values": lambda: _rules(template()),
    "chart, watchNamespaces": lambda: _rules(template("--set", "watchNamespaces={rl-team}")),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_install_lets_the_operator_read_single_pods(variant):
    """service.image_gate and service.episode_judge GET a pod by name."""
    rules = VARIANTS[variant]()
    assert rules, variant
    assert granted(rules, "GET", "/api/v1/namespaces/rl-team/pods/ep-0"), \
        f"{variant}: the operator GETs pods by name (service/image_gate.py, service/episode_judge.py) and may not"


def _enforce(api, rules) -> list[str]:
    """Every GET/PATCH the role does not grant is refused 403, as RBAC would."""
    refused: list[str] = []
    for method in ("GET", "PATCH"):
        def when(path: str, method: str = method) -> bool:
            if not granted(rules, method, path):
                refused.append(f"{method} {path}")
                return True
            return False
        api.fail(method, None, Forbidden("forbidden: not granted by the operator's role", status=403),
                 times=10**6, when=when)
    return refused


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_gated_pod_that_changed_before_its_patch_leaves_the_batch_running(variant):
    """The image patch's precondition fails (the pod changed: a normal race); the gate reads the
    pod again to tell the race from a refusal, and tries again with the next snapshot."""
    pod = gating.make_pod(0)
    seen = copy.deepcopy(pod)
    pod["metadata"]["uid"] = "recreated"        # the API's pod is not the one the snapshot shows
    api = gating.cluster(pod)
    refused = _enforce(api, VARIANTS[variant]())
    gate, tracker = gating.gate_of(api), gating.tracker_with(seen)
    gating.run_rounds(gate, tracker, rounds=3)
    assert gate.error is None, f"batch would end with {gate.error!r}; refused by RBAC: {refused}"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_an_evicted_episodes_removed_log_is_lost(variant):
    """The snapshot shows no deletion yet; the judge reads the pod again before an empty log is
    the agent's: evicted, it is lost (LogUnavailable), not the agent's NoReadyEvent."""
    api = judging.cluster(b"")
    api.objects[("pods", "ns", "pod-0")]["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    refused = _enforce(api, VARIANTS[variant]())
    result = judging.judge(facts(disrupted=True), api)
    assert (result.outcome, result.reason) == (v.OUTCOME_LOST, v.EP_LOG_UNAVAILABLE), (result, refused)
