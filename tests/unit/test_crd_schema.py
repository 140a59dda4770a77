"""The CRD's schema, checked by a real JSON-schema validator (tests/support/crd_schema.py).

Every status ``core.status.build_status`` makes validates against the status schema, and a wrong
one does not (so the validator is shown to bite); every example and SDK-built spec validates
against the spec schema; every ``default:`` the CRD states is the operator's own default. CEL rules
(x-kubernetes-validations) are not evaluated by jsonschema: the spec-level ones are shown to be
enforced by ``parse_spec`` instead.
"""
from __future__ import annotations

import copy
import pathlib

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.stats import summarize
from rolloutbatch.core.status import bare_failure, build_status
from rolloutbatch.sdk import Task, build_batch
from rolloutbatch.sdk.build import plan_inputs
from rolloutbatch.service.context import iso_time
from tests.support import crd_schema
from tests.unit.core.factories import MINIMAL, RAW, result

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = crd_schema.openapi_schema()
STATUS = SCHEMA["properties"]["status"]
SPEC = SCHEMA["properties"]["spec"]
REF = BatchRef("ns", "b", "0123456789abcdef", 1)
T0 = 1_795_935_600.0
# No example database (the checkout is shared).
FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def status(phase=v.RUNNING, summary=None, **changes) -> dict:
    kwargs = dict(ref=REF, spec=parse_spec({"episodes": 3, "task": {"files": {"episode.py": "x"}}}), phase=phase,
                  summary=summary, running=1, ready=1, sandbox_namespace="rb-0123456789",
                  job_name="rb-0123456789", results_configmap="b-results", start_time=iso_time(T0),
                  completion_time=None, job_complete_seconds=None, message="m", reason=None, previous={},
                  now_iso=iso_time(T0 + 60))
    kwargs.update(changes)
    return build_status(**kwargs)


THREE = {
    "running": summarize([result(0, ready=1.2)], episodes=3, origin=100.0),
    "failed": summarize([result(0), result(1, outcome="failed", reward=None), result(2, outcome="lost")],
                        episodes=3, origin=100.0),
    "succeeded": summarize([result(i) for i in range(3)], episodes=3, origin=100.0),
    "stopped": summarize([result(0), result(1, outcome="stopped", reward=None), result(2, outcome="stopped")],
                         episodes=3, origin=100.0),
}
DONE = dict(completion_time=iso_time(T0 + 60), job_complete_seconds=3.0)
CASES = {
    "pending": status(v.PENDING, sandbox_namespace=None, job_name=None, running=0, ready=0),
    "provisioning": status(v.PROVISIONING, running=0, ready=0),
    "running": status(v.RUNNING, THREE["running"], job_uid="5a1e2f3c-0000-4000-8000-000000000001"),
    "unschedulable": status(v.RUNNING, THREE["running"], reason=v.EVENT_UNSCHEDULABLE,
                            message="2 episode pod(s) cannot be scheduled: 0/3 nodes are available"),
    "collecting": status(v.COLLECTING, THREE["failed"]),
    "succeeded": status(v.SUCCEEDED, THREE["succeeded"], results_digests={"b-results": "ab" * 32}, **DONE),
    "failed": status(v.FAILED, THREE["failed"], reason=v.REASON_TOO_FEW, **DONE),
    "stalled, refused spec": status(v.FAILED, spec=None, raw_episodes=7, reason=v.STALL_INVALID_SPEC,
                                    message="spec.episodes: must be at most 100000", **DONE),
    "stalled, unschedulable": status(v.FAILED, THREE["running"], reason=v.STALL_UNSCHEDULABLE, **DONE),
    "stopping": status(v.RUNNING, THREE["running"], reason=v.REASON_STOPPING, message="Stopping (spec.stop)"),
    "stopped": status(v.STOPPED, THREE["stopped"], reason=v.REASON_STOPPED, **DONE),
    "after a restart": status(v.SUCCEEDED, None, previous=status(v.SUCCEEDED, THREE["succeeded"], **DONE),
                              results_digests={"b-results": "cd" * 32, "b-results-1": "ef" * 32}, **DONE),
    "bare failure": bare_failure(v.STALL_API_REFUSED, "the API refused the status", 1, iso_time(T0)),
}


