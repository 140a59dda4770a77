"""The Helm chart (charts/rolloutbatch) installs what the kustomize manifests install: one source of truth.

`helm template` with default values renders the objects of `kubectl kustomize manifests/default`,
with `watchNamespaces` those of `manifests/namespaced`, with the monitoring values those of
`manifests/monitoring`, field for field. The documented differences, and no other:

- the Namespace `rolloutbatch-system` is not the chart's: Helm stores its release in that namespace
  before any object of the chart exists, so it is made first (README, "Installing with Helm");
- the kube-state-metrics config of manifests/monitoring is for kube-state-metrics' own install;
- the monitoring objects carry the release namespace (kustomize leaves theirs to `kubectl -n`).

Both binaries are prerequisites of `make test-unit` and `make test` (helm from devcluster/helm,
kubectl from localkube): a missing one fails here, it never skips.
"""
from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
import yaml

from rolloutbatch import crdgen

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "rolloutbatch"
HELM = ROOT / ".devcluster" / "bin" / "helm"
LOCALKUBE = ROOT / ".devcluster" / "bin" / "localkube"
NAMESPACE = "rolloutbatch-system"
IMAGE = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
NOT_THE_CHARTS = {("Namespace", NAMESPACE)}


def _binary(path: pathlib.Path, target: str) -> pathlib.Path:
    assert path.exists(), f"{path} is missing: run `make {target}` (a prerequisite of make test-unit and make test)"
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(_binary(HELM, "helm")), *args], capture_output=True, text=True, timeout=120,
                         env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "HELM_CACHE_HOME": "/tmp/helm-cache",
                              "HELM_CONFIG_HOME": "/tmp/helm-config", "HELM_DATA_HOME": "/tmp/helm-data"})
    if check:
        assert out.returncode == 0, out.stderr
    return out


def template(*values: str) -> list[dict]:
    out = helm("template", "rolloutbatch", str(CHART), "--namespace", NAMESPACE, "--include-crds", *values)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def kustomize(overlay: str) -> list[dict]:
    out = subprocess.run([str(_binary(LOCALKUBE, "localkube")), "kubectl", "kustomize", str(ROOT / "manifests" / overlay)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_identity(docs: list[dict]) -> dict[tuple, dict]:
    found: dict[tuple, dict] = {}
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
        assert key not in found, f"{key} twice"
        found[key] = doc
    return found


def assert_same_objects(chart: list[dict], kustomized: list[dict]) -> None:
    kustomized = [d for d in kustomized if (d["kind"], d["metadata"]["name"]) not in NOT_THE_CHARTS]
    ours, theirs = by_identity(chart), by_identity(kustomized)
    assert sorted(ours) == sorted(theirs), f"only in the chart: {sorted(set(ours) - set(theirs))}; " \
                                           f"only in kustomize: {sorted(set(theirs) - set(ours))}"
    for key in ours:
        assert ours[key] == theirs[key], f"{key} differs:\nchart:     {ours[key]}\nkustomize: {theirs[key]}"


def test_default_values_render_manifests_default():
    assert_same_objects(template(), kustomize("default"))


def test_watch_namespaces_render_manifests_namespaced():
    assert_same_objects(template("--set", "watchNamespaces={rl-team}"), kustomize("namespaced"))


def test_the_namespaced_install_holds_nothing_cluster_wide():
    docs = template("--set", "watchNamespaces={team-a,team-b}")
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert not [d for d in bindings if d["kind"] == "ClusterRoleBinding"]
    # the users' aggregated roles are bound by no one of ours; the operator's own rights are Roles
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"} == {"rolloutbatch-edit", "rolloutbatch-view"}
    where = {(d["metadata"]["namespace"], d["roleRef"]["name"]) for d in bindings}
    assert where == {(ns, role) for ns in ("team-a", "team-b")
                     for role in ("rolloutbatch-operator", "rolloutbatch-operator-secrets")} | \
        {("kube-system", "rolloutbatch-operator-dns"), (NAMESPACE, "rolloutbatch-operator-leader-election")}
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["namespace"] != "kube-system"]
    for role in roles:
        resources = {r for rule in role["rules"] for r in rule["resources"]}
        assert not resources & {"namespaces", "serviceaccounts", "customresourcedefinitions", "nodes"}, role
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--watch-namespace=team-a", "--watch-namespace=team-b"]


def test_monitoring_values_render_manifests_monitoring():
    plain = by_identity(template())
    docs = [d for d in template("--set", "serviceMonitor.enabled=true,grafanaDashboard.enabled=true")
            if (d["apiVersion"], d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) not in plain]
    kustomized = [d for d in kustomize("monitoring") if d["metadata"]["name"] != "rolloutbatch-kube-state-metrics-config"]
    for doc in kustomized:
        doc["metadata"]["namespace"] = NAMESPACE   # as `kubectl apply -k manifests/monitoring -n rolloutbatch-system`
    assert_same_objects(docs, kustomized)


def test_the_charts_crd_and_dashboard_are_the_generated_ones():
    for crd in crdgen.CRDS.values():
        assert (CHART / "crds" / crd.file).read_text() == crdgen.render(crd), "run `make generate`"
    dashboard = json.loads((ROOT / "manifests" / "monitoring" / "grafana-dashboard.json").read_text())
    assert json.loads((CHART / "files" / "grafana-dashboard.json").read_text()) == dashboard


def test_helm_lint_passes_strict():
    for values in ([], ["--set", "watchNamespaces={rl-team}"],
                   ["--set", "serviceMonitor.enabled=true,grafanaDashboard.enabled=true,logLevel=debug"]):
        out = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values, check=False)
        assert out.returncode == 0 and "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout + out.stderr


