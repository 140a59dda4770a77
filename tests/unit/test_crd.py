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


def test_the_phase_description_names_every_phase_in_order():
    """What `kubectl explain rb.status.phase` says: every member of the enum (Queued was left out)."""
    phase = SCHEMA["properties"]["status"]["properties"]["phase"]
    text = phase["description"]
    assert [p for p in phase["enum"] if p in text] == phase["enum"], text
    assert sorted(phase["enum"], key=text.index) == phase["enum"], text


def test_printer_columns_do_not_repeat_kubectls_namespace():
    names = [c["name"].upper() for c in VERSION["additionalPrinterColumns"]]
    # kubectl get -A prints its own NAMESPACE (the object's) first.
    assert "NAMESPACE" not in names and len(set(names)) == len(names)
    (sandbox,) = [c for c in VERSION["additionalPrinterColumns"] if c["name"] == "Sandbox"]
    assert sandbox["jsonPath"] == ".status.sandboxNamespace" and sandbox.get("priority") == 1


def test_groups_and_inputs_from_rules():
    spec = SCHEMA["properties"]["spec"]
    assert set(spec["properties"]["inputsFrom"]["required"]) == {"configMaps", "count"}
    rules = " ".join(r["rule"] for r in spec["x-kubernetes-validations"])
    assert "self.episodes % self.samplesPerInput == 0" in rules
    assert "self.inputsFrom.count * " in rules and "size(self.inputs) * " in rules


# The CRD and parse_spec read their bounds from core.defaults; these cases show both apply them
# to the same fields, at the same edge. Each is (spec, whether both accept it); CEL relations
# (timeout <= deadline, count x k = episodes, ...) are kept, jsonschema does not evaluate them.
F = {"files": {"episode.py": "x"}}
BIG = {"episodeTimeoutSeconds": 1, "activeDeadlineSeconds": 2592000}
EDGES = {
    "episodes max": ({"episodes": 100000, "task": F}, True),
    "episodes past max": ({"episodes": 100001, "task": F}, False),
    "episodes zero": ({"episodes": 0, "task": F}, False),
    "samplesPerInput max": ({"episodes": 1024, "samplesPerInput": 1024, "task": F}, True),
    "samplesPerInput past max": ({"episodes": 1025, "samplesPerInput": 1025, "task": F}, False),
    "timeout max": ({"episodes": 1, "episodeTimeoutSeconds": 604800, "activeDeadlineSeconds": 604800, "task": F},
                    True),
    "timeout past max": ({"episodes": 1, "episodeTimeoutSeconds": 604801, "activeDeadlineSeconds": 604801,
                          "task": F}, False),
    "deadline max": ({"episodes": 1, **BIG, "task": F}, True),
    "deadline past max": ({"episodes": 1, "activeDeadlineSeconds": 2592001, "task": F}, False),
    "retries max": ({"episodes": 1, "retries": {"infrastructure": 10}, "task": F}, True),
    "retries past max": ({"episodes": 1, "retries": {"infrastructure": 11}, "task": F}, False),
    "verifier timeout max": ({"episodes": 1, **BIG, "verifier": {"timeoutSeconds": 604800}, "task": F}, True),
    "verifier timeout past max": ({"episodes": 1, **BIG, "verifier": {"timeoutSeconds": 604801}, "task": F}, False),
    "inputsFrom count max": ({"episodes": 100000, "inputsFrom": {"configMaps": ["a"], "count": 100000}, "task": F},
                             True),
    "inputsFrom 64 ConfigMaps": ({"episodes": 1, "inputsFrom": {"configMaps": [f"c{i}" for i in range(64)],
                                                                  "count": 1}, "task": F}, True),
    "inputsFrom 65 ConfigMaps": ({"episodes": 1, "inputsFrom": {"configMaps": [f"c{i}" for i in range(65)],
                                                                  "count": 1}, "task": F}, False),
    "64 tolerations": ({"episodes": 1, "podTemplate": {"tolerations": [{"key": f"k{i}", "operator": "Exists"}
                                                                        for i in range(64)]}, "task": F}, True),
    "65 tolerations": ({"episodes": 1, "podTemplate": {"tolerations": [{"key": f"k{i}", "operator": "Exists"}
                                                                        for i in range(65)]}, "task": F}, False),
    # a name of 247, a tag of 128 and a sha512 digest: 512 in all
    "image max": ({"episodes": 1, "image": "r.io/" + "i" * 242 + ":" + "t" * 128 + "@sha512:" + "a" * 128,
                   "task": F}, True),
    "image past max": ({"episodes": 1, "image": "r.io/" + "i" * 243 + ":" + "t" * 128 + "@sha512:" + "a" * 128,
                        "task": F}, False),
    "env name max": ({"episodes": 1, "env": [{"name": "N" * 256}], "task": F}, True),
    "env name past max": ({"episodes": 1, "env": [{"name": "N" * 257}], "task": F}, False),
    "mountPath max": ({"episodes": 1, "task": {**F, "mountPath": "/t" * 512}}, True),
    "mountPath past max": ({"episodes": 1, "task": {**F, "mountPath": "/t" * 512 + "t"}}, False),
    "ttl negative": ({"episodes": 1, "cleanup": {"ttlSecondsAfterFinished": -1}, "task": F}, False),
}


