"""env entries: the CRD and core.spec.parse_spec accept exactly the same ones, in spec.env and in
spec.verifier.env: a plain value, or valueFrom.secretKeyRef {name, key} and nothing else (no
fieldRef, resourceFieldRef, configMapKeyRef, nor optional; never value and valueFrom together)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.spec_env import RESERVED_ENV
from tests.support import crd_schema
from tests.unit.core.factories import MINIMAL

SPEC = crd_schema.openapi_schema()["properties"]["spec"]
ENV_ITEMS = SPEC["properties"]["env"]["items"]
EXCLUSIVE = "!(has(self.value) && has(self.valueFrom))"


def crd_accepts(raw: dict) -> bool:
    """What the API server would admit: the schema, plus the items' CEL rule (not evaluated by
    jsonschema), evaluated here as written."""
    if crd_schema.errors(raw, SPEC):
        return False
    envs = [raw.get("env") or [], (raw.get("verifier") or {}).get("env") or []]
    return all(not ("value" in e and "valueFrom" in e) for env in envs for e in env)


def parse_accepts(raw: dict) -> bool:
    try:
        parse_spec(raw)
    except SpecError:
        return False
    return True


def test_the_items_carry_the_one_rule_the_schema_cannot_say():
    for items in (ENV_ITEMS, SPEC["properties"]["verifier"]["properties"]["env"]["items"]):
        assert [r["rule"] for r in items["x-kubernetes-validations"]] == [EXCLUSIVE]
        value_from = items["properties"]["valueFrom"]
        assert set(value_from["properties"]) == {"secretKeyRef"} and value_from["required"] == ["secretKeyRef"]
        assert set(value_from["properties"]["secretKeyRef"]["required"]) == {"name", "key"}


NAMES = st.one_of(st.sampled_from(["llm", "my.secret-1", "S", "", "-a", "a" * 253, "a" * 254, "a..b"]),
                  st.text("ab.-Z9", max_size=6))
KEYS = st.one_of(st.sampled_from(["api-key", ".k", ".", "..", "..k", "a..b", "k" * 253, "k" * 254, "_", "a/b"]),
                 st.text("a.-_Z9/", max_size=5))
SECRET_REF = st.fixed_dictionaries({}, optional={"name": NAMES, "key": KEYS, "optional": st.booleans()})
VALUE_FROM = st.one_of(
    st.fixed_dictionaries({"secretKeyRef": SECRET_REF}),
    st.fixed_dictionaries({}, optional={"secretKeyRef": SECRET_REF,
                                        "fieldRef": st.just({"fieldPath": "metadata.name"}),
                                        "configMapKeyRef": st.just({"name": "cm", "key": "k"}),
                                        "resourceFieldRef": st.just({"resource": "limits.cpu"})}),
    st.just("s"))
ENTRY = st.fixed_dictionaries({"name": st.just("X")},
                              optional={"value": st.one_of(st.just("v"), st.just(""), st.just(1)),
                                        "valueFrom": VALUE_FROM})


@settings(max_examples=600, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENTRY, st.booleans())
def test_the_crd_and_parse_spec_agree_on_every_entry(entry, in_verifier):
    raw = {**MINIMAL, "verifier": {"env": [entry]}} if in_verifier else {**MINIMAL, "env": [entry]}
    assert crd_accepts(raw) == parse_accepts(raw), entry


@pytest.mark.parametrize("entry", [
    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "api-key"}}},
    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "a.b", "key": ".hidden"}}},
    {"name": "X", "value": "plain"},
])
def test_what_both_accept(entry):
    raw = {**MINIMAL, "env": [entry]}
    assert crd_accepts(raw) and parse_accepts(raw)


@pytest.mark.parametrize("entry", [
    {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "k", "optional": True}}},
    {"name": "X", "value": "v", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "k"}}},
    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "llm", "key": ".."}}},
    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "llm"}}},
])
def test_what_both_refuse(entry):
    raw = {**MINIMAL, "env": [entry]}
    assert not crd_accepts(raw) and not parse_accepts(raw)


@pytest.mark.parametrize("field", ["env", "verifier.env"])
def test_reserved_names_are_refused_by_a_cel_rule_in_each_env_list_as_parse_spec_refuses_them(field):
    """kubectl must refuse what the operator would stall InvalidSpec: a reserved name in
    spec.verifier.env too, not only in spec.env."""
    rules = [r["rule"] for path, r in crd_schema.cel_rules(SPEC) if path == "." + field]
    for name in sorted(RESERVED_ENV):
        entry = {"name": name, "value": "x"}
        raw = {**MINIMAL, "env": [entry]} if field == "env" else {**MINIMAL, "verifier": {"env": [entry]}}
        with pytest.raises(SpecError):
            parse_spec(raw)
        assert any(repr(name) in rule and ".all(" in rule for rule in rules), (field, name, rules)


@pytest.mark.parametrize("raw", [{"env": 5}, {"verifier": {"env": 5}}, {"env": [5]}, {"verifier": {"env": "x"}}])
def test_a_pooled_spec_whose_env_is_not_a_list_is_a_spec_error(raw):
    with pytest.raises(SpecError):
        parse_spec({"episodes": 1, "poolRef": {"name": "p"}, **raw})   # a pool's batch names no task