@pytest.mark.parametrize("node", [{"type": "object", "x-kubernetes-embedded-resource": True},
                                  {"type": "integer", "exclusiveMinimum": True}, {"type": "string", "format": "uri"},
                                  {"type": "array", "x-kubernetes-list-type": "bag"}])
def test_an_untranslated_keyword_is_refused_not_ignored(node):
    with pytest.raises(ValueError):
        crd_schema.to_json_schema(node)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_status_the_operator_writes_validates(name):
    assert crd_schema.errors(CASES[name], STATUS) == []


# --- every status over a range of inputs --------------------------------------------------------
RESULTS = st.lists(
    st.builds(lambda outcome, reward, ready, done, node, attempts: dict(outcome=outcome, reward=reward, ready=ready,
                                                                        done=done, node=node, attempts=attempts),
              st.sampled_from(v.OUTCOMES),
              st.one_of(st.none(), st.floats(), st.sampled_from([0.0, 1.0, -1.0, 1e308])),
              st.floats(0, 1e6), st.floats(-10, 1e6), st.one_of(st.none(), st.sampled_from(["n1", "n2", "node-3"])),
              st.integers(1, 4)),
    max_size=12)
REASONS = st.one_of(st.none(), st.sampled_from([v.REASON_PROVISIONING, v.REASON_RUNNING, v.REASON_COLLECTING,
                                                v.REASON_SUCCEEDED, v.REASON_TOO_FEW, v.EVENT_UNSCHEDULABLE,
                                                v.REASON_STOPPING, v.REASON_STOPPED,
                                                *v.STALL_REASONS]))
TIMES = st.floats(0, 4e9)
OPTIONAL_SECONDS = st.one_of(st.none(), st.floats())


@st.composite
def statuses(draw):
    rows = draw(RESULTS)
    episodes = draw(st.integers(max(1, len(rows)), 50))
    spec = draw(st.one_of(st.none(), st.just(parse_spec({"episodes": episodes, "task": {"files": {"episode.py": "x"}}}))))
    results = [result(i, outcome=r["outcome"], reward=r["reward"], ready=r["ready"], done=r["done"], node=r["node"],
                      attempts=r["attempts"]) for i, r in enumerate(rows)]
    summary = draw(st.one_of(st.none(), st.just(summarize(results, episodes=episodes, origin=draw(
        st.one_of(st.none(), st.floats(0, 200))), retried=draw(st.integers(0, 20))))))
    kwargs = dict(
        ref=BatchRef("ns", "b", "0123456789abcdef", draw(st.integers(1, 2**40))), spec=spec,
        phase=draw(st.sampled_from(v.PHASES)), summary=summary,
        running=draw(st.integers(0, episodes)), ready=draw(st.integers(0, episodes)),
        sandbox_namespace=draw(st.one_of(st.none(), st.just("rb-0123456789"))),
        job_name=draw(st.one_of(st.none(), st.just("rb-0123456789"))),
        job_uid=draw(st.one_of(st.none(), st.uuids().map(str))),
        results_configmap="b-results", start_time=iso_time(draw(TIMES)),
        completion_time=draw(st.one_of(st.none(), TIMES.map(iso_time))),
        job_complete_seconds=draw(OPTIONAL_SECONDS), message=draw(st.text(max_size=40)), reason=draw(REASONS),
        results_digests=draw(st.one_of(st.none(), st.dictionaries(st.sampled_from(["b-results", "b-results-1"]),
                                                                  st.text("0123456789abcdef", min_size=64,
                                                                          max_size=64), max_size=2))),
        raw_episodes=draw(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.floats())),
        now_iso=iso_time(draw(TIMES)),
    )
    return kwargs


@FAST
@given(statuses(), statuses())
def test_every_status_validates(first, second):
    # The second write starts from the first (restores, monotonic counts, kept digests).
    before = build_status(previous={}, **first)
    assert crd_schema.errors(before, STATUS) == []
    after = build_status(previous=before, **second)
    assert crd_schema.errors(after, STATUS) == []


