"""Conditions per phase (docs/design.md §6) and lastTransitionTime semantics."""
import pytest

from rolloutbatch.core.conditions import conditions_for, set_condition


def statuses(conditions):
    return {c["type"]: c["status"] for c in conditions}


@pytest.mark.parametrize("phase", ["Pending", "Provisioning", "Running", "Collecting"])
def test_in_progress_phases_are_reconciling(phase):
    conds = conditions_for(phase, "R", "m", 3, [], "t1")
    assert statuses(conds) == {"Ready": "False", "Reconciling": "True", "Stalled": "False", "Finished": "False"}
    assert all(c["observedGeneration"] == 3 and c["reason"] == "R" and c["message"] == "m" for c in conds)


def test_success_and_failure():
    assert statuses(conditions_for("Succeeded", "EpisodesSucceeded", "ok", 1, [], "t")) == \
        {"Ready": "True", "Succeeded": "True", "Reconciling": "False", "Stalled": "False", "Finished": "True"}
    assert statuses(conditions_for("Failed", "RuntimeClassNotFound", "no", 1, [], "t")) == \
        {"Ready": "False", "Succeeded": "False", "Reconciling": "False", "Stalled": "True", "Finished": "True"}


def test_transition_times_follow_status_flips_only():
    running = conditions_for("Running", "EpisodesRunning", "m", 1, [], "t1")
    still = conditions_for("Collecting", "CollectingResults", "c", 1, running, "t2")
    assert all(c["lastTransitionTime"] == "t1" for c in still)
    done = {c["type"]: c for c in conditions_for("Succeeded", "EpisodesSucceeded", "ok", 1, still, "t3")}
    assert done["Stalled"]["lastTransitionTime"] == "t1"        # False -> False
    assert done["Ready"]["lastTransitionTime"] == "t3"          # False -> True
    assert done["Reconciling"]["lastTransitionTime"] == "t3"    # True -> False
    assert done["Succeeded"]["lastTransitionTime"] == "t3"      # new
    assert done["Finished"]["lastTransitionTime"] == "t3"       # False -> True


def test_foreign_conditions_are_dropped_and_order_is_stable():
    previous = [{"type": "Other", "status": "True"}]
    conds = conditions_for("Failed", "X", "x", 1, previous, "t")
    assert [c["type"] for c in conds] == ["Ready", "Succeeded", "Reconciling", "Stalled", "Finished"]


def test_set_condition_returns_a_new_list():
    first = set_condition([], "Ready", "False", "A", "a", 1, "t1")
    again = set_condition(first, "Ready", "False", "B", "b", 2, "t2")
    assert again is not first and first[0]["reason"] == "A"
    assert again[0]["lastTransitionTime"] == "t1" and again[0]["reason"] == "B" and again[0]["observedGeneration"] == 2
    flipped = set_condition(again, "Ready", "True", "C", "c", 2, "t3")
    assert flipped[0]["lastTransitionTime"] == "t3"
    both = set_condition(flipped, "Stalled", "False", "D", "d", 2, "t4")
    assert [c["type"] for c in both] == ["Ready", "Stalled"]