def deployment(*values: str) -> dict:
    return next(d for d in template(*values) if d["kind"] == "Deployment")


def test_values_reach_the_deployment():
    pod = deployment("--set", "logLevel=debug,image.tag=0.2.0,replicas=0,resources.limits.memory=1Gi",
                     "--set", "extraArgs={--service-cidr=10.96.0.0/12}")
    container = pod["spec"]["template"]["spec"]["containers"][0]
    assert pod["spec"]["replicas"] == 0
    assert container["image"] == "ghcr.io/rolloutbatch/rolloutbatch:0.2.0"
    assert container["args"] == ["--metrics-port=8080", "--liveness-port=8081", "--verbose", "--service-cidr=10.96.0.0/12"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    ports = deployment("--set", "metrics.port=9090")["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert {"name": "metrics", "containerPort": 9090} in ports


def test_a_single_replica_has_no_disruption_budget():
    """minAvailable 1 over one pod would refuse every drain of its node."""
    kinds = {d["kind"] for d in template("--set", "replicas=1")}
    assert "PodDisruptionBudget" not in kinds and "Deployment" in kinds
    assert "PodDisruptionBudget" in {d["kind"] for d in template()}


@pytest.mark.parametrize("values, said", [
    (["--set", "replicas=-1"], "replicas"),
    (["--set", "logLevel=trace"], "logLevel"),
    (["--set", "watchNamespaces={Team_A}"], "watchNamespaces"),
    (["--set", "replica=1"], "replica"),                          # a typo is not ignored
    (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
    (["--set", "metrics.port=0"], "port"),
    (["--set", "serviceMonitor.interval=30"], "interval"),
    (["--set", "metrics.port=8081"], "metrics.port and livenessPort must differ"),
    (["--set", "serviceMonitor.enabled=true,metrics.service.enabled=false"], "needs metrics.service.enabled"),
    (["--set", "watchNamespaces={rolloutbatch-system}"], "must not list the operator's own namespace"),
    # two replicas without leader election; a Lease the Role does not cover; probes on another port
    (["--set", "extraArgs={--no-leader-elect}"], "extraArgs must not set --no-leader-elect"),
    (["--set", "extraArgs={--leader-election-namespace=other}"], "must not set --leader-election-namespace"),
    (["--set", "extraArgs={--liveness-port=9000}"], "must not set --liveness-port=9000"),
    (["--set", "extraArgs={--watch-namespace=a}"], "must not set --watch-namespace"),
    (["--set", "resources.limits.cpu=lots"], "cpu"),                  # not a quantity
    (["--set", "serviceMonitor.interval=0s"], "interval"),             # Prometheus refuses a zero interval
    (["--set", "watchNamespaces={kube-system}"], "watchNamespaces"),   # the system's, never a batch's
    (["--set", "serviceMonitor.interval=30s1m"], "interval"),          # Prometheus reads units largest first
    # the Prometheus Operator skips a ServiceMonitor whose scrapeTimeout exceeds its interval
    (["--set", "serviceMonitor.enabled=true,serviceMonitor.interval=5s"],    # the default scrapeTimeout, 10s
     "serviceMonitor.scrapeTimeout (10s) must not exceed serviceMonitor.interval (5s)"),
    (["--set", "serviceMonitor.enabled=true,serviceMonitor.interval=30s,serviceMonitor.scrapeTimeout=1m"],
     "serviceMonitor.scrapeTimeout (1m) must not exceed serviceMonitor.interval (30s)"),
    (["--set", "serviceMonitor.enabled=true,serviceMonitor.interval=1m,serviceMonitor.scrapeTimeout=60001ms"],
     "must not exceed"),
    # one argument: the operator would not parse it, and it passed the check of the chart's own flags
    (["--set", "extraArgs={--metrics-port 9090}"], 'extraArgs entry "--metrics-port 9090" holds whitespace'),
    # a digest is no tag (repo:sha256:... is no image name a runtime can pull): image.digest is
    (["--set", "image.tag=sha256:" + "a" * 64], "/image/tag"),
    (["--set", "image.digest=" + "a" * 64], "/image/digest"),
])
def test_bad_values_are_refused(values, said):
    out = helm("template", "rolloutbatch", str(CHART), "--namespace", NAMESPACE, *values, check=False)
    assert out.returncode != 0 and said in out.stderr, out.stderr


@pytest.mark.parametrize("values, image", [
    ([], f"{IMAGE}:{APP_VERSION}"),
    (["--set", "image.tag=v1.2.3"], f"{IMAGE}:v1.2.3"),
    (["--set", f"image.digest=sha256:{'b' * 64}"], f"{IMAGE}@sha256:{'b' * 64}"),
    (["--set", f"image.tag=v1,image.digest=sha256:{'b' * 64}"], f"{IMAGE}:v1@sha256:{'b' * 64}"),
])
def test_the_operator_image_is_its_tag_or_pinned_by_its_digest(values, image):
    (deployment,) = [d for d in template(*values) if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image


@pytest.mark.parametrize("interval, timeout", [("1m30s", "1m"), ("1m", "60000ms"), ("010s", "9s"), ("1y", "52w"),
                                               ("10s", "10s")])
def test_a_scrape_timeout_up_to_the_interval_renders(interval, timeout):
    """The durations are compared by their value, whatever their units (and a leading zero is no octal)."""
    docs = template("--set", f"serviceMonitor.enabled=true,serviceMonitor.interval={interval},"
                             f"serviceMonitor.scrapeTimeout={timeout}")
    (endpoint,) = next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == (interval, timeout)


@pytest.mark.parametrize("flag", ["--no-leader", "--liveness=9000", "--metrics-p=9999", "--watch=team-c"])
def test_an_abbreviation_of_a_charts_flag_in_extra_args_is_no_flag_of_the_operator(flag, capsys):
    """The chart refuses its own flags in extraArgs spelled in full; a prefix of one renders, and
    the operator must not read it as that flag (argparse would, with allow_abbrev)."""
    from rolloutbatch.cli.main import build_parser

    args = deployment("--set", f"extraArgs={{{flag}}}")["spec"]["template"]["spec"]["containers"][0]["args"]
    with pytest.raises(SystemExit) as refused:
        build_parser(operator=True).parse_args(["operator", *args])
    assert refused.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
