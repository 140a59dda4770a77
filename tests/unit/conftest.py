"""Unit tests: no cluster. make test runs them beside the exclusive cluster tests (niced, on the
CPU those leave idle: hack/run-tests.sh), so a property's examples are not held to hypothesis's
per-example deadline (200 ms) nor its check that generating examples is slow: on a loaded
machine those measure the load, not the code."""
from hypothesis import HealthCheck, settings

settings.register_profile("rolloutbatch-unit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rolloutbatch-unit")