@pytest.mark.parametrize("name", sorted(EDGES))
def test_the_crd_and_parse_spec_share_each_bound(name):
    from rolloutbatch.core.model import SpecError
    from rolloutbatch.core.spec import parse_spec
    from tests.support.crd_schema import errors

    raw, accepted = EDGES[name]
    assert (errors(raw, SCHEMA["properties"]["spec"]) == []) == accepted
    try:
        parse_spec(raw)
    except SpecError:
        assert not accepted
    else:
        assert accepted


def test_reserved_env_names_are_the_operators():
    from rolloutbatch.core.spec_env import RESERVED_ENV

    env = SCHEMA["properties"]["spec"]["properties"]["env"]
    (rule,) = env["x-kubernetes-validations"]
    assert set(rule["rule"].split("[", 1)[1].split("]", 1)[0].replace("'", "").replace(" ", "").split(",")) == RESERVED_ENV
    assert all(name in env["description"] and name in rule["message"] for name in RESERVED_ENV)


def _pod_template():
    return SCHEMA["properties"]["spec"]["properties"]["podTemplate"]["properties"]


def test_the_crd_refuses_the_tolerations_the_operator_refuses():
    from rolloutbatch.core.spec_pod_template import MAX_TOLERATIONS, PROTECTED_TAINT_KEYS

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
    from rolloutbatch.core.defaults import MAX_USER_PRIORITY, SYSTEM_PRIORITY_PREFIX

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


def test_the_crd_parse_spec_and_readme_bound_the_files_alike():
    """README says task.files holds 1..64 files and the CRDs say maxProperties 64 (task.files,
    verifier.files, a pool's task.files), but parse_spec and parse_pool_spec took any number: an
    object stored past the bound (or a spec the SDK checks before it submits) went unrefused."""
    import pathlib

    from rolloutbatch.core import defaults as d
    from rolloutbatch import crdgen
    from rolloutbatch.core.model import SpecError
    from rolloutbatch.core.pool_spec import parse_pool_spec
    from rolloutbatch.core.spec import parse_spec
    from tests.support.crd_schema import ROOT, errors, openapi_schema

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"mounted read-only (1..{d.MAX_FILES} files)" in readme
    pool_crd = openapi_schema(load_crd(ROOT / "crds" / crdgen.POOL_FILE))
    spec, pool = SCHEMA["properties"]["spec"], pool_crd["properties"]["spec"]

    def files(n):
        return {"episode.py": "x", "verify.py": "x", **{f"f{i}": "" for i in range(n - 2)}}

    for n, accepted in ((d.MAX_FILES, True), (d.MAX_FILES + 1, False)):
        for raw, schema, parse, field in (
                ({"episodes": 1, "task": {"files": files(n)}}, spec, parse_spec, "spec.task.files"),
                ({"episodes": 1, "task": {"files": {"episode.py": "x"}}, "verifier": {"files": files(n)}}, spec,
                 parse_spec, "spec.verifier.files"),
                ({"size": 1, "task": {"files": files(n)}}, pool, parse_pool_spec, "spec.task.files")):
            assert (errors(raw, schema) == []) == accepted, (field, n)
            if accepted:
                parse(raw)
            else:
                with pytest.raises(SpecError, match=f"at most {d.MAX_FILES}") as err:
                    parse(raw)
                assert err.value.field == field
