"""rolloutbatch.metrics on a fresh CollectorRegistry, read back with get_sample_value."""

from __future__ import annotations

import math
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from rolloutbatch import __version__
from rolloutbatch.metrics import (
    DEFAULT_REWARD_BUCKETS,
    DEFAULT_STARTUP_BUCKETS,
    HISTOGRAM_NAMES,
    METRIC_NAMES,
    Metrics,
)


@pytest.fixture
def reg() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def m(reg: CollectorRegistry) -> Metrics:
    return Metrics(reg)


def val(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def exported_families(reg: CollectorRegistry) -> set[str]:
    names = set()
    for fam in reg.collect():
        # prometheus-client strips `_total` from counter family names.
        names.add(fam.name + "_total" if fam.type == "counter" else fam.name)
    return names


def test_every_documented_metric_is_exported(reg, m):
    assert exported_families(reg) == set(METRIC_NAMES)
    assert HISTOGRAM_NAMES <= METRIC_NAMES
    assert all(n.startswith("rolloutbatch_") for n in METRIC_NAMES)


def test_build_info(reg, m):
    assert val(reg, "rolloutbatch_build_info", version=__version__) == 1


def test_default_buckets():
    assert DEFAULT_STARTUP_BUCKETS[0] == 0.25 and DEFAULT_STARTUP_BUCKETS[-1] == 600
    assert list(DEFAULT_STARTUP_BUCKETS) == sorted(DEFAULT_STARTUP_BUCKETS)
    assert list(DEFAULT_REWARD_BUCKETS) == sorted(DEFAULT_REWARD_BUCKETS)


def test_batch_lifecycle_counts_and_active(reg, m):
    m.batch_started("team-a", "b1")
    m.batch_started("team-a", "b2")
    m.batch_started("team-b", "b3")
    assert val(reg, "rolloutbatch_batches_active", namespace="team-a") == 2
    assert val(reg, "rolloutbatch_batches_active", namespace="team-b") == 1
    # Series exist at zero before anything finished, so rate() and ratios see 0.
    assert val(reg, "rolloutbatch_batches_total", namespace="team-a", result="failed") == 0
    assert val(reg, "rolloutbatch_episodes_total", namespace="team-a", result="lost") == 0

    m.batch_finished("team-a", "b1", "succeeded", 3.0, 20.0, 21.0)
    m.batch_finished("team-a", "b2", "failed", None, None, 40.0)
    assert val(reg, "rolloutbatch_batches_active", namespace="team-a") == 0
    assert val(reg, "rolloutbatch_batches_total", namespace="team-a", result="succeeded") == 1
    assert val(reg, "rolloutbatch_batches_total", namespace="team-a", result="failed") == 1
    assert val(reg, "rolloutbatch_batch_ready_seconds_count", namespace="team-a") == 1
    assert val(reg, "rolloutbatch_batch_ready_seconds_sum", namespace="team-a") == 3.0
    assert val(reg, "rolloutbatch_batch_rewards_seconds_sum", namespace="team-a") == 20.0
    assert val(reg, "rolloutbatch_batch_complete_seconds_count", namespace="team-a") == 2
    assert val(reg, "rolloutbatch_batch_complete_seconds_sum", namespace="team-a") == 61.0
    # No batch label by default.
    assert val(reg, "rolloutbatch_batches_active", namespace="team-a", batch="b1") is None


def test_repeated_calls_are_idempotent(reg, m):
    """A restarted or retried handler may repeat a call; nothing is counted twice."""
    m.batch_started("ns", "b")
    m.batch_started("ns", "b")
    assert val(reg, "rolloutbatch_batches_active", namespace="ns") == 1
    m.batch_finished("ns", "b", "succeeded", 1.0, 2.0, 3.0)
    m.batch_finished("ns", "b", "succeeded", 1.0, 2.0, 3.0)
    m.batch_started("ns", "b")  # a finished batch does not become active again
    assert val(reg, "rolloutbatch_batches_active", namespace="ns") == 0
    assert val(reg, "rolloutbatch_batches_total", namespace="ns", result="succeeded") == 1
    assert val(reg, "rolloutbatch_batch_ready_seconds_count", namespace="ns") == 1
    m.batch_deleted("ns", "b")
    m.batch_deleted("ns", "b")
    assert val(reg, "rolloutbatch_batches_active", namespace="ns") == 0


def test_finish_without_start_never_goes_negative(reg, m):
    m.batch_finished("ns", "b", "failed", None, None, None)
    assert val(reg, "rolloutbatch_batches_active", namespace="ns") == 0
    assert val(reg, "rolloutbatch_batches_total", namespace="ns", result="failed") == 1
    assert val(reg, "rolloutbatch_batch_ready_seconds_count", namespace="ns") == 0


def test_deleting_an_unfinished_batch_leaves_active(reg, m):
    m.batch_started("ns", "b1")
    m.batch_started("ns", "b2")
    m.set_running("ns", "b1", 4)
    m.batch_deleted("ns", "b1")
    assert val(reg, "rolloutbatch_batches_active", namespace="ns") == 1
    assert val(reg, "rolloutbatch_episodes_running", namespace="ns") == 0
    # counters are never reset by a deletion
    m.batch_finished("ns", "b2", "succeeded", 1, 1, 1)
    m.batch_deleted("ns", "b2")
    assert val(reg, "rolloutbatch_batches_total", namespace="ns", result="succeeded") == 1


def test_episodes(reg, m):
    m.batch_started("ns", "b")
    m.episode_finished("ns", "b", "succeeded", 0.8, 12.0, 1.0)
    m.episode_finished("ns", "b", "succeeded", 1.2, 10.0, 0.5)
    m.episode_finished("ns", "b", "failed", 2.0, None, None)
    m.episode_finished("ns", "b", "lost", None, None, None)
    m.episode_retried("ns", "b")
    assert val(reg, "rolloutbatch_episodes_total", namespace="ns", result="succeeded") == 2
    assert val(reg, "rolloutbatch_episodes_total", namespace="ns", result="failed") == 1
    assert val(reg, "rolloutbatch_episodes_total", namespace="ns", result="lost") == 1
    assert val(reg, "rolloutbatch_episodes_retried_total", namespace="ns") == 1
    assert val(reg, "rolloutbatch_episode_startup_seconds_count", namespace="ns") == 3
    assert val(reg, "rolloutbatch_episode_startup_seconds_sum", namespace="ns") == pytest.approx(4.0)
    assert val(reg, "rolloutbatch_episode_startup_seconds_bucket", namespace="ns", le="1.0") == 1
    assert val(reg, "rolloutbatch_episode_startup_seconds_bucket", namespace="ns", le="0.25") == 0
    assert val(reg, "rolloutbatch_episode_startup_seconds_bucket", namespace="ns", le="600.0") == 3
    assert val(reg, "rolloutbatch_episode_duration_seconds_count", namespace="ns") == 2
    assert val(reg, "rolloutbatch_episode_reward_count", namespace="ns") == 2
    # With negative buckets (the default) prometheus-client exports no _sum: a sum that can go
    # down is not a counter, and rate() over it would be wrong. Dashboards use the buckets.
    assert val(reg, "rolloutbatch_episode_reward_sum", namespace="ns") is None
    assert val(reg, "rolloutbatch_episode_reward_bucket", namespace="ns", le="0.5") == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)), max_size=30))
