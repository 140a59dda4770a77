"""One vocabulary: the CRD's enums, the tuples of core.vocabulary and the package's code spell
each word of the API once, in core/vocabulary.py."""
import pathlib
import re

import pytest
import yaml

from rolloutbatch.core import outcomes, spec, vocabulary as v

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "operator" / "rolloutbatch"
CRD = ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml"

# Every enum of the CRD, by its path in the object ("[]" for an array's items), and the tuple of
# the vocabulary it must equal (in order: the first is the default).
CRD_ENUMS = {
    "spec.isolation.namespace": v.ISOLATION_MODES,
    "spec.isolation.network": v.NETWORK_MODES,
    "spec.cleanup.sandbox": v.CLEANUP_POLICIES,
    "spec.cleanup.results": v.RESULTS_POLICIES,
    "status.phase": v.PHASES,
    "status.conditions[].status": v.CONDITION_STATUSES,
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


def test_every_crd_enum_is_a_vocabulary_tuple():
    enums = {path: node["enum"] for path, node in _walk(_schema()) if "enum" in node}
    # A new enum in the CRD needs its tuple in core.vocabulary (and a line above).
    assert set(enums) == set(CRD_ENUMS)
    for path, values in enums.items():
        assert tuple(values) == CRD_ENUMS[path], path


def test_crd_defaults_are_the_first_choice():
    # core.spec._choice defaults to a tuple's first word, as the API server does with the CRD's default.
    nodes = dict(_walk(_schema()))
    for path, choices in CRD_ENUMS.items():
        if path.startswith("spec."):
            assert nodes[path]["default"] == choices[0], path


def test_the_spec_reads_the_vocabulary():
    assert spec.ISOLATION_NAMESPACE is v.ISOLATION_MODES
    assert spec.ISOLATION_NETWORK is v.NETWORK_MODES
    assert spec.CLEANUP_SANDBOX is v.CLEANUP_POLICIES
    assert spec.CLEANUP_RESULTS is v.RESULTS_POLICIES


def _constants(prefix: str) -> dict[str, str]:
    return {name: value for name, value in vars(v).items() if name.startswith(prefix) and isinstance(value, str)}


@pytest.mark.parametrize("prefix, listed", [
    ("STALL_", v.STALL_REASONS),
    ("EP_", v.EPISODE_REASONS),
    ("OUTCOME_", v.OUTCOMES),
    ("CHANNEL_", v.CHANNELS),
    ("ISOLATION_", v.ISOLATION_MODES),
    ("NETWORK_", v.NETWORK_MODES),
    ("CLEANUP_", v.CLEANUP_POLICIES),
    ("RESULTS_", v.RESULTS_POLICIES),
    ("CONDITION_", v.CONDITION_TYPES + v.CONDITION_STATUSES),
])
def test_each_tuple_holds_every_constant_of_its_kind(prefix, listed):
    # The tuples are kept by hand: a constant added without its tuple would escape every check
    # that iterates the tuple (the policy tests, the CRD, the outcome classes).
    constants = _constants(prefix)
    assert constants, prefix
    assert sorted(listed) == sorted(constants.values()), prefix
    assert len(set(listed)) == len(listed), prefix


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
