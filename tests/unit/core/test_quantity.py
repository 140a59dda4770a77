"""Kubernetes quantities: the one parser (core.k8s_rules.parse_quantity), against any input."""
from decimal import Decimal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as client_parse_quantity

from rolloutbatch.core.k8s_rules import MAX_QUANTITY, format_quantity, parse_quantity
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL

# apimachinery's suffixes, spelled out here rather than taken from the module under test.
SUFFIXES = {"n": Decimal(10) ** -9, "u": Decimal(10) ** -6, "m": Decimal(10) ** -3, "": Decimal(1),
            "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
            "P": Decimal(10) ** 15, "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20,
            "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60}


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_every_suffix_of_kubernetes(suffix):
    assert parse_quantity(f"3{suffix}") == 3 * SUFFIXES[suffix]
    assert parse_quantity(f"1.5{suffix}") == Decimal("1.5") * SUFFIXES[suffix]


@pytest.mark.parametrize("text,value", [("1e3", 1000), ("1E3", 1000), ("1e+3", 1000), ("25e-1", Decimal("2.5")),
                                        ("1E", 10**18), (".5", Decimal("0.5")), ("5.", 5), ("+2", 2), ("-2Ki", -2048),
                                        (" 64Mi ", 64 * 2**20), (2, 2), (0.25, Decimal("0.25")), (1e-05, Decimal("1e-5")),
                                        ("9223372036854775807", 2**63 - 1), ("7Ei", 7 * 2**60)])
def test_decimal_exponents_and_plain_numbers(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", " ", "NaN", "nan", "Infinity", "-Infinity", "inf", "sNaN", "1e", "e3", "1e3k",
                                 "1 Gi", "1ki", "1K", "1KB", "Gi", ".", "1..2", "1.2.3", "--1", "0x10", "1_000", "١",
                                 "1e100", "1e-100", "1e" + "9" * 5000, "0e99999999999", "8Ei", "1e19",
                                 "9223372036854775808", "1" * 100_000, float("nan"), float("inf"), True, None, [],
                                 Decimal("NaN"), Decimal("Infinity"), b"1Gi"])
def test_bad_input_is_a_value_error(bad):
    with pytest.raises(ValueError) as err:
        parse_quantity(bad)
    assert "quantit" in str(err.value) and len(str(err.value)) <= 200


@settings(max_examples=800, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet="0123456789.+-eEnumkKMGTPEi ", max_size=40),
                 st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.decimals(), st.none(),
                 st.booleans(), st.binary()))
def test_any_input_parses_to_a_bounded_decimal_or_raises_value_error(value):
    try:
        parsed = parse_quantity(value)
    except ValueError:
        return
    assert isinstance(parsed, Decimal) and parsed.is_finite() and abs(parsed) <= MAX_QUANTITY


@st.composite
def quantities(draw):
    """(text, exact value) of a valid quantity: sign, digits, fraction, then a suffix or an exponent."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.integers(0, 10**6))
    fraction = draw(st.one_of(st.just(""), st.from_regex(r"\.[0-9]{0,6}", fullmatch=True)))
    number = f"{whole}{fraction}"
    magnitude = Decimal(number if number[-1] != "." else number[:-1])
    if draw(st.booleans()):
        suffix = draw(st.sampled_from(sorted(SUFFIXES)))
        value = magnitude * SUFFIXES[suffix]
    else:
        exponent = draw(st.integers(-12, 12))
        suffix = draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "+"] if exponent >= 0 else [""])) \
            + str(exponent)
        value = magnitude * Decimal(10) ** exponent
    assume(value <= 2**63 - 1)
    return f"{sign}{number}{suffix}", -value if sign == "-" else value


@settings(max_examples=500, deadline=None)
@given(quantities())
def test_valid_quantities_parse_exactly(case):
    text, value = case
    assert parse_quantity(text) == value
    # The kubernetes client's parser (lax on bad input, but right on good) agrees.
    assert parse_quantity(text) == client_parse_quantity(text)
    # A parsed value written back plainly parses to itself.
    assert parse_quantity(str(parse_quantity(text))) == value


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(0, 10**9).map(lambda k: Decimal(k) / 1000),
                 st.tuples(st.integers(0, 2**20), st.sampled_from([1, 2**10, 2**20, 2**30])).map(lambda t: t[0] * t[1])))
def test_format_quantity_round_trips(value):
    """Milli-units and whole numbers (what format_quantity writes) survive format then parse."""
    assert parse_quantity(format_quantity(value)) == value


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "1e999999999", "1e-999999999", "8Ei", "lots"])
def test_the_spec_refuses_bad_quantities_with_a_spec_error(bad):
    with pytest.raises(SpecError) as err:
        parse_spec({**MINIMAL, "resources": {"limits": {"cpu": bad}}})
    assert err.value.field == "spec.resources.limits.cpu"


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**9), st.sampled_from(["n", "u", "m", ""]))
def test_a_quantity_written_never_parses_back_smaller(amount, suffix):
    """What a quota is written with holds what it was made to hold: 4.5m was written 4m (and
    1n as 0m), which refused the last pod a Dedicated quota counts room for."""
    value = parse_quantity(f"{amount}{suffix}")
    assert parse_quantity(format_quantity(value)) == value


def test_a_dedicated_quota_holds_its_pods_at_sub_milli_cpu():
    from rolloutbatch.core import k8s_rules, manifests
    from tests.unit.core.factories import REF
    spec = parse_spec({**MINIMAL, "parallelism": 1, "isolation": {"namespace": "Dedicated"},
                       "resources": {"requests": {"cpu": "1500u", "memory": "64Mi"},
                                     "limits": {"cpu": "1500u", "memory": "64Mi"}}})
    pod = manifests.job(REF, spec, None)["spec"]["template"]["spec"]
    hard = manifests.resource_quota(REF, spec, None)["spec"]["hard"]
    for resource in ("requests.cpu", "limits.cpu"):
        assert parse_quantity(hard[resource]) == k8s_rules.quota_usage(pod)[resource] * int(hard["pods"]), hard