def test_the_mean_reward_is_the_signed_sums_over_the_count(rewards):
    # The histogram has no _sum with its default negative buckets: the mean the dashboard shows
    # is (positive - negative) / count, and it must be the rewards' own mean (lost: None, left out).
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.batch_started("ns", "b")   # its series exist at zero from here on
    for reward in rewards:
        m.episode_finished("ns", "b", "succeeded" if reward is not None else "lost", None, None, reward)
    graded = [r for r in rewards if r is not None]
    positive = val(reg, "rolloutbatch_episode_reward_magnitude_total", namespace="ns", sign="positive")
    negative = val(reg, "rolloutbatch_episode_reward_magnitude_total", namespace="ns", sign="negative")
    count = val(reg, "rolloutbatch_episode_reward_count", namespace="ns")
    assert positive >= 0 and negative >= 0 and count == len(graded)
    if graded:
        scale = max(1.0, max(abs(r) for r in graded))
        assert (positive - negative) / count == pytest.approx(math.fsum(graded) / len(graded), abs=1e-9 * scale)


def test_hostile_numbers_are_dropped_or_clamped(reg, m):
    m.episode_finished("ns", "b", "succeeded", -0.3, float("nan"), float("inf"))
    m.episode_finished("ns", "b", "succeeded", None, -5, -1e308 * 10)
    assert val(reg, "rolloutbatch_episode_startup_seconds_count", namespace="ns") == 1
    assert val(reg, "rolloutbatch_episode_startup_seconds_sum", namespace="ns") == 0.0  # clamped
    assert val(reg, "rolloutbatch_episode_duration_seconds_count", namespace="ns") == 1
    assert val(reg, "rolloutbatch_episode_duration_seconds_sum", namespace="ns") == 0.0
    assert val(reg, "rolloutbatch_episode_reward_count", namespace="ns") == 0
    for sign in ("positive", "negative"):   # a dropped reward adds to no sum either
        assert val(reg, "rolloutbatch_episode_reward_magnitude_total", namespace="ns", sign=sign) == 0
    m.batch_finished("ns", "b", "succeeded", float("nan"), -1.0, None)
    assert val(reg, "rolloutbatch_batch_ready_seconds_count", namespace="ns") == 0
    assert val(reg, "rolloutbatch_batch_rewards_seconds_sum", namespace="ns") == 0.0


