"""One vocabulary: the CRD's enums, the tuples of core.vocabulary and the package's code spell
each word of the API once, in core/vocabulary.py."""
import json
import pathlib
import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch import dashboard
from rolloutbatch.core import outcomes, spec, vocabulary as v

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "operator" / "rolloutbatch"
CRD = ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml"

# Every enum of the CRD, by its path in the object ("[]" for an array's items), and the enum of
# the vocabulary it must equal (in order: the first is the default).
CRD_ENUMS = {
    "spec.isolation.namespace": v.IsolationMode,
    "spec.isolation.network": v.NetworkMode,
    "spec.cleanup.sandbox": v.CleanupPolicy,
    "spec.cleanup.results": v.ResultsPolicy,
    "status.phase": v.Phase,
    "status.conditions[].status": v.ConditionStatus,
}


def _schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node: dict, path: str = ""):
    """(path, schema) of every schema node under ``node``."""
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_every_crd_enum_is_a_vocabulary_enum():
    enums = {path: node["enum"] for path, node in _walk(_schema()) if "enum" in node}
    # A new enum in the CRD needs its enum in core.vocabulary (and a line above).
    assert set(enums) == set(CRD_ENUMS)
    for path, values in enums.items():
        assert values == [member.value for member in CRD_ENUMS[path]], path


def test_crd_defaults_are_the_first_choice():
    # core.spec._choice defaults to a tuple's first word, as the API server does with the CRD's default.
    nodes = dict(_walk(_schema()))
    for path, choices in CRD_ENUMS.items():
        if path.startswith("spec."):
            assert nodes[path]["default"] == next(iter(choices)).value, path


def test_the_spec_reads_the_vocabulary():
    assert spec.ISOLATION_NAMESPACE is v.ISOLATION_MODES
    assert spec.ISOLATION_NETWORK is v.NETWORK_MODES
    assert spec.CLEANUP_SANDBOX is v.CLEANUP_POLICIES
    assert spec.CLEANUP_RESULTS is v.RESULTS_POLICIES


# --- the enums and the names callers use -------------------------------------------------------
# Each tuple of the vocabulary, the enum it lists and the prefix of its flat names.
KINDS = [
    (v.PHASES, v.Phase, None),
    (v.CONDITION_TYPES, v.ConditionType, "CONDITION_"),
    (v.CONDITION_STATUSES, v.ConditionStatus, "CONDITION_"),
    (v.ISOLATION_MODES, v.IsolationMode, "ISOLATION_"),
    (v.NETWORK_MODES, v.NetworkMode, "NETWORK_"),
    (v.CLEANUP_POLICIES, v.CleanupPolicy, "CLEANUP_"),
    (v.RESULTS_POLICIES, v.ResultsPolicy, "RESULTS_"),
    (v.OUTCOMES, v.Outcome, "OUTCOME_"),
    (v.BATCH_REASONS, v.BatchReason, "REASON_"),
    (v.STALL_REASONS, v.StallReason, "STALL_"),
    (v.EVENT_REASONS, v.EventReason, "EVENT_"),
    (v.EPISODE_REASONS, v.EpisodeReason, "EP_"),
    (v.EPISODE_FLAGS, v.EpisodeFlag, "FLAG_"),
    (v.CHANNELS, v.Channel, "CHANNEL_"),
]
ENUMS = [enum for _, enum, _ in KINDS]
MEMBERS = [member for enum in ENUMS for member in enum]


@pytest.mark.parametrize("listed, enum, prefix", KINDS, ids=[e.__name__ for _, e, _ in KINDS])
def test_each_tuple_is_its_enum_and_each_flat_name_a_member(listed, enum, prefix):
    # The tuples are derived, never a second list: a member added to an enum is in every check
    # that iterates its tuple (the policy tests, the CRD, the outcome classes).
    assert listed == tuple(enum)
    assert len({m.value for m in enum}) == len(enum), "two members with one value are one member"
    if prefix:
        flat = {name: value for name, value in vars(v).items() if name.startswith(prefix)
                and isinstance(value, enum)}
        assert set(flat.values()) == set(enum), prefix


def test_every_flat_name_of_a_word_is_a_member():
    # No flat name left a plain str while its kind became an enum (bar the one message).
    plain = {name for name, value in vars(v).items()
             if name.isupper() and type(value) is str and not name.startswith("_")}
    assert plain == {"LOG_POD_GONE", "COMPLETION_INDEX_KEY", "JOB_DEADLINE_REASON"}, plain
    assert v.RUNNING is v.Phase.RUNNING and v.STALL_IMAGE is v.StallReason.IMAGE
    assert v.TERMINAL_PHASES == (v.Phase.SUCCEEDED, v.Phase.FAILED, v.Phase.STOPPED)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(MEMBERS), st.sampled_from(["", "<30", ">12", "^40", "s"]))
