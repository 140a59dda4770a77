"""One vocabulary: the CRD's enums, the enums of core.vocabulary and the package's code spell
each word of the API once, in core/vocabulary.py; every reason the package writes is a member of
a reason enum, and docs/design.md's tables list every one of them."""
import ast
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
    "spec.poolRef.whenEmpty": v.PoolWhenEmpty,
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


# Read by the operator with its first word when unset, with no CRD default: a pooled batch's unset
# network is its pool's, one it wrote must be the pool's (core.pool_spec.sandbox_conflict).
UNDEFAULTED = {"spec.isolation.network"}


def test_crd_defaults_are_the_first_choice():
    # core.spec_fields.checked_choice defaults to a tuple's first word, as the API server does with the CRD's default.
    nodes = dict(_walk(_schema()))
    for path, choices in CRD_ENUMS.items():
        if path.startswith("spec.") and path not in UNDEFAULTED:
            assert nodes[path]["default"] == next(iter(choices)).value, path
    assert all("default" not in nodes[path] for path in UNDEFAULTED)


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
    (v.POOL_WHEN_EMPTY, v.PoolWhenEmpty, "POOL_"),
    (v.OUTCOMES, v.Outcome, "OUTCOME_"),
    (v.BATCH_REASONS, v.BatchReason, "REASON_"),
    (v.STALL_REASONS, v.StallReason, "STALL_"),
    (v.EVENT_REASONS, v.EventReason, "EVENT_"),
    (v.EPISODE_REASONS, v.EpisodeReason, "EP_"),
    (v.EPISODE_FLAGS, v.EpisodeFlag, "FLAG_"),
    (v.CHANNELS, v.Channel, "CHANNEL_"),
]
ENUMS = [enum for _, enum, _ in KINDS] + [v.PodPhase, v.RestartPolicy]
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
    # No flat name left a plain str while its kind became an enum (bar the one message and the
    # upstream words a kind of their own would not help: a key, a Job's and a container's reason).
    plain = {name for name, value in vars(v).items()
             if name.isupper() and type(value) is str and not name.startswith("_")}
    assert plain == {"LOG_POD_GONE", "COMPLETION_INDEX_KEY", "JOB_DEADLINE_REASON", "OOM_KILLED_REASON"}, plain
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
    # ... and their --help texts say it from the one constant
    for command in (["logs", "b"], ["results", "b", "-O", "d"], ["operator"]):
        sub = parser._subparsers._group_actions[0].choices[command[0]]
        assert "(default 1 MiB)" in " ".join(sub.format_help().split()), command


# --- no word of the API spelt bare outside core/vocabulary.py ------------------------------------
# The words with a capital (phases, reasons, conditions, spec choices, flags) and the channels:
# as strings in code, not in docstrings or comments. The outcomes ("failed", "lost", ...) are
# left out: the same English words name counts ("failed": 3) that are not outcomes.
GUARDED = {member.value for enum in ENUMS if enum is not v.Outcome for member in enum if member.value[0].isupper()} \
    | {member.value for member in v.Channel}
# Kubernetes' own words that a word of ours spells alike: (file, word). Not our vocabulary.
KUBERNETES_WORDS = {
    # a kubeconfig exec plugin's interactiveMode (client-go's ExecInteractiveMode)
    ("kube/exec_plugin.py", "Never"), ("kube/exec_plugin.py", "Always"),
    ("core/job_facts.py", "Failed"),         # a Job's condition type
    ("core/pod_reading.py", "Ready"),          # a pod's condition type
    ("core/pod_reading.py", "Unschedulable"),  # the reason of a pod's PodScheduled=False
    ("core/pool_census.py", "Unschedulable"),  # the reason of a pod's PodScheduled=False
    ("core/pools.py", "Failed"),             # a Job's condition type
    ("core/crd_pool.py", "Ready"),           # the title of `kubectl get rp`'s column counting warm pods
    # the titles of `kubectl get rb`'s columns, which count episodes (not phases)
    ("core/crd.py", "Running"), ("core/crd.py", "Succeeded"), ("core/crd.py", "Failed"),
    # Kueue's Workload condition type, and its reason of a Workload that waits for quota
    ("core/queueing.py", "Admitted"), ("core/queueing.py", "Pending"),
}