def test_results_are_validated(m):
    with pytest.raises(ValueError):
        m.episode_finished("ns", "b", "ok", None, None, None)
    with pytest.raises(ValueError):
        m.batch_finished("ns", "b", "lost", None, None, None)


def test_running_is_the_namespace_sum(reg, m):
    m.batch_started("ns", "b1")
    m.batch_started("ns", "b2")
    m.batch_started("other", "b3")
    m.set_running("ns", "b1", 5)
    m.set_running("ns", "b2", 3)
    m.set_running("other", "b3", 7)
    assert val(reg, "rolloutbatch_episodes_running", namespace="ns") == 8
    m.set_running("ns", "b1", 2)
    assert val(reg, "rolloutbatch_episodes_running", namespace="ns") == 5
    m.batch_finished("ns", "b2", "succeeded", 1, 1, 1)  # a finished batch runs nothing
    assert val(reg, "rolloutbatch_episodes_running", namespace="ns") == 2
    m.set_running("ns", "b2", 9)  # late update after finishing: ignored
    assert val(reg, "rolloutbatch_episodes_running", namespace="ns") == 2
    m.set_running("ns", "b1", -4)  # clamped to 0
    assert val(reg, "rolloutbatch_episodes_running", namespace="ns") == 0
    assert val(reg, "rolloutbatch_episodes_running", namespace="other") == 7


def test_batch_label_series_and_removal(reg):
    m = Metrics(reg, batch_label=True)
    m.batch_started("ns", "b1")
    m.batch_started("ns", "b2")
    m.set_running("ns", "b1", 3)
    m.episode_finished("ns", "b1", "succeeded", 1.0, 2.0, 1.0)
    m.episode_retried("ns", "b1")
    m.batch_finished("ns", "b1", "succeeded", 1.0, 2.0, 3.0)
    assert val(reg, "rolloutbatch_batches_active", namespace="ns", batch="b1") == 0
    assert val(reg, "rolloutbatch_batches_active", namespace="ns", batch="b2") == 1
    assert val(reg, "rolloutbatch_episodes_total", namespace="ns", batch="b1", result="succeeded") == 1
    assert val(reg, "rolloutbatch_batches_total", namespace="ns", batch="b1", result="succeeded") == 1
    assert val(reg, "rolloutbatch_episodes_retried_total", namespace="ns", batch="b1") == 1
    assert val(reg, "rolloutbatch_episode_reward_count", namespace="ns", batch="b1") == 1
    assert val(reg, "rolloutbatch_episodes_running", namespace="ns", batch="b1") == 0

    m.batch_deleted("ns", "b1")
    text = "\n".join(
        f"{s.name}{s.labels}" for fam in reg.collect() for s in fam.samples
    )
    assert "'b1'" not in text, text
    assert "'b2'" in text
    # deleting an unfinished batch drops its series too
    m.batch_deleted("ns", "b2")
    assert all(
        "batch" not in s.labels for fam in reg.collect() for s in fam.samples
    )