def test_a_word_is_its_value_wherever_a_string_goes(member, spec_):
    value = member.value
    assert type(value) is str
    assert member == value and value == member and hash(member) == hash(value)
    assert str(member) == value and f"{member}" == value and "%s" % member == value
    assert format(member, spec_) == format(value, spec_)
    assert {value: 1}[member] == 1 and {member: 1}[value] == 1 and member in {value}
    assert "-".join([member, member]) == f"{value}-{value}"
    assert type(member)(value) is member
    assert json.loads(json.dumps({member: [member]})) == {value: [value]}
    assert json.dumps(member) == json.dumps(value)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(MEMBERS))
def test_a_word_dumps_to_yaml_as_its_value(member):
    document = {"spec": {"word": member, member: [member]}}
    plain = {"spec": {"word": member.value, member.value: [member.value]}}
    dumpers = [yaml.SafeDumper, yaml.Dumper, getattr(yaml, "CSafeDumper", yaml.SafeDumper), dashboard._Dumper]
    for dumper in dumpers:
        text = yaml.dump(document, Dumper=dumper)
        assert text == yaml.dump(plain, Dumper=dumper), dumper
        assert yaml.safe_load(text) == plain
    assert yaml.safe_dump(document) == yaml.safe_dump(plain)


def test_words_of_different_kinds_compare_as_strings():
    # The API hands back plain strings; a phase and a reason spelt alike are the same string.
    assert v.Phase.FAILED == v.BatchReason.FAILED == "Failed"
    assert v.StallReason.IMAGE == v.EpisodeReason.IMAGE_PULL
    assert v.EpisodeFlag.EXTRAS_DROPPED == v.EventReason.EXTRAS_DROPPED
    assert "Running" in v.PHASES and "Nope" not in v.PHASES


def test_every_episode_reason_is_classified():
    assert set(outcomes.REASON_CLASS) == set(v.EPISODE_REASONS)


def test_the_crd_names_every_condition_type():
    conditions = dict(_walk(_schema()))["status.conditions[].type"]
    assert all(t in conditions["description"] for t in v.CONDITION_TYPES)


def test_one_log_limit():
    from rolloutbatch.cli.export import export
    from rolloutbatch.cli.main import build_parser
    from rolloutbatch.service.context import Settings

    # the --help texts of the operator and the CLI say "default 1 MiB"
    assert v.LOG_LIMIT_BYTES == 1 << 20
    assert Settings().log_limit_bytes == v.LOG_LIMIT_BYTES
    assert export.__kwdefaults__["log_limit_bytes"] == v.LOG_LIMIT_BYTES
    parser = build_parser()
    assert parser.parse_args(["logs", "b"]).limit_bytes == v.LOG_LIMIT_BYTES
    assert parser.parse_args(["results", "b", "-O", "d"]).log_limit_bytes == v.LOG_LIMIT_BYTES
    assert parser.parse_args(["operator"]).log_limit_bytes == v.LOG_LIMIT_BYTES


# --- no bare isolation, network or cleanup word outside core/vocabulary.py ----------------------
BARE = re.compile(r"""(["'])(Dedicated|Shared|DenyAll|AllowEgress|DeleteOnSuccess|Always|Never)\1""")
# Kubernetes' own values that share a word with ours: (file, field). Not our vocabulary.
KUBERNETES_VALUES = {
    ("core/manifests.py", "restartPolicy"),
}


def bare_words(relative: str, text: str) -> list[str]:
    allowed = {field for file, field in KUBERNETES_VALUES if file == relative}
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in BARE.finditer(line):
            before = line[:match.start()]
            field = re.search(r"""["'](\w+)["']\s*:\s*$""", before)
            if not (field and field.group(1) in allowed):
                hits.append(f"{relative}:{number}: {line.strip()}")
    return hits


def test_no_bare_vocabulary_word_in_the_package():
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative != "core/vocabulary.py":
            hits += bare_words(relative, path.read_text())
    assert not hits, "use the constants of core.vocabulary:\n" + "\n".join(hits)


def test_the_kubernetes_exceptions_are_still_needed():
    # An exception whose line is gone would excuse a later bare word there: keep the list exact.
    for file, field in KUBERNETES_VALUES:
        assert re.search(rf"""["']{field}["']\s*:\s*["'](Always|Never)["']""", (PACKAGE / file).read_text()), file


def test_the_guard_sees_a_bare_word():
    assert bare_words("service/x.py", 'if policy == "Always":') == ['service/x.py:1: if policy == "Always":']
    assert bare_words("core/manifests.py", 'spec = {"restartPolicy": "Never"}') == []
    assert bare_words("core/manifests.py", 'spec = {"cleanup": "Never"}') != []
    assert bare_words("cli/x.py", "f\"{x or 'DeleteOnSuccess'}\"") != []
    assert bare_words("cli/x.py", "# a Dedicated sandbox") == []
