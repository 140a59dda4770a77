"""crds/: every spec and status field is described (kubectl explain), the printer columns do not
clash with kubectl's own, and the bounds and rules the CRD states are the operator's. Whether the
status the operator writes and the specs we ship validate against the schema: test_crd_schema.py."""
from __future__ import annotations

import pytest

from tests.support.crd_schema import load_crd

CRD = load_crd()
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


# --- spec.stop: the one mutable field, one way (the API server evaluates the rules; the e2e tests
# patch a live batch; here: the rules say what the operator assumes) ---------------------------------
def _update_rules() -> dict[str, str]:
    from tests.support.crd_schema import cel_rules
    return {r["message"]: r["rule"] for path, r in cel_rules(SCHEMA["properties"]["spec"]) if "oldSelf" in r["rule"]}


def test_every_spec_field_but_stop_is_immutable_also_when_it_was_absent():
    import re

    from rolloutbatch.core.spec import SPEC_FIELDS, STOP_FIELD

    (rule,) = [r for m, r in _update_rules().items() if m.startswith("spec is immutable")]
    clause = re.compile(r"\(has\(self\.(\w+)\) \? has\(oldSelf\.\1\) && self\.\1 == oldSelf\.\1 : !has\(oldSelf\.\1\)\)")
    fields = clause.findall(rule)
    # the rule is these clauses joined by && and nothing else: no field is left out, none twice
    assert rule == " && ".join(m.group(0) for m in clause.finditer(rule))
    assert sorted(fields) == sorted(SPEC_FIELDS - {STOP_FIELD}) and len(fields) == len(set(fields))


def test_a_stop_cannot_be_undone():
    from rolloutbatch.core.spec import STOP_FIELD

    rules = _update_rules()
    (message,) = [m for m in rules if "cannot be undone" in m]
    assert rules[message] == f"!has(oldSelf.{STOP_FIELD}) || !oldSelf.{STOP_FIELD} || " \
                             f"(has(self.{STOP_FIELD}) && self.{STOP_FIELD})"
    stop = SCHEMA["properties"]["spec"]["properties"][STOP_FIELD]
    assert stop["type"] == "boolean" and "default" not in stop    # absent means running
    text = " ".join(stop["description"].split())
    assert "one-way" in text and "Stopped" in text and "BatchStopped" in text


def test_the_results_retention_names_its_labels():
    from rolloutbatch.core.naming import LABEL_BATCH_NAME, LABEL_BATCH_UID, LABEL_RESULTS_RETAINED, RESULTS_RETAINED

    field = SCHEMA["properties"]["spec"]["properties"]["cleanup"]["properties"]["results"]
    text = " ".join(field["description"].split())
    assert f"{LABEL_RESULTS_RETAINED}={RESULTS_RETAINED}" in text
    assert LABEL_BATCH_NAME in text and LABEL_BATCH_UID in text and "--retained" in text
