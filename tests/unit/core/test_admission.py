"""Can a cluster's quotas hold one episode pod (with the RuntimeClass overhead)?"""
import pytest

from rolloutbatch.core.admission import check_quota_fits, pod_footprint, runtime_overhead
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import RAW


def test_quota_that_cannot_hold_one_pod_is_reported():
    spec = parse_spec(RAW)
    quota = {"metadata": {"name": "tight"}, "status": {"hard": {"limits.memory": "100Mi"}, "used": {}}}
    assert "tight" in check_quota_fits([quota], spec, None)
    roomy = {"metadata": {"name": "ok"}, "status": {"hard": {"limits.memory": "10Gi"}, "used": {"limits.memory": "1Gi"}}}
    assert check_quota_fits([roomy], spec, None) is None


def test_footprint_includes_overhead():
    spec = parse_spec(RAW)
    assert pod_footprint(spec, {"cpu": "250m"})["requests.cpu"] == pytest.approx(0.35)
    assert runtime_overhead({"overhead": {"podFixed": {"cpu": "250m"}}}) == {"cpu": "250m"}
    assert runtime_overhead({"handler": "x"}) is None
