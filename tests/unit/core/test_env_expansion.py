"""``$(NAME)`` references expanded as the kubelet does (core.env_expansion): the cases the
Kubernetes API reference names, and the edges of its syntax."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core.env_expansion import expand, expand_env, expanded_sizes

KNOWN = {"EPISODE_INDEX": "7", "BATCH_NAME": "b", "EMPTY": ""}


@pytest.mark.parametrize("text, want", [
    ("$(EPISODE_INDEX)", "7"),
    ("out-$(EPISODE_INDEX)-$(BATCH_NAME).json", "out-7-b.json"),
    ("$(UNKNOWN)", "$(UNKNOWN)"),                      # an unknown name is kept as written
    ("$$(EPISODE_INDEX)", "$(EPISODE_INDEX)"),         # escaped
    ("$$$(EPISODE_INDEX)", "$7"),
    ("kill $$", "kill $"),                             # $$ is one $ anywhere
    ("$HOME and ${X}", "$HOME and ${X}"),              # shell syntax is not a reference
    ("$(EMPTY)x", "x"),
    ("$(EPISODE_INDEX", "$(EPISODE_INDEX"),            # unclosed: kept
    ("$(unclosed $(BATCH_NAME)", "$(unclosed $(BATCH_NAME)"),   # the first ')' closes the name
    ("$()", "$()"),
    ("tail $", "tail $"),
    ("", ""),
])
def test_references_expand_as_the_kubelet_expands_them(text, want):
    assert expand(text, KNOWN) == want


def test_an_env_value_sees_only_the_variables_before_it():
    env = [("A", "a-$(B)"), ("B", "b"), ("C", "$(A)/$(B)/$(EPISODE_INDEX)"), ("B", "again-$(B)")]
    assert expand_env(env, KNOWN) == [("A", "a-$(B)"), ("B", "b"), ("C", "a-$(B)/b/7"), ("B", "again-b")]


@given(st.text(alphabet=st.sampled_from("ab()$ "), max_size=30))
def test_text_without_a_known_reference_or_escape_is_kept(text):
    if "$$" not in text and "$(EPISODE_INDEX)" not in text:
        assert expand(text, {"EPISODE_INDEX": "7"}) == text


@given(st.text(max_size=40), st.text(max_size=10))
def test_an_escaped_text_expands_to_itself(text, value):
    """Doubling every '$' escapes the text whatever it holds: no value is spliced in."""
    assert expand(text.replace("$", "$$"), {"X": value, "": value}) == text


_VALUES = st.lists(st.tuples(st.sampled_from(["A", "B", "C"]),
                             st.one_of(st.integers(0, 50),
                                       st.lists(st.sampled_from(["$(A)", "$(B)", "$(C)", "$$(A)", "$", "(", ")", "x",
                                                                 "\u00e9", "\U0001F600", "$(D)"]), max_size=8)
                                       .map("".join))), max_size=6)


@given(_VALUES)
def test_expanded_sizes_are_the_sizes_of_the_expanded_values(env):
    # a number is a Secret's value of that size: taken as it is, never expanded
    as_text = [(name, "s" * value if isinstance(value, int) else value) for name, value in env]
    seen, want = {}, []
    for (name, value), (_, original) in zip(as_text, env):
        value = value if isinstance(original, int) else expand(value, seen)
        seen[name] = value
        want.append((name, len(value.encode())))
    assert expanded_sizes(env) == want


def test_expanded_sizes_never_build_the_value():
    # each variable four times the one before: 4**40 bytes is never made
    env = [("V0", "x" * 1000)] + [(f"V{i}", f"$(V{i - 1})" * 4) for i in range(1, 41)]
    assert expanded_sizes(env)[-1] == ("V40", 1000 * 4 ** 40)
