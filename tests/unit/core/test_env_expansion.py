"""``$(NAME)`` references expanded as the kubelet does (core.env_expansion): the cases the
Kubernetes API reference names, and the edges of its syntax."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core.env_expansion import expand, expand_env

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
