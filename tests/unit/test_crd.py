"""crds/: every spec and status field is described (kubectl explain), the printer columns do not
clash with kubectl's own, and the status the operator writes fits the schema (the operator's
status patches ask for strict field validation, so an undeclared field would be refused)."""
from __future__ import annotations

import pathlib

import pytest
import yaml

from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.stats import summarize
from rolloutbatch.core.status import build_status
from tests.unit.core.factories import result

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml").read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def _fields(schema: dict, path: str):
    """(path, schema) of every declared field below ``schema``."""
    for name, sub in (schema.get("properties") or {}).items():
        yield f"{path}.{name}", sub
        yield from _fields(sub, f"{path}.{name}")
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _fields(items, f"{path}[]")


@pytest.mark.parametrize("root", ["spec", "status"])
def test_every_field_has_a_description(root):
    top = SCHEMA["properties"][root]
    missing = [path for path, sub in [(root, top), *_fields(top, root)]
               if not str(sub.get("description") or "").strip()]
    assert not missing, f"no description (kubectl explain prints <no description>): {missing}"


def test_defaults_and_bounds_are_in_the_descriptions():
    spec = SCHEMA["properties"]["spec"]["properties"]
    for name, sub in spec.items():
        text = sub["description"]
        if "default" in sub and sub["default"] not in ({}, None):
            shown = sub["default"] if not isinstance(sub["default"], dict) else "Default"
            assert str(shown) in text or "Default" in text, (name, text)
        if "maximum" in sub and name != "parallelism" and name != "minSuccessfulEpisodes":
            assert str(sub["maximum"]) in text, (name, text)


def test_printer_columns_do_not_repeat_kubectls_namespace():
    names = [c["name"].upper() for c in VERSION["additionalPrinterColumns"]]
    # kubectl get -A prints its own NAMESPACE (the object's) first.
    assert "NAMESPACE" not in names and len(set(names)) == len(names)
    (sandbox,) = [c for c in VERSION["additionalPrinterColumns"] if c["name"] == "Sandbox"]
    assert sandbox["jsonPath"] == ".status.sandboxNamespace" and sandbox.get("priority") == 1