# --- the validator bites ------------------------------------------------------------------------
@pytest.mark.parametrize("change, where", [
    ({"phase": "Bogus"}, "phase"),
    ({"succeededEpisodes": -5}, "succeededEpisodes"),
    ({"lostEpisodes": -1}, "lostEpisodes"),
    ({"episodes": "3"}, "episodes"),
    ({"failedEpisodes": 1.0}, "failedEpisodes"),
    ({"bogus": 1}, "<root>"),                         # pruned silently by the API server: it would vanish
    ({"podToReadySeconds": {"p99": 1.0}}, "podToReadySeconds"),
    ({"rewardSum": None}, "rewardSum"),              # not nullable
    ({"nodes": {"n1": -1}}, "nodes.n1"),
    ({"startTime": "yesterday"}, "startTime"),
    ({"observedGeneration": 2**63}, "observedGeneration"),   # format int64
    ({"resultsDigests": {"b-results": 1}}, "resultsDigests.b-results"),
])
def test_a_wrong_status_does_not_validate(change, where):
    wrong = {**copy.deepcopy(CASES["succeeded"]), **change}
    problems = crd_schema.errors(wrong, STATUS)
    assert len(problems) == 1 and problems[0].startswith(f"{where}: "), problems


def test_wrong_conditions_do_not_validate():
    good = CASES["succeeded"]["conditions"]
    assert crd_schema.errors({"conditions": good}, STATUS) == []
    for wrong in ([{**good[0], "status": "Maybe"}], [{"type": "Ready"}], [good[0], dict(good[0])],
                  [{**good[0], "extra": "x"}]):
        assert crd_schema.errors({"conditions": wrong}, STATUS), wrong


def test_nullable_fields_take_null():
    assert crd_schema.errors({"rewardMean": None, "podToReadySeconds": {"p50": None, "p95": None, "max": None},
                              "batchToAllReadySeconds": None, "jobCompleteSeconds": None}, STATUS) == []


@pytest.mark.parametrize("name", ["running.yaml", "succeeded.yaml", "failed.yaml"])
def test_the_argocd_health_checks_fixtures_hold_real_statuses(name):
    body = yaml.safe_load((ROOT / "manifests" / "gitops" / "argocd" / "testdata" / name).read_text())
    assert crd_schema.errors(body["status"], STATUS) == []


# --- specs ----------------------------------------------------------------------------------
def _example_batches():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc and doc.get("kind") == "RolloutBatch":
                yield pytest.param(doc, id=f"{path.name}#{i}")


EXAMPLES = list(_example_batches())


def test_every_example_but_the_policy_server_is_a_batch():
    files = {p.id.split("#")[0] for p in EXAMPLES}
    assert files == {p.name for p in (ROOT / "examples").glob("*.yaml")} - {"policy-server.yaml"}


@pytest.mark.parametrize("batch", EXAMPLES)
def test_every_example_validates(batch):
    assert crd_schema.errors(batch, SCHEMA) == []


