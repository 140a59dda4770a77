"""Unit tests: no cluster. make test runs them beside the exclusive cluster tests (niced, on the
CPU those leave idle: hack/run-tests.sh), so a property's examples are not held to hypothesis's
per-example deadline (200 ms): on a loaded machine that bound measures the load, not the code."""
from hypothesis import settings

settings.register_profile("rolloutbatch-unit", deadline=None)
settings.load_profile("rolloutbatch-unit")
