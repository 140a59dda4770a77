"""The API server's name rules as core.k8s_rules and core.spec check them: matched whole."""
from __future__ import annotations

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.k8s_rules import check_configmap_key, is_dns_subdomain, is_label_value, is_qualified_name
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import parse_spec


def test_a_trailing_newline_is_no_part_of_a_name():
    """`$` matches before a final newline: "ok\\n" passed every check and the API server refused it
    later (a ConfigMap key, a label, a name), after something was made."""
    assert check_configmap_key("episode.py") is None and check_configmap_key("episode.py\n") is not None
    for check in (is_dns_subdomain, is_label_value, is_qualified_name):
        assert check("ok") and not check("ok\n"), check
    assert naming.label_value("ok\n") != "ok\n"


@pytest.mark.parametrize("spec", [
    {"env": [{"name": "MODE\n", "value": "x"}]},
    {"queueName": "team\n"},
    {"samplesPerInput": 2, "inputs": [{}], "env": [{"name": "A\n", "value": "x"}]},
])
def test_a_spec_name_with_a_trailing_newline_is_refused(spec):
    with pytest.raises(SpecError):
        parse_spec({"episodes": 2, "task": {"files": {"episode.py": "x"}}, **spec})