def bare_words(relative: str, source: str) -> list[str]:
    """``file:line: word`` of every string constant of ``source`` that is a guarded word."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [f"{relative}:{node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in GUARDED
            and id(node) not in docstrings]


def test_no_bare_vocabulary_word_in_the_package():
    hits = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative != "core/vocabulary.py":
            for hit in bare_words(relative, path.read_text()):
                hits[hit] = (relative, hit.rsplit(": ", 1)[1])
    allowed = KUBERNETES_WORDS | SPELT_ELSEWHERE
    unexpected = [hit for hit, key in hits.items() if key not in allowed]
    assert not unexpected, "use the names of core.vocabulary:\n" + "\n".join(unexpected)
    # An exception whose word is gone would excuse a later bare word there: keep the lists exact.
    assert set(hits.values()) == allowed


def test_the_guard_sees_a_bare_word():
    assert bare_words("service/x.py", 'if policy == "Always":\n    pass') == ["service/x.py:1: Always"]
    assert bare_words("cli/x.py", "f\"{x or 'DeleteOnSuccess'}\"") == ["cli/x.py:1: DeleteOnSuccess"]
    assert bare_words("cli/x.py", 'd = {"reason": "ImagePullFailed", "channel": "terminationMessage"}') \
        == ["cli/x.py:1: ImagePullFailed", "cli/x.py:1: terminationMessage"]
    assert bare_words("cli/x.py", '"""A Dedicated sandbox."""\n# Shared\nx = 1') == []
    assert bare_words("cli/x.py", 'counts = {"failed": 1, "lost": 2}') == []


# --- every reason the package writes is a word of the vocabulary, documented --------------------
REASON_ENUMS = (v.BatchReason, v.StallReason, v.EventReason, v.EpisodeReason)
REASON_WORDS = {member.value for enum in REASON_ENUMS for member in enum}
# The reason of an API error the SDK raises itself is the API server's (a Status's reason), not ours.
API_STATUS_REASONS = {"NotFound"}
# Bare reasons in modules being rewritten elsewhere, to become the vocabulary's name there; kept
# exact (a fixed one must leave this list, so it cannot excuse a later one): (file, word).
SPELT_ELSEWHERE: set[tuple[str, str]] = set()
DESIGN = (ROOT / "docs" / "design.md").read_text()


def _words(node: ast.AST):
    """("literal", text) or ("name", vocabulary attribute) of what an expression may evaluate to."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield "literal", node.value
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("v", "vocabulary"):
        yield "name", node.attr
    elif isinstance(node, ast.IfExp):
        yield from _words(node.body)
        yield from _words(node.orelse)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _words(value)


def written_reasons(tree: ast.AST):
    """(line, kind, word) of every reason a module writes: an Event's (``emit(type, reason, ...)``),
    a stall's (``Stalled(reason, ...)``), a ``reason=`` argument and a ``"reason":`` entry."""
    for node in ast.walk(tree):
        found: list[ast.AST] = []
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "emit" and len(node.args) >= 2:
                found.append(node.args[1])
            if name == "Stalled" and node.args:
                found.append(node.args[0])
            found += [keyword.value for keyword in node.keywords if keyword.arg == "reason"]
        elif isinstance(node, ast.Dict):
            found += [value for key, value in zip(node.keys, node.values)
                      if isinstance(key, ast.Constant) and key.value == "reason"]
        for expression in found:
            for kind, word in _words(expression):
                yield expression.lineno, kind, word


def _package_trees():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def test_the_scan_sees_every_way_a_reason_is_written():
    tree = ast.parse('self.emit("Normal", "Provisioned", m)\nraise Stalled(v.STALL_QUOTA, m)\n'
                     'patch(reason=v.REASON_RUNNING if a else "X")\nd = {"reason": v.EVENT_FOREIGN_POD}\n')
    assert sorted(written_reasons(tree)) == [(1, "literal", "Provisioned"), (2, "name", "STALL_QUOTA"),
                                             (3, "literal", "X"), (3, "name", "REASON_RUNNING"),
                                             (4, "name", "EVENT_FOREIGN_POD")]