def _check(value, schema: dict, path: str) -> list[str]:
    """What strict field validation and the schema's types would refuse in ``value``."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null, not nullable"]
    kind = schema.get("type")
    wrong = {"integer": not isinstance(value, int) or isinstance(value, bool),
             "number": not isinstance(value, (int, float)) or isinstance(value, bool),
             "string": not isinstance(value, str), "array": not isinstance(value, list),
             "object": not isinstance(value, dict)}.get(kind, False)
    if wrong:
        return [f"{path}: {type(value).__name__}, not {kind}"]
    problems: list[str] = []
    if isinstance(value, dict):
        props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                problems += _check(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                problems += _check(item, extra, f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                problems.append(f"{path}.{key}: not declared")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += _check(item, schema["items"], f"{path}[{i}]")
    return problems


@pytest.mark.parametrize("phase, summary", [
    ("Pending", None),
    ("Running", summarize([result(0, ready=1.2)], episodes=3, origin=100.0)),
    ("Failed", summarize([result(0), result(1, outcome="failed", reward=None), result(2, outcome="lost")],
                         episodes=3, origin=100.0)),
    ("Succeeded", summarize([result(i) for i in range(3)], episodes=3, origin=100.0)),
])
def test_the_status_the_operator_writes_fits_the_schema(phase, summary):
    status = build_status(ref=BatchRef("ns", "b", "0123456789abcdef", 1),
                          spec=parse_spec({"episodes": 3, "task": {"files": {"e.py": "x"}}}), phase=phase,
                          summary=summary, running=1, ready=1, sandbox_namespace="rb-0123456789",
                          job_name="rb-0123456789", results_configmap="b-results",
                          start_time="2026-01-01T00:00:00Z", completion_time="2026-01-01T00:01:00Z",
                          job_complete_seconds=3.0, message="m", reason=None, previous={},
                          now_iso="2026-01-01T00:01:00Z")
    assert _check(status, SCHEMA["properties"]["status"], "status") == []


def test_the_checker_sees_undeclared_fields():
    status_schema = SCHEMA["properties"]["status"]
    assert _check({"phase": "Running", "bogus": 1}, status_schema, "status") == ["status.bogus: not declared"]
    assert _check({"podToReadySeconds": {"p99": 1.0}}, status_schema, "status") == \
        ["status.podToReadySeconds.p99: not declared"]
    assert _check({"rewardSum": None}, status_schema, "status") == ["status.rewardSum: null, not nullable"]


def test_groups_and_inputs_from_match_the_operators_bounds():
    from rolloutbatch.core import spec as core_spec

    spec = SCHEMA["properties"]["spec"]
    props = spec["properties"]
    assert set(props) == core_spec.SPEC_FIELDS
    k = props["samplesPerInput"]
    assert (k["minimum"], k["maximum"], k["default"]) == (1, core_spec.MAX_SAMPLES_PER_INPUT, 1)
    ref = props["inputsFrom"]
    assert set(ref["required"]) == {"configMaps", "count"}
    assert ref["properties"]["configMaps"]["maxItems"] == core_spec.MAX_INPUT_CONFIGMAPS
    assert ref["properties"]["count"]["maximum"] == core_spec.MAX_EPISODES
    rules = " ".join(r["rule"] for r in spec["x-kubernetes-validations"])
    assert "self.episodes % self.samplesPerInput == 0" in rules
    assert "self.inputsFrom.count * " in rules and "size(self.inputs) * " in rules


def test_reserved_env_names_are_the_operators():
    from rolloutbatch.core.spec import RESERVED_ENV

    env = SCHEMA["properties"]["spec"]["properties"]["env"]
    (rule,) = env["x-kubernetes-validations"]
    assert set(rule["rule"].split("[", 1)[1].split("]", 1)[0].replace("'", "").replace(" ", "").split(",")) == RESERVED_ENV
    assert all(name in env["description"] and name in rule["message"] for name in RESERVED_ENV)


def _pod_template():
    return SCHEMA["properties"]["spec"]["properties"]["podTemplate"]["properties"]


def test_the_crd_refuses_the_tolerations_the_operator_refuses():
    from rolloutbatch.core.spec import MAX_TOLERATIONS, PROTECTED_TAINT_KEYS

    tolerations = _pod_template()["tolerations"]
    assert tolerations["maxItems"] == MAX_TOLERATIONS
    rules = tolerations["items"]["x-kubernetes-validations"]
    assert any(r["rule"] == "has(self.key) && size(self.key) > 0" for r in rules)
    (listed,) = [r for r in rules if " in [" in r["rule"]]
    keys = listed["rule"].split("[", 1)[1].split("]", 1)[0].replace("'", "").replace(" ", "").split(",")
    assert set(keys) == PROTECTED_TAINT_KEYS and len(keys) == len(PROTECTED_TAINT_KEYS)
    description = " ".join(tolerations["description"].split())
    assert all(key in listed["message"] and key in description for key in PROTECTED_TAINT_KEYS)


def test_the_crd_refuses_system_priority_classes():
    from rolloutbatch.core.spec import MAX_USER_PRIORITY, SYSTEM_PRIORITY_PREFIX

    field = _pod_template()["priorityClassName"]
    (rule,) = field["x-kubernetes-validations"]
    assert rule["rule"] == f"!self.startsWith('{SYSTEM_PRIORITY_PREFIX}')"
    assert SYSTEM_PRIORITY_PREFIX in field["description"] and str(MAX_USER_PRIORITY) in field["description"]


def test_the_crd_names_the_inputs_opt_in_label():
    from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS

    text = " ".join(SCHEMA["properties"]["spec"]["properties"]["inputsFrom"]["description"].split())
    assert f"{LABEL_INPUTS}={INPUTS_OPT_IN}" in text