TASK = Task(files={"episode.py": "print('hi')"}, command=["python", "-B", "/task/episode.py"])
SDK_BATCHES = {
    "minimal": build_batch("ship", TASK, episodes=4),
    "prefix, inputs, overrides": build_batch(
        "step-", Task(files={"a.py": "x"}, command=["python", "/t/a.py"], env={"SEED": 7},
                      resources={"limits": {"cpu": "1", "memory": "1Gi"}}, mount_path="/t", args=["--fast"]),
        episodes=4, parallelism=2, inputs=[{"n": 1}, {"n": 2}], samples_per_input=2, namespace="rl",
        episode_timeout_seconds=30, minSuccessfulEpisodes=1, retries={"infrastructure": 0},
        isolation={"namespace": "Shared", "network": "AllowEgress"},
        cleanup={"sandbox": "Always", "ttlSecondsAfterFinished": 60},
        podTemplate={"nodeSelector": {"pool": "rl"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
        workspace={"sizeLimit": "2Gi"}),
    "verifier": build_batch("graded", TASK, episodes=2, verifier={"files": {"verify.py": "x"}, "timeoutSeconds": 60}),
    "retained, stopped": build_batch("kept", TASK, episodes=2, cleanup={"results": "Retain"}, stop=True),
    "by reference": plan_inputs(build_batch("big", TASK, episodes=40, inputs=[{"blob": "x" * 8000}] * 40),
                                "rl")[0],
}


@pytest.mark.parametrize("name", sorted(SDK_BATCHES))
def test_what_the_sdk_builds_validates(name):
    batch = SDK_BATCHES[name]
    assert crd_schema.errors(batch, SCHEMA) == []
    assert name != "by reference" or "inputsFrom" in batch["spec"]


def test_the_core_test_specs_validate():
    for raw in (RAW, MINIMAL):
        assert crd_schema.errors(raw, SPEC) == []


@pytest.mark.parametrize("change, where", [
    ({"episodes": 0}, "episodes"),
    ({"bogus": 1}, "<root>"),
    ({"image": ""}, "image"),
    ({"isolation": {"namespace": "dedicated"}}, "isolation.namespace"),
    ({"workspace": {"sizeLimit": "lots"}}, "workspace.sizeLimit"),
    ({"workspace": {"sizeLimit": True}}, "workspace.sizeLimit"),     # int-or-string: not a bool
    ({"env": [{"name": "1X"}]}, "env.0.name"),
    ({"cleanup": {"ttlSecondsAfterFinished": -1}}, "cleanup.ttlSecondsAfterFinished"),
    # past what parse_spec takes: refused by the API server, not stalled later as InvalidSpec
    ({"cleanup": {"ttlSecondsAfterFinished": 2**31}}, "cleanup.ttlSecondsAfterFinished"),
    ({"inputsFrom": {"configMaps": ["a", "a"], "count": 1}}, "inputsFrom.configMaps"),   # list-type set
    ({"podTemplate": {"tolerations": [{"key": "k", "tolerationSeconds": 2**63}]}},
     "podTemplate.tolerations.0.tolerationSeconds"),
    ({"stop": "yes"}, "stop"),
    ({"cleanup": {"results": "Keep"}}, "cleanup.results"),
])
def test_a_wrong_spec_does_not_validate(change, where):
    problems = crd_schema.errors({**MINIMAL, **change}, SPEC)
    assert len(problems) == 1 and problems[0].startswith(f"{where}: "), problems


def test_int_or_string_and_null_take_their_values():
    ok = {**MINIMAL, "workspace": {"sizeLimit": 1073741824}, "cleanup": {"ttlSecondsAfterFinished": None},
          "resources": {"requests": {"cpu": 1}, "limits": {"cpu": "1"}}}
    assert crd_schema.errors(ok, SPEC) == []


# --- CEL rules: not evaluated by jsonschema; parse_spec enforces the spec-level ones ---------
# Rule -> a spec that breaks only it (on a base spec with a task; WITHOUT: the field left out).
WITHOUT = object()
CEL_VIOLATIONS = {
    "!has(self.parallelism) || self.parallelism <= self.episodes": {"episodes": 2, "parallelism": 3},
    "!has(self.minSuccessfulEpisodes) || self.minSuccessfulEpisodes <= self.episodes":
        {"episodes": 2, "minSuccessfulEpisodes": 3},
    "!has(self.inputs) || size(self.inputs) == 0 || size(self.inputs) * (has(self.samplesPerInput) ? "
    "self.samplesPerInput : 1) == self.episodes": {"episodes": 2, "inputs": [{}]},
    "!has(self.inputImages) || size(self.inputImages) == 0 || size(self.inputImages) * (has(self.samplesPerInput) ? "
    "self.samplesPerInput : 1) == self.episodes": {"episodes": 2, "inputImages": ["a"]},
    "!has(self.samplesPerInput) || self.episodes % self.samplesPerInput == 0": {"episodes": 3, "samplesPerInput": 2},
    "!has(self.inputsFrom) || !has(self.inputs) || size(self.inputs) == 0":
        {"episodes": 1, "inputs": [{}], "inputsFrom": {"configMaps": ["a"], "count": 1}},
    "!has(self.inputsFrom) || self.inputsFrom.count * (has(self.samplesPerInput) ? self.samplesPerInput : 1) "
    "== self.episodes": {"episodes": 2, "inputsFrom": {"configMaps": ["a"], "count": 1}},
    "!has(self.episodeTimeoutSeconds) || !has(self.activeDeadlineSeconds) || "
    "self.episodeTimeoutSeconds <= self.activeDeadlineSeconds":
        {"episodes": 1, "episodeTimeoutSeconds": 20, "activeDeadlineSeconds": 10},
    # spec.poolRef (the base case's task is there too: a pooled batch has none)
    "has(self.task) || has(self.poolRef)": {"episodes": 1, "task": WITHOUT},
    "!has(self.task) || !has(self.poolRef)": {"episodes": 1, "poolRef": {"name": "p"}},
    "!has(self.poolRef) || (!has(self.runtimeClassName) && !has(self.inputImages) "
    "&& !has(self.queueName) && (!has(self.verifier) || (!has(self.verifier.image) "
    "&& !has(self.verifier.resources))))":
        {"episodes": 1, "poolRef": {"name": "p"}, "verifier": {"image": "x"}},
}


def test_every_spec_level_cel_rule_has_a_case():
    rules = [rule["rule"] for path, rule in crd_schema.cel_rules(SPEC) if path == ""]
    # Immutability and the one-way stop are update-time rules (they read oldSelf): nothing for
    # parse_spec to refuse; test_crd.py checks what they say.
    assert {r for r in rules if "oldSelf" not in r} == set(CEL_VIOLATIONS)
    assert len([r for r in rules if "oldSelf" in r]) == 2


@pytest.mark.parametrize("rule", sorted(CEL_VIOLATIONS))
def test_what_only_cel_refuses_passes_the_schema_and_parse_spec_refuses_it(rule):
    raw = {k: v for k, v in {"task": {"files": {"episode.py": "x"}}, **CEL_VIOLATIONS[rule]}.items() if v is not WITHOUT}
    assert crd_schema.errors(raw, SPEC) == []    # jsonschema does not evaluate CEL
    with pytest.raises(SpecError):
        parse_spec(raw)


# --- defaults: defined once (core.defaults), applied alike by the API server and parse_spec ------
# Objects stored before a CRD upgrade reach the operator undefaulted: parse_spec must read a spec
# the same with and without the API server's defaults.
CRD_DEFAULTS = dict(crd_schema.defaults(SCHEMA))
# Objects defaulted to {} so that the API server applies the defaults of their fields.
UNDER_OPTIONAL = {"spec.poolRef.whenEmpty"}   # defaulted only inside a given poolRef
EMPTY_OBJECT_DEFAULTS = {"spec.workspace", "spec.retries", "spec.isolation", "spec.cleanup", "spec.podTemplate"}
# What parse_spec makes of a spec without the field, per CRD default path.
PARSED = {
    "spec.image": lambda s: s.image, "spec.resources": lambda s: s.resources,
    "spec.isolation.namespace": lambda s: s.isolation_namespace,
    "spec.cleanup.sandbox": lambda s: s.cleanup_sandbox, "spec.task.mountPath": lambda s: s.task_mount_path,
    "spec.cleanup.results": lambda s: s.cleanup_results,
    "spec.samplesPerInput": lambda s: s.samples_per_input,
    "spec.workspace.mountPath": lambda s: s.workspace_mount_path,
    "spec.workspace.sizeLimit": lambda s: s.workspace_size_limit,
    "spec.episodeTimeoutSeconds": lambda s: s.episode_timeout_seconds,
    "spec.activeDeadlineSeconds": lambda s: s.active_deadline_seconds,
    "spec.retries.infrastructure": lambda s: s.infrastructure_retries,
    "spec.isolation.resourceQuota": lambda s: s.sandbox_quota,
    "spec.poolRef.whenEmpty": lambda s: s.pool_when_empty,
}


def test_every_crd_default_is_read_by_parse_spec():
    # A default added to the CRD needs its line in PARSED (and parse_spec must apply it).
    assert set(CRD_DEFAULTS) == set(PARSED) | EMPTY_OBJECT_DEFAULTS
    assert all(CRD_DEFAULTS[path] == {} for path in EMPTY_OBJECT_DEFAULTS)


@pytest.mark.parametrize("path", sorted(PARSED))
def test_parse_spec_defaults_as_the_crd_does(path):
    assert PARSED[path](parse_spec(MINIMAL)) == CRD_DEFAULTS[path]


def _outcome(raw: dict):
    try:
        return parse_spec(raw)
    except SpecError as exc:
        return f"SpecError: {exc}"


def _some(**fields):
    return st.fixed_dictionaries({}, optional=fields)


# Specs that leave out any subset of the defaulted fields (and give others values of their own).
UNDEFAULTED = st.fixed_dictionaries({
    "episodes": st.just(3),
    "task": st.fixed_dictionaries({"files": st.just({"e.py": "x"})},
                                  optional={"mountPath": st.sampled_from(["/t", "/task"])}),
}, optional={
    "image": st.sampled_from(["python:3.11", "registry.example/agent:1"]),
    "resources": st.sampled_from([{}, {"requests": {"cpu": "1"}}, {"limits": {"memory": "1Gi"}},
                                  {"requests": {"cpu": 1}, "limits": {"cpu": "2"}}]),
    "samplesPerInput": st.sampled_from([1, 3]),
    "episodeTimeoutSeconds": st.integers(1, 4000),
    "activeDeadlineSeconds": st.integers(3000, 7200),
    "workspace": _some(mountPath=st.sampled_from(["/ws", "/workspace"]), sizeLimit=st.sampled_from(["2Gi", 1024])),
    "retries": _some(infrastructure=st.integers(0, 10)),
    "isolation": _some(namespace=st.sampled_from(v.ISOLATION_MODES), network=st.sampled_from(v.NETWORK_MODES),
                       resourceQuota=st.booleans()),
    "cleanup": _some(sandbox=st.sampled_from(v.CLEANUP_POLICIES), results=st.sampled_from(v.RESULTS_POLICIES),
                     ttlSecondsAfterFinished=st.integers(0, 100)),
    "podTemplate": _some(nodeSelector=st.just({"pool": "rl"})),
    "verifier": _some(files=st.just({"verify.py": "x"}), mountPath=st.sampled_from(["/v", "/verifier"]),
                      timeoutSeconds=st.integers(1, 400)),
})


@FAST
@given(UNDEFAULTED)
def test_parse_spec_reads_a_spec_as_the_api_server_defaults_it(raw):
    defaulted = crd_schema.apply_defaults(raw, SPEC)
    assert crd_schema.errors(raw, SPEC) == [] and crd_schema.errors(defaulted, SPEC) == []
    assert _outcome(raw) == _outcome(defaulted), (raw, defaulted)


def test_the_defaulting_sees_every_default():
    # The API server's defaulting of a bare spec, by hand: what the property test compares with.
    before = copy.deepcopy(MINIMAL)
    defaulted = crd_schema.apply_defaults(MINIMAL, SPEC)
    assert MINIMAL == before   # the input is left as it was
    # ({} defaults come back filled with their fields' defaults)
    missed = [path for path in set(CRD_DEFAULTS) - EMPTY_OBJECT_DEFAULTS - UNDER_OPTIONAL
              if _get(defaulted, path.split(".")[1:]) != CRD_DEFAULTS[path]]
    assert not missed and "image" not in MINIMAL
    # a default inside an optional object, when the object is given
    pooled = crd_schema.apply_defaults({"episodes": 1, "poolRef": {"name": "p"}}, SPEC)
    assert pooled["poolRef"]["whenEmpty"] == CRD_DEFAULTS["spec.poolRef.whenEmpty"]
    assert defaulted["podTemplate"] == {} and defaulted["retries"] == {"infrastructure": CRD_DEFAULTS[
        "spec.retries.infrastructure"]}


def _get(value, keys):
    for key in keys:
        value = value.get(key, {}) if isinstance(value, dict) else None
    return value


def test_the_sdk_defaults_as_the_crd_does():
    task = Task(files={}, command=["x"])
    assert (task.image, task.mount_path) == (CRD_DEFAULTS["spec.image"], CRD_DEFAULTS["spec.task.mountPath"])


@pytest.mark.parametrize("path", sorted(CRD_DEFAULTS))
def test_every_default_validates_against_its_own_schema(path):
    # The API server refuses a CRD whose default does not validate.
    node = SCHEMA
    for name in path.split("."):
        node = node["properties"][name]
    assert crd_schema.errors(CRD_DEFAULTS[path], node) == []