def test_a_deleted_batchs_late_calls_make_no_series_again():
    """The deletion handler may run before the batch's daemon has ended: its last calls (the
    running count set to 0, a finish, an episode) made every series of the deleted batch again,
    exported until a restart. A new batch of the name records as any other."""
    reg = CollectorRegistry()
    m = Metrics(reg, batch_label=True)
    m.batch_seen("ns", "b1", "uid-1")
    m.batch_started("ns", "b1")
    m.batch_deleted("ns", "b1", "uid-1")
    m.batch_seen("ns", "b1", "uid-1")   # the deleted one's object handled again: still nothing
    m.set_running("ns", "b1", 0)
    m.batch_finished("ns", "b1", "succeeded", 1, 1, 1)
    m.episode_finished("ns", "b1", "succeeded", 1.0, 1.0, 1.0)
    m.episode_retried("ns", "b1")
    m.job_completed("ns", "b1", 3.0)
    assert not [s for fam in reg.collect() for s in fam.samples if s.labels.get("batch") == "b1"]
    m.batch_seen("ns", "b1", "uid-2")   # a new batch of the name: counted, even failing before it starts
    m.batch_finished("ns", "b1", "failed", None, None, None)
    assert val(reg, "rolloutbatch_batches_total", namespace="ns", batch="b1", result="failed") == 1


def test_a_deleted_pools_late_claims_make_no_series_again(reg, m):
    m.pool_started("ns", "warm")
    m.pool_deleted("ns", "warm")
    m.claim_observed("ns", "warm", True, 0.2)
    m.pool_claims("ns", "warm", 1, 0)
    assert not [s for fam in reg.collect() for s in fam.samples if s.labels.get("pool") == "warm"]
    m.pool_started("ns", "warm")
    m.claim_observed("ns", "warm", True, 0.2)
    assert val(reg, "rolloutbatch_claim_seconds_count", namespace="ns", pool="warm", result="hit") == 1


def test_handler_timing_and_errors(reg, m):
    with m.handler("create"):
        pass
    with pytest.raises(RuntimeError, match="boom"):
        with m.handler("create"):
            raise RuntimeError("boom")
    assert val(reg, "rolloutbatch_handler_duration_seconds_count", handler="create") == 2
    assert val(reg, "rolloutbatch_handler_errors_total", handler="create") == 1
    with m.handler("delete"):
        pass
    assert val(reg, "rolloutbatch_handler_errors_total", handler="delete") == 0


async def _async_handler_body(m: Metrics) -> None:
    with m.handler("timer"):
        raise ValueError("x")


def test_handler_in_async_code(reg, m):
    import asyncio

    with pytest.raises(ValueError):
        asyncio.run(_async_handler_body(m))
    assert val(reg, "rolloutbatch_handler_errors_total", handler="timer") == 1


def test_log_reads(reg, m):
    m.log_read(0.02, 1000)
    m.log_read(0.5, 24)
    m.log_read(0.1, 0)
    assert val(reg, "rolloutbatch_log_read_seconds_count") == 3
    assert val(reg, "rolloutbatch_log_read_bytes_total") == 1024


def test_custom_buckets(reg):
    m = Metrics(reg, startup_buckets=(1, 10), reward_buckets=(0, 100))
    m.episode_finished("ns", "b", "succeeded", 5, 1, 50)
    assert val(reg, "rolloutbatch_episode_startup_seconds_bucket", namespace="ns", le="10.0") == 1
    assert val(reg, "rolloutbatch_episode_startup_seconds_bucket", namespace="ns", le="1.0") == 0
    assert val(reg, "rolloutbatch_episode_reward_bucket", namespace="ns", le="100.0") == 1
    assert val(reg, "rolloutbatch_episode_reward_sum", namespace="ns") == 50


