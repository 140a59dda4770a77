"""Helpers shared by the test suites (no Kubernetes mocks: these drive real processes)."""