def test_every_vocabulary_name_the_package_uses_exists():
    # A misspelt name is an AttributeError only when its line runs (a stall path, say).
    missing = []
    for relative, tree in _package_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in ("v", "vocabulary") and not node.attr.islower() \
                    and not hasattr(v, node.attr):   # (lower case: a loop's ``v``, not the module)
                missing.append(f"{relative}:{node.lineno}: {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "rolloutbatch.core.vocabulary":
                missing += [f"{relative}:{node.lineno}: {a.name}" for a in node.names if not hasattr(v, a.name)]
    assert not missing, missing


def test_every_reason_the_package_writes_is_in_a_reason_enum():
    wrong, bare = [], set()
    for relative, tree in _package_trees():
        for line, kind, word in written_reasons(tree):
            if kind == "name":
                if not isinstance(getattr(v, word, None), REASON_ENUMS):
                    wrong.append(f"{relative}:{line}: v.{word} is not a reason")
            elif word not in API_STATUS_REASONS:
                if word not in REASON_WORDS:
                    wrong.append(f"{relative}:{line}: {word!r} is no reason of core.vocabulary")
                bare.add((relative, word))
    assert not wrong, "\n".join(wrong)
    # ... and spelt by its name (the only bare ones left are listed, and still there)
    assert bare == SPELT_ELSEWHERE, f"use the names of core.vocabulary: {sorted(bare - SPELT_ELSEWHERE)}"


def test_every_reason_is_written_somewhere():
    # A reason nothing writes is a stale word (or one still spelt bare: SPELT_ELSEWHERE).
    written = {getattr(v, word) for _, tree in _package_trees() for _, kind, word in written_reasons(tree)
               if kind == "name"}
    written |= {word for _, word in SPELT_ELSEWHERE}
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "vocabulary.py")
    for enum in REASON_ENUMS:
        for member in enum:
            names = [name for name, value in vars(v).items() if value is member] + [f"{enum.__name__}.{member.name}"]
            used = member in written or any(re.search(rf"\b(?:v|vocabulary)\.{re.escape(n)}\b", source) for n in names)
            assert used, f"{enum.__name__}.{member.name} is written nowhere"


def _section(heading: str) -> str:
    start = DESIGN.index(heading)
    end = DESIGN.find("\n#", start + len(heading))
    return DESIGN[start:end if end >= 0 else None]


def _column(section: str, header: str) -> set[str]:
    """The backticked words in the column ``header`` of every table of ``section``."""
    words: set[str] = set()
    column = None
    for line in section.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index(header) if header in cells else -1
        elif column >= 0 and not set(cells[column]) <= set("-: "):
            words |= set(re.findall(r"`([A-Za-z]+)`", cells[column]))
    return words


@pytest.mark.parametrize("heading, enum, extra", [
    ("### 5.6 Stall reasons", v.StallReason, set()),
    ("### The success rule", v.EpisodeReason, set()),
    ("### 5.1 Phases", v.BatchReason, set()),
    ("### 5.13 kopf wiring", v.EventReason, {m.value for m in v.BatchReason}),
])
def test_design_documents_every_reason(heading, enum, extra):
    documented = _column(_section(heading), "reason")
    values = {member.value for member in enum}
    assert values <= documented, f"{heading}: not in its table: {sorted(values - documented)}"
    assert documented <= values | extra, f"{heading}: no such reason: {sorted(documented - values - extra)}"


def test_design_lists_the_phases_and_the_conditions_in_order():
    assert _column(_section("### 5.1 Phases"), "phase") == {p.value for p in v.Phase}
    assert f"in the order {', '.join(v.CONDITION_TYPES[:-1])}, {v.CONDITION_TYPES[-1]}:" in " ".join(_section("## 6. Conditions").split())
