"""Spec defaults (DESIGN section 3), the checks a schema cannot make, and quantities."""
import pytest

from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import format_quantity, parse_quantity, parse_spec
from tests.unit.core.factories import MINIMAL

F = {"files": {"a": "x"}}


def test_defaults():
    spec = parse_spec(MINIMAL)
    assert (spec.parallelism, spec.min_successful_episodes, spec.image) == (3, 3, "python:3.12-alpine")
    assert spec.command == ("python", "-B", "/task/episode.py") and spec.args == () and spec.env == ()
    assert (spec.task_mount_path, spec.workspace_mount_path, spec.workspace_size_limit) == ("/task", "/workspace", "1Gi")
    assert spec.resources == {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}
    assert (spec.episode_timeout_seconds, spec.active_deadline_seconds, spec.infrastructure_retries) == (600, 3600, 2)
    assert (spec.isolation_namespace, spec.isolation_network, spec.cleanup_sandbox) == ("Dedicated", "DenyAll",
                                                                                      "DeleteOnSuccess")
    assert spec.ttl_seconds_after_finished is None and spec.runtime_class_name is None and spec.inputs == ()


def test_default_command_follows_the_mount_path():
    assert parse_spec({**MINIMAL, "task": {"mountPath": "/t/", **MINIMAL["task"]}}).command[-1] == "/t/episode.py"


def test_explicit_values_are_kept():
    spec = parse_spec({**MINIMAL, "parallelism": 1, "minSuccessfulEpisodes": 0, "command": ["sh"], "args": ["-c", "x"],
                       "env": [{"name": "A", "value": "1"}], "inputs": [{}, {}, {}],
                       "isolation": {"namespace": "Shared", "network": "AllowEgress"},
                       "cleanup": {"sandbox": "Never", "ttlSecondsAfterFinished": 60}})
    assert (spec.parallelism, spec.min_successful_episodes, spec.command, spec.args) == (1, 0, ("sh",), ("-c", "x"))
    assert spec.env == ({"name": "A", "value": "1"},) and len(spec.inputs) == 3
    assert (spec.isolation_namespace, spec.isolation_network, spec.cleanup_sandbox,
            spec.ttl_seconds_after_finished) == ("Shared", "AllowEgress", "Never", 60)


@pytest.mark.parametrize("raw,field", [
    ({"task": F}, "spec.episodes"),
    ({"episodes": 0, "task": F}, "spec.episodes"),
    ({"episodes": True, "task": F}, "spec.episodes"),
    ({"episodes": 100001, "task": F}, "spec.episodes"),
    ({"episodes": 2, "parallelism": 3, "task": F}, "spec.parallelism"),
    ({"episodes": 2, "minSuccessfulEpisodes": 3, "task": F}, "spec.minSuccessfulEpisodes"),
    ({"episodes": 2}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"../a": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"a/b": "x"}}}, "spec.task.files"),
    ({"episodes": 2, "task": {"files": {"a": 3}}}, "spec.task.files[a]"),
    ({"episodes": 2, "task": {"files": {"a": "x"}, "mountPath": "relative"}}, "spec.task.mountPath"),
    ({"episodes": 2, "inputs": [{}], "task": F}, "spec.inputs"),
    ({"episodes": 2, "inputs": "ab", "task": F}, "spec.inputs"),
    ({"episodes": 2, "task": {"files": {"a": "x" * 1000000}}}, "spec.task"),
    ({"episodes": 2, "task": {"files": {"a": "x" * 500000}}, "inputs": [{"p": "y" * 250000}] * 2}, "spec.task"),
    ({"episodes": 2, "env": [{"name": "EPISODE_ID"}], "task": F}, "spec.env"),
    ({"episodes": 2, "env": [{"name": "1BAD"}], "task": F}, "spec.env"),
    ({"episodes": 2, "env": ["A=1"], "task": F}, "spec.env"),
    ({"episodes": 2, "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}], "task": F},
     "spec.env[T]"),
    ({"episodes": 2, "env": [{"name": "T", "value": 1}], "task": F}, "spec.env[T]"),
    ({"episodes": 2, "episodeTimeoutSeconds": 100, "activeDeadlineSeconds": 50, "task": F}, "spec.episodeTimeoutSeconds"),
    ({"episodes": 2, "resources": {"limits": {"cpu": "lots"}}, "task": F}, "spec.resources.limits.cpu"),
    ({"episodes": 2, "resources": {"claims": []}, "task": F}, "spec.resources.claims"),
    ({"episodes": 2, "workspace": {"sizeLimit": "big"}, "task": F}, "spec.workspace.sizeLimit"),
    ({"episodes": 2, "workspace": {"mountPath": "/task/ws"}, "task": F}, "spec.task.mountPath"),
    ({"episodes": 2, "retries": {"infrastructure": 11}, "task": F}, "spec.retries.infrastructure"),
    ({"episodes": 2, "isolation": {"namespace": "dedicated"}, "task": F}, "spec.isolation.namespace"),
    ({"episodes": 2, "isolation": {"network": "Open"}, "task": F}, "spec.isolation.network"),
    ({"episodes": 2, "cleanup": {"sandbox": "Sometimes"}, "task": F}, "spec.cleanup.sandbox"),
    ({"episodes": 2, "cleanup": {"ttlSecondsAfterFinished": -1}, "task": F}, "spec.cleanup.ttlSecondsAfterFinished"),
    ({"episodes": 2, "podTemplate": {"hostNetwork": True}, "task": F}, "spec.podTemplate"),
    ({"episodes": 2, "image": "bad image", "task": F}, "spec.image"),
    ({"episodes": 2, "command": "python x.py", "task": F}, "spec.command"),
])
def test_errors_name_the_field(raw, field):
    with pytest.raises(SpecError) as err:
        parse_spec(raw)
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ") and len(str(err.value)) > len(field) + 5


def test_inputs_mount_cannot_be_shadowed():
    with pytest.raises(SpecError):
        parse_spec({**MINIMAL, "inputs": [{}] * 3, "workspace": {"mountPath": "/rollout"}})
    assert parse_spec({**MINIMAL, "workspace": {"mountPath": "/rollout"}}).workspace_mount_path == "/rollout"


@pytest.mark.parametrize("text,value", [("500m", 0.5), ("128Mi", 134217728), ("1.5", 1.5), ("2k", 2000),
                                        ("1Gi", 2**30), ("1M", 10**6), ("3G", 3 * 10**9), ("100", 100),
                                        ("250u", 0.00025), ("1e3", 1000), (2, 2)])
def test_quantities(text, value):
    assert float(parse_quantity(text)) == pytest.approx(value)


@pytest.mark.parametrize("text", ["500m", "128Mi", "1.5", "2k", "1Gi", "3"])
def test_format_quantity_round_trips(text):
    assert parse_quantity(format_quantity(parse_quantity(text))) == parse_quantity(text)


@pytest.mark.parametrize("text", ["", "lots", "1XB", "m", ".", "1..2"])
def test_bad_quantities(text):
    with pytest.raises(ValueError):
        parse_quantity(text)
