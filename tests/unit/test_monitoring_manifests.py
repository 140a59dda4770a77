"""manifests/monitoring: monitors select the operator, the kube-state-metrics config reads
fields that exist in the CRD schema, and the kustomization lists files that exist."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MON = REPO / "manifests" / "monitoring"
CRD = REPO / "crds" / "rl.agentruntime.io_rolloutbatches.yaml"


def load(name: str):
    return yaml.safe_load((MON / name).read_text())


@pytest.mark.parametrize("name,kind,endpoints", [
    ("servicemonitor.yaml", "ServiceMonitor", "endpoints"),
    ("podmonitor.yaml", "PodMonitor", "podMetricsEndpoints"),
])
def test_monitors_select_the_operator(name, kind, endpoints):
    doc = load(name)
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == kind
    assert doc["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "rolloutbatch"}
    (ep,) = doc["spec"][endpoints]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    # the series' own namespace label (the batch's) survives the target's (the operator's)
    assert ep["honorLabels"] is True


def _crd_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def _resolve(schema: dict, path: list[str]) -> dict:
    """Walk a KSM path through the OpenAPI schema; `[k=v]` selects a list element."""
    node = schema
    for seg in path:
        if seg.startswith("[") and seg.endswith("]"):
            assert node.get("type") == "array", f"{path}: {seg} on a non-list"
            node = node["items"]
            continue
        props = node.get("properties", {})
        assert seg in props, f"{path}: {seg!r} not in the CRD schema (has {sorted(props)})"
        node = props[seg]
    return node


def test_ksm_config_paths_exist_in_the_crd():
    cfg = load("kube-state-metrics-config.yaml")
    assert cfg["kind"] == "CustomResourceStateMetrics"
    (res,) = cfg["spec"]["resources"]
    crd = yaml.safe_load(CRD.read_text())
    assert res["groupVersionKind"] == {"group": crd["spec"]["group"], "version": "v1alpha1",
                                       "kind": crd["spec"]["names"]["kind"]}
    schema = _crd_schema()
    seen = set()
    for metric in res["metrics"]:
        each = metric["each"]
        body = each[{"Gauge": "gauge", "StateSet": "stateSet", "Info": "info"}[each["type"]]]
        path = body["path"]
        seen.add(metric["name"])
        if path[0] == "metadata":
            assert path[1] in ("generation", "name", "namespace", "creationTimestamp")
            continue
        node = _resolve(schema, path)
        if each["type"] == "StateSet":
            if "enum" in node:
                assert body["list"] == node["enum"], metric["name"]
        else:
            assert node.get("type") in ("integer", "number", "string"), (metric["name"], node)
            if node.get("type") == "string":
                assert node.get("format") == "date-time", metric["name"]
    for needed in ("status_phase", "spec_episodes", "status_succeeded_episodes",
                   "status_failed_episodes", "status_running_episodes", "status_reward_sum",
                   "status_observed_generation", "metadata_generation"):
        assert needed in seen, needed


def test_ksm_config_exports_every_condition_type():
    """Every condition the operator sets (core.vocabulary, the one definition) has its series, one
    per status, read from its own entry: Finished was missing, and README.md tells users to wait
    for it (`kubectl wait --for=condition=Finished`)."""
    from rolloutbatch.core import vocabulary as v

    (res,) = load("kube-state-metrics-config.yaml")["spec"]["resources"]
    exported = {}
    for metric in res["metrics"]:
        if metric["name"] == "status_condition":
            condition = metric["commonLabels"]["condition"]
            state = metric["each"]["stateSet"]
            assert condition not in exported, f"{condition} twice"
            assert state["path"] == ["status", "conditions", f"[type={condition}]", "status"], condition
            assert state["list"] == list(v.CONDITION_STATUSES) and state["labelName"] == "status", condition
            assert condition in metric["help"], condition
            exported[condition] = metric
    assert sorted(exported) == sorted(v.CONDITION_TYPES)


def test_kustomization_lists_existing_files():
    k = load("kustomization.yaml")
    files = list(k["resources"]) + [f for g in k.get("configMapGenerator", []) for f in g["files"]]
    for f in files:
        assert (MON / f).is_file(), f
    assert "grafana-dashboard-configmap.yaml" in k["resources"]
    # One scrape config, never both monitors.
    assert ("servicemonitor.yaml" in k["resources"]) != ("podmonitor.yaml" in k["resources"])


def _section(text: str, title: str) -> str:
    start = text.index(title)
    return text[start:text.index("\n## ", start + 1)]


def _kustomize_objects(directory: Path) -> tuple[dict, list[dict]]:
    """The kustomization and the objects of its `resources` (files only), as written."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict] = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        if path.is_file():
            objects.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return kustomization, objects


def _readme_monitoring_line() -> str:
    block = _section((REPO / "README.md").read_text(), "## Installing into a real cluster")
    (line,) = [ln for ln in block.splitlines() if "apply -k manifests/monitoring" in ln]
    return line


def test_the_readmes_monitoring_install_puts_the_servicemonitor_beside_the_operators_service():
    """Neither the kustomization nor the ServiceMonitor names a namespace, and a ServiceMonitor
    without a namespaceSelector selects the Services of its own namespace only: applied without
    `-n` it lands in the kubeconfig's namespace and scrapes nothing."""
    import re

    command = _readme_monitoring_line().split("#", 1)[0]
    flag = re.search(r"(?:-n|--namespace)[ =](\S+)", command)
    kustomization, objects = _kustomize_objects(MON)
    _, manager = _kustomize_objects(REPO / "manifests" / "manager")
    (service,) = [o for o in manager if o["kind"] == "Service"]
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    namespace = (kustomization.get("namespace") or monitor["metadata"].get("namespace")
                 or (flag.group(1) if flag else None))
    selector = monitor["spec"].get("namespaceSelector") or {}
    reaches = (namespace == service["metadata"]["namespace"] or selector.get("any") is True
               or service["metadata"]["namespace"] in selector.get("matchNames", []))
    assert reaches, (f"README's {command.strip()!r} puts the ServiceMonitor in "
                     f"{namespace or 'the current kubeconfig namespace'}, which cannot select the Service "
                     f"{service['metadata']['namespace']}/{service['metadata']['name']}")


def test_the_readme_says_which_monitor_manifests_monitoring_applies():
    """The kustomization applies the ServiceMonitor; the PodMonitor is its commented-out alternative."""
    comment = _readme_monitoring_line().split("#", 1)[1]
    _, objects = _kustomize_objects(MON)
    kinds = {o["kind"] for o in objects}
    for kind in ("ServiceMonitor", "PodMonitor"):
        if kind in kinds:
            assert kind in comment, f"README does not say manifests/monitoring applies a {kind}"
        elif kind in comment:
            assert "alternative" in comment, f"README says manifests/monitoring applies a {kind}; it applies {sorted(kinds)}"