def test_two_instances_on_separate_registries_do_not_collide():
    a, b = Metrics(), Metrics()
    a.batch_started("ns", "x")
    assert a.registry.get_sample_value("rolloutbatch_batches_active", {"namespace": "ns"}) == 1
    assert b.registry.get_sample_value("rolloutbatch_batches_active", {"namespace": "ns"}) is None
    # the default registry carries process metrics for the operator
    names = {fam.name for fam in a.registry.collect()}
    assert "python_info" in names


def test_serve_exposes_and_stops(reg, m):
    m.batch_started("ns", "b")
    stop = m.serve(0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{m.server_port}/metrics"
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        assert "rolloutbatch_batches_active" in fams
        (sample,) = fams["rolloutbatch_batches_active"].samples
        assert sample.labels == {"namespace": "ns"} and sample.value == 1
        assert not math.isnan(sample.value)
    finally:
        stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)


@pytest.mark.parametrize("ipv6", ["missing", "v6only"])
def test_serve_by_default_still_answers_on_ipv4_where_ipv6_cannot_carry_it(reg, m, monkeypatch, ipv6):
    """Every address by default is ``::``, which takes IPv4 too only where IPV6_V6ONLY is off: on a
    host without IPv6 it is 0.0.0.0 instead, where the option is on an IPv4 server beside it."""
    import errno
    import socket

    from rolloutbatch import metrics as module
    if ipv6 == "v6only" and not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    real = module.start_http_server
    asked: list = []

    def start(port, addr, **kwargs):
        asked.append(addr)
        if addr == "::" and ipv6 == "missing":
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        if addr == "::":   # as with net.ipv6.bindv6only=1: IPv6 only (here the loopback alone)
            server, thread = real(port, "::1", **kwargs)

            class V6Only:
                def getsockopt(self, level, option):
                    assert (level, option) == (socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
                    return 1

            class Server:
                socket, server_port = V6Only(), server.server_port
                shutdown, server_close = server.shutdown, server.server_close
            return Server(), thread
        return real(port, addr, **kwargs)
    monkeypatch.setattr(module, "start_http_server", start)
    stop = m.serve(0)
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{m.server_port}/metrics", timeout=5).status == 200
    finally:
        stop()
    assert asked == ["::", "0.0.0.0"]


def test_serve_on_a_named_address_listens_there_only(reg, m):
    stop = m.serve(0, "127.0.0.1")
    try:
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://[::1]:{m.server_port}/metrics", timeout=2)
    finally:
        stop()


def test_a_jobs_completion_seen_after_the_batch_ended_is_observed_once(reg, m):
    """The final status comes as soon as every episode is final; the Job controller marks the
    Job complete a moment later. Its duration still counts, once."""
    m.batch_started("team-c", "b1")
    m.batch_finished("team-c", "b1", "succeeded", 1.0, 2.0, None)
    assert val(reg, "rolloutbatch_batch_complete_seconds_count", namespace="team-c") == 0
    m.job_completed("team-c", "b1", 5.0)
    m.job_completed("team-c", "b1", 6.0)            # a second sighting: not counted again
    assert val(reg, "rolloutbatch_batch_complete_seconds_count", namespace="team-c") == 1
    assert val(reg, "rolloutbatch_batch_complete_seconds_sum", namespace="team-c") == 5.0
    m.batch_started("team-c", "b2")
    m.batch_finished("team-c", "b2", "failed", None, None, 7.0)
    m.job_completed("team-c", "b2", 7.0)            # known at the end already
    assert val(reg, "rolloutbatch_batch_complete_seconds_count", namespace="team-c") == 2
    m.job_completed("team-c", "b3", None)           # never measured: nothing
    assert val(reg, "rolloutbatch_batch_complete_seconds_count", namespace="team-c") == 2


def _table_rows(text: str, title: str, prefix: str) -> dict[str, set[str]]:
    """Metric name -> the labels its row names in braces, from the first cell of each row of the
    section's table (a row may name two metrics)."""
    import re

    start = text.index(title)
    section = text[start:text.index("\n## ", start + 1)]
    rows: dict[str, set[str]] = {}
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        first = row.strip("|").split("|")[0]
        for name, labels in re.findall(r"`(\w+)(?:\{([^}]*)\})?`", first):
            rows[prefix + name] = set(re.findall(r"\w+", labels))
    return rows


def _exported_labels(batch_label: bool = False) -> dict[str, set[str]]:
    """Metric family -> its label names, as a real Metrics registers them."""
    from prometheus_client.metrics import MetricWrapperBase

    labels = {}
    for collector in vars(Metrics(CollectorRegistry(), batch_label=batch_label)).values():
        if isinstance(collector, MetricWrapperBase):
            name = collector._name + ("_total" if collector._type == "counter" else "")
            labels[name] = set(collector._labelnames)
    return labels


DOCS = [("README.md", "\n## Metrics\n", ""), ("docs/design.md", "\n## 7. Metrics", "rolloutbatch_")]


@pytest.mark.parametrize("path,title,prefix", DOCS)
def test_the_documented_metrics_tables_are_the_exported_metrics_with_their_labels(path, title, prefix):
    """README's and docs/design.md §7's tables name every metric exported, each with its labels in
    braces (none: no braces); the log-read, handler, build_info and leader series have no namespace."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / path).read_text()
    rows = _table_rows(text, title, prefix)
    exported = _exported_labels()
    assert set(exported) == set(METRIC_NAMES)
    assert sorted(rows) == sorted(METRIC_NAMES), path
    assert {n: labels for n, labels in rows.items() if labels != exported[n]} == {}, (path, exported)


def test_the_batch_label_goes_on_the_per_batch_series_only():
    """As both tables say: every series with namespace gets batch, but the two per pool."""
    plain, labelled = _exported_labels(), _exported_labels(batch_label=True)
    per_pool = {"rolloutbatch_claim_seconds", "rolloutbatch_pool_claims_total"}
    assert {n for n in METRIC_NAMES if labelled[n] != plain[n]} == \
        {n for n in METRIC_NAMES if "namespace" in plain[n]} - per_pool
    assert all(labelled[n] - plain[n] in (set(), {"batch"}) for n in METRIC_NAMES)


def test_a_cold_claims_wait_is_bucketed_as_far_as_a_pod_start_is():
    """A miss is timed from its cold pod's creation (scheduling, image pull): minutes, which
    buckets ending at 30 s put in +Inf, so a dashboard's p95 read at most 30 s. A warm claim's
    0.3 s target still has buckets around it."""
    m = Metrics(CollectorRegistry())
    m.pool_started("team-a", "warm")
    m.claim_observed("team-a", "warm", False, 240.0)
    bounds = [float(b) for b in m.claim_seconds._upper_bounds if b != float("inf")]
    assert max(bounds) >= max(DEFAULT_STARTUP_BUCKETS) and 0.3 in bounds and bounds == sorted(set(bounds))


def test_a_late_finalizer_of_an_old_batch_does_not_wipe_its_namesakes_metrics():
    """Batch A (uid-a) is deleted; a user removes its finalizer by hand while the operator's
    deletion handler still waits for A's sandbox namespace (up to namespace_delete_timeout).
    A new batch of the same name (uid-b) is created and starts; then A's handler returns and
    calls batch_deleted(ns, name, "uid-a"). The namesake must keep its metrics (README: a
    namesake never gets the old one's metrics), and go on recording."""
    reg = CollectorRegistry()
    m = Metrics(reg, batch_label=True)
    val = reg.get_sample_value
    # A ran and is being deleted (its handler has not reached batch_deleted yet)
    m.batch_seen("ns", "b", "uid-a")
    m.batch_started("ns", "b")
    # B, a namesake created once A's object was gone (its finalizer removed by hand)
    m.batch_seen("ns", "b", "uid-b")
    m.batch_started("ns", "b")
    m.episode_finished("ns", "b", "succeeded", 0.5, 1.0, 1.0)
    # A's deletion handler ends now
    m.batch_deleted("ns", "b", "uid-a")
    # B goes on: another episode, then its end
    m.episode_finished("ns", "b", "succeeded", 0.5, 1.0, 1.0)
    m.batch_finished("ns", "b", "succeeded", 1.0, 1.0, None)
    assert val("rolloutbatch_episodes_total", {"namespace": "ns", "batch": "b", "result": "succeeded"}) == 2
    assert val("rolloutbatch_batches_total", {"namespace": "ns", "batch": "b", "result": "succeeded"}) == 1
