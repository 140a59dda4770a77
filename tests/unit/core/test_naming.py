"""Deterministic child names and owner labels."""
import re

from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import naming, result_shards
from rolloutbatch.core.result_shards import shard_configmap_name
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL, REF

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_names_derive_from_the_uid():
    assert naming.short_uid(REF.uid) == "7d9f22ce63"
    assert naming.sandbox_namespace(REF) == naming.job_name(REF) == "rb-7d9f22ce63"
    assert naming.task_configmap_name(REF) == "rb-7d9f22ce63-task"
    assert naming.inputs_configmap_name(REF) == "rb-7d9f22ce63-inputs"
    assert DNS_LABEL.match(naming.sandbox_namespace(REF))
    other = BatchRef(REF.namespace, REF.name, "00000000-635d-43fa-a74a-411b5a0b7096")
    assert naming.job_name(other) != naming.job_name(REF)


def test_results_configmap_name():
    assert naming.results_configmap_name(REF) == "shipping-fix-results"
    long_a, long_b = BatchRef("n", "a" * 250 + "x", "u"), BatchRef("n", "a" * 250 + "y", "u")
    name = naming.results_configmap_name(long_a)
    assert len(name) <= 253 and name.endswith("-results")
    assert name != naming.results_configmap_name(long_b)


@given(st.integers(min_value=1, max_value=253))
def test_every_results_configmap_name_fits_with_its_shards_numbers(length):
    """A sharded batch's shards are <head>-<n>, up to about result_shards.MAX_SHARDS of them: a
    batch named with up to 253 characters must not get names the API server refuses."""
    head = naming.results_configmap_name(BatchRef("n", "a" * length, "u"))
    assert head.endswith("-results")
    assert len(shard_configmap_name(head, result_shards.MAX_SHARDS * 10)) <= 253


def test_child_namespace_follows_isolation():
    assert naming.child_namespace(REF, parse_spec(MINIMAL)) == "rb-7d9f22ce63"
    shared = parse_spec({**MINIMAL, "isolation": {"namespace": "Shared"}})
    assert naming.child_namespace(REF, shared) == "rl-team"


def test_labels_and_selector():
    labels = naming.owner_labels(REF)
    assert labels == {"app.kubernetes.io/managed-by": "rolloutbatch", naming.LABEL_BATCH_UID: REF.uid,
                      naming.LABEL_BATCH_NAME: "shipping-fix"}
    assert naming.label_selector(REF) == f"rl.agentruntime.io/batch-uid={REF.uid}"
    long = naming.owner_labels(BatchRef("n", "a" * 100 + ".b", "u"))[naming.LABEL_BATCH_NAME]
    assert len(long) <= 63 and long[-1].isalnum()
    assert naming.label_value("-x-") == "x" and naming.label_value("---") == ""
