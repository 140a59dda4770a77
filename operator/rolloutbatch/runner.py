"""``rolloutbatch operator``: builds the shared context and runs kopf with our handlers.

Leader election (docs/design.md §5.15): every operator process competes for the Lease
``rolloutbatch-operator`` (``--leader-election-namespace``, default ``$POD_NAMESPACE`` else
``rolloutbatch-system``); only its holder starts kopf, the others wait as standbys and say who
leads. The Deployment runs two replicas, so a standby takes over when the leader dies, and a local
``rolloutbatch operator`` beside the installed one waits instead of reconciling too. kopf itself
runs standalone: its peering is not mutual exclusion (same-priority operators both keep working,
with a warning) and would need cluster-wide rights on KopfPeering objects.

By default it serves the whole cluster; ``--watch-namespace NS`` (repeatable) runs the
least-privilege, namespaced install instead (core.scope: what it refuses and what it skips).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import ipaddress
import logging
import math
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import kopf

from rolloutbatch.core.cadence import RESULTS_STEPS, STATUS_STEPS
from rolloutbatch.core.egress import non_pod_dns_cidrs
from rolloutbatch.core.leadership import DEFAULT_NAMESPACE, NAMESPACE_LABELS, Timing, identity
from rolloutbatch.core.results import MAX_DOCUMENT_ROWS
from rolloutbatch.core.scope import DEGRADED, Scope, parse_namespaces
from rolloutbatch.health import HealthServer, readiness
from rolloutbatch.kube import async_logs, leases, resources
from rolloutbatch.kube.async_logs import AsyncLogReader
from rolloutbatch.kube.async_writes import AsyncWriter
from rolloutbatch.kube.client import Api, load_config
from rolloutbatch.kube.errors import ConfigError, Forbidden, KubeError
from rolloutbatch.metrics import Metrics
from rolloutbatch.service.context import Context, Settings
from rolloutbatch.service.leadership import Elector, operate
from rolloutbatch.service.policy import BACKOFF, is_transient
from rolloutbatch.service.registry import Registry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Settings()
    parser.add_argument("--kubeconfig",
                        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
    parser.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port (default 8080)")
    parser.add_argument("--metrics-address", default=None, metavar="ADDRESS",
                        help="where /metrics, /healthz and /readyz listen (default: every address, IPv4 and IPv6, "
                             "so probes reach the pod on a single-stack IPv6 cluster too)")
    parser.add_argument("--liveness-port", type=int, default=8081,
                        help="/healthz (liveness) and /readyz (leader or standby) port (default 8081)")
    parser.add_argument("--metrics-batch-label", action="store_true",
                        help="add a `batch` label to per-batch series (removed when the batch is deleted)")
    parser.add_argument("--log-limit-bytes", type=int, default=defaults.log_limit_bytes,
                        help=f"bytes of each episode's log read at most (default {defaults.log_limit_bytes / 2**20:g} MiB)")
    parser.add_argument("--read-concurrency", type=int, default=defaults.read_concurrency,
                        help="log reads in flight at once across all batches (default 16)")
    parser.add_argument("--status-interval", type=float, default=defaults.status_interval,
                        help="minimum seconds between two status patches of one batch (default 1)")
    parser.add_argument("--status-max-interval", type=float, default=defaults.status_max_interval,
                        help="longest seconds a running batch's changed status waits for its patch; sooner once "
                             f"1/{STATUS_STEPS} of its episodes finished (default {defaults.status_max_interval:g})")
    parser.add_argument("--results-interval", type=float, default=defaults.results_interval,
                        help="minimum seconds between two results checkpoints of one batch "
                             f"(default {defaults.results_interval:g})")
    parser.add_argument("--results-max-interval", type=float, default=defaults.results_max_interval,
                        help="longest seconds a finished episode's row waits for its checkpoint; sooner once "
                             f"1/{RESULTS_STEPS} of the batch finished (default {defaults.results_max_interval:g}; "
                             "equal to --results-interval: every row within that interval, at more requests)")
    parser.add_argument("--results-shard-rows", type=int, default=defaults.results_shard_rows,
                        help="rows per results ConfigMap shard; a batch with more episodes keeps its rows in "
                             f"append-only shards (default {defaults.results_shard_rows}; at most {MAX_DOCUMENT_ROWS}: "
                             "a document of more would not fit a ConfigMap)")
    parser.add_argument("--pod-create-grace", type=float, default=defaults.pod_create_grace,
                        help="seconds without any episode pod after the Job's creation before the batch stalls "
                             f"as PodsNotCreated (default {defaults.pod_create_grace:g})")
    parser.add_argument("--unschedulable-grace", type=float, default=defaults.unschedulable_grace,
                        help="seconds a batch may have episode pods the scheduler cannot place while none runs "
                             f"and none finishes, before it stalls as Unschedulable (default {defaults.unschedulable_grace:g})")
    parser.add_argument("--dns-cidr", action="append", default=[], metavar="CIDR",
                        help="where cluster DNS answers besides kube-system's kube-dns pods and the kube-dns Service's "
                             "non-pod endpoints (found at startup), e.g. a node-local DNS cache: batches with "
                             "spec.isolation.egress may reach port 53 there (repeatable)")
    parser.add_argument("--service-cidr", action="append", default=[], metavar="CIDR",
                        help="the cluster's Service CIDR (ClusterIPs), used where the ServiceCIDR API "
                             "(networking.k8s.io/v1, Kubernetes 1.33+) cannot be read: an egress ipBlock inside it "
                             "never matches and stalls the batch (repeatable; without either, not checked)")
    parser.add_argument("--watch-namespace", action="append", default=[], metavar="NS",
                        help="serve only RolloutBatches of this namespace, without cluster-wide rights (repeatable; "
                             "default: the whole cluster). Batches asking for Dedicated isolation are refused "
                             "(ClusterRightsRequired): Shared runs in the batch's namespace")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    add_leader_election_arguments(parser)


def add_leader_election_arguments(parser: argparse.ArgumentParser) -> None:
    timing = Timing()
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                        help="reconcile only while holding the leader-election Lease, else wait as a standby "
                             "(default on; --no-leader-elect: never two of them, it is up to you)")
    parser.add_argument("--leader-election-namespace", default=None, metavar="NAMESPACE",
                        help=f"the Lease's namespace (default $POD_NAMESPACE, else {DEFAULT_NAMESPACE}, created "
                             "when missing and the kubeconfig may)")
    parser.add_argument("--leader-election-lease-duration", type=float, default=timing.lease_duration,
                        metavar="SECONDS", help="how long a standby waits after the last renewal it saw "
                                                f"(default {timing.lease_duration:g})")
    parser.add_argument("--leader-election-renew-deadline", type=float, default=timing.renew_deadline,
                        metavar="SECONDS", help="the leader stops at once when it could not renew for this "
                                                f"long (default {timing.renew_deadline:g})")
    parser.add_argument("--leader-election-retry-period", type=float, default=timing.retry_period,
                        metavar="SECONDS", help=f"between two tries (default {timing.retry_period:g})")


def cluster_dns_cidrs(api: Api, log: logging.Logger, attempts: int = 6) -> tuple[str, ...]:
    """kube-dns endpoints that are not pods (docs/design.md, declared egress). Read once at
    startup, retried while the API is unavailable (about 30 s in all); none when the Service is
    missing or not ours to read: the pod-selector DNS rule still applies."""
    for attempt in range(attempts):
        try:
            found = non_pod_dns_cidrs(resources.dns_endpoint_slices(api))
            break
        except KubeError as exc:
            if is_transient(exc) and attempt + 1 < attempts:
                time.sleep(BACKOFF[min(attempt + 2, len(BACKOFF) - 1)])
                continue
            log.warning("Cluster DNS endpoints not read (%s): egress rules allow DNS to kube-dns pods only "
                        "(and --dns-cidr)", exc)
            return ()
    if found:
        log.info("Cluster DNS answers outside pods at %s: egress rules allow port 53 there", ", ".join(found))
    else:
        log.info("Cluster DNS: no kube-dns endpoint outside pods; egress rules allow DNS to kube-dns pods "
                 "(and --dns-cidr)")
    return found


class StartupError(Exception):
    """The operator cannot start: printed as one line, exit code 1."""


def check_port(address: str | None, port: int, option: str) -> None:
    """Raise StartupError when ``address:port`` cannot be bound (in use, or not ours to bind).

    Binds with SO_REUSEADDR, as both servers do (http.server, asyncio), so a port in TIME_WAIT
    after a previous operator is not reported as busy. ``address=None`` (every address) checks
    each family the host has, as the servers then listen on each.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"{option} {port}: cannot resolve address {address!r}: {exc.strerror}") from None
    shown = address or "*"
    for family, kind, proto, _, sockaddr in (infos if not address else infos[:1]):
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            if not address:
                continue   # a family this host lacks (no IPv6): the servers skip it too
            raise StartupError(f"{option} {port}: cannot listen on {shown}:{port}: {exc.strerror}") from None
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)   # IPv4 is checked on its own
            try:
                sock.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise StartupError(f"{option} {port}: address {shown}:{port} is already in use "
                                       "(is another operator running? choose another port)") from None
                if not address and exc.errno == errno.EADDRNOTAVAIL:
                    continue
                raise StartupError(f"{option} {port}: cannot listen on {shown}:{port}: {exc.strerror}") from None


@dataclass(frozen=True)
class Range:
    """The values a numeric flag may take. nan is in none (every comparison with it is false)."""

    low: float
    high: float = math.inf
    unit: str = "a whole number"
    open_low: bool = False
    open_high: bool = False

    def admits(self, value: float) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below

    def __str__(self) -> str:
        low, high = (int(x) if float(x).is_integer() else x for x in (self.low, self.high))
        if self.high == math.inf:
            return f"{'above' if self.open_low else 'at least'} {low}"
        return f"{self.unit} in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"


DAY = 86400
SECONDS = Range(0, DAY, "seconds", open_high=True)
PORT = Range(0, 65535, "a port")
# Each numeric flag's usable values. argparse takes nan, inf and negatives, and a value out of
# range fails nothing at startup: it hangs or stalls batches later, so it is refused here.
NUMERIC_FLAGS: dict[str, Range] = {
    "metrics_port": PORT,     # getaddrinfo wraps 70000 to 4464
    "liveness_port": PORT,
    # Read in memory whole, --read-concurrency at once; 0 cuts every log: LogLimitExceeded for all.
    "log_limit_bytes": Range(1, 2**30, "bytes"),
    # 0 reads no log at all (asyncio.Semaphore(0)); the HTTP pool is twice as many connections,
    # and urllib3 fills a pool's queue when it makes the pool.
    "read_concurrency": Range(1, 1000),
    # More rows than one results document holds once shed would make a whole batch the API refuses.
    "results_shard_rows": Range(1, MAX_DOCUMENT_ROWS),
    "status_interval": SECONDS,
    "status_max_interval": SECONDS,
    "results_interval": SECONDS,
    "results_max_interval": SECONDS,
    # 0 or less stalls every batch before the Job controller made its first pod.
    "pod_create_grace": Range(0, DAY, "seconds", open_low=True, open_high=True),
    "unschedulable_grace": SECONDS,
}


def check_numbers(args: argparse.Namespace) -> None:
    """Raise StartupError for a numeric flag out of its range (NUMERIC_FLAGS). The leader-election
    timings are core.leadership.Timing's to check."""
    for flag, usable in NUMERIC_FLAGS.items():
        if not usable.admits(getattr(args, flag)):
            raise StartupError(f"--{flag.replace('_', '-')} must be {usable}")
    for kind in ("status", "results"):   # the shortest wait may not exceed the longest
        if getattr(args, f"{kind}_interval") > getattr(args, f"{kind}_max_interval"):
            raise StartupError(f"--{kind}-interval must not exceed --{kind}-max-interval")


def check_ports(args: argparse.Namespace) -> None:
    if args.metrics_port and args.metrics_port == args.liveness_port:
        raise StartupError(f"--metrics-port and --liveness-port are both {args.metrics_port}: they must differ")
    check_port(args.metrics_address, args.metrics_port, "--metrics-port")
    check_port(args.metrics_address, args.liveness_port, "--liveness-port")


def run(args: argparse.Namespace) -> int:
    """Run until stopped; a startup problem (a flag out of range, busy port, bad kubeconfig) is one line
    and exit 1."""
    try:
        check_numbers(args)
        check_ports(args)
        config = load_config(args.kubeconfig)
    except (StartupError, ConfigError) as exc:
        print(f"rolloutbatch operator: error: {exc}", file=sys.stderr)
        return 1
    # log_prefix: every line about a batch starts with its namespace/name (kubectl logs readers).
    kopf.configure(verbose=args.verbose, log_prefix=True)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    for cidr in args.service_cidr:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            print(f"rolloutbatch operator: error: --service-cidr {cidr!r} is not a CIDR such as 10.96.0.0/12",
                  file=sys.stderr)
            return 1
    try:
        scope = Scope(parse_namespaces(args.watch_namespace))
    except ValueError as exc:
        print(f"rolloutbatch operator: error: --watch-namespace {exc}", file=sys.stderr)
        return 1
    log = logging.getLogger("rolloutbatch")
    if not scope.clusterwide:
        log.info("Serving %s only, without cluster-wide rights: %s", scope.describe(), "; ".join(DEGRADED))
    try:
        elector = leader_elector(args, config, log)
    except StartupError as exc:
        print(f"rolloutbatch operator: error: {exc}", file=sys.stderr)
        return 1
    api = Api(config, pool=max(16, args.read_concurrency * 2))
    dns = tuple(dict.fromkeys([*args.dns_cidr, *cluster_dns_cidrs(api, log)]))
    settings = Settings(log_limit_bytes=args.log_limit_bytes, read_concurrency=args.read_concurrency,
                        status_interval=args.status_interval, status_max_interval=args.status_max_interval,
                        results_interval=args.results_interval, results_max_interval=args.results_max_interval,
                        results_shard_rows=args.results_shard_rows,
                        pod_create_grace=args.pod_create_grace, unschedulable_grace=args.unschedulable_grace,
                        dns_cidrs=dns, service_cidrs=tuple(args.service_cidr), watch_namespaces=scope.namespaces)
    metrics = Metrics(batch_label=args.metrics_batch_label)
    try:
        stop_metrics = metrics.serve(args.metrics_port, args.metrics_address)
    except OSError as exc:  # lost a race for the port since check_ports
        print(f"rolloutbatch operator: error: --metrics-port {args.metrics_port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    # Log reads and the pools' writes on the event loop where the credentials allow (kube.async_logs,
    # kube.async_writes), else in threads.
    on_loop = async_logs.supported(config)
    reader = AsyncLogReader(config, pool=args.read_concurrency) if on_loop else None
    ctx = Context(api=api, metrics=metrics, settings=settings,
                  read_slots=asyncio.Semaphore(args.read_concurrency), log_reader=reader,
                  writer=AsyncWriter(config) if on_loop else None)
    memo = kopf.Memo(ctx=ctx, registry=Registry(ctx), metrics=metrics)
    import rolloutbatch.handlers  # noqa: F401  (registers the handlers)
    freeze_loaded()
    try:
        asyncio.run(_serve(args, memo, elector, scope, on_leader=metrics.set_leader))
    finally:
        stop_metrics()
    return 0


def freeze_loaded() -> None:
    """What is loaded by now (the modules, kopf's registry, the clients: some 80,000 objects) lives
    as long as the process: it is moved out of the garbage collector's reach (gc.freeze). Each full
    collection scanned all of it, 73-154 ms of CPU with the event loop stopped, and one came in most
    pooled batches' hand-overs (bench/README.md); frozen, one scans what came since (9-20 ms)."""
    gc.collect()
    gc.freeze()


def leader_elector(args: argparse.Namespace, config, log: logging.Logger) -> Elector | None:
    """The Lease candidate for ``args`` (None with --no-leader-elect). Outside a pod the Lease's
    namespace is created when missing (labelled as manifests/manager/namespace.yaml), so a local
    operator on a fresh cluster starts; one the kubeconfig may not create is a StartupError."""
    if not args.leader_elect:
        log.warning("Leader election off (--no-leader-elect): nothing stops a second operator from reconciling "
                    "the same batches")
        return None
    try:
        timing = Timing(args.leader_election_lease_duration, args.leader_election_renew_deadline,
                        args.leader_election_retry_period)
    except ValueError as exc:
        raise StartupError(f"--leader-election-*: {exc}") from None
    namespace = args.leader_election_namespace or os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE
    api = Api(config, pool=2, timeout=timing.request_timeout)
    if not os.environ.get("POD_NAMESPACE"):
        labels = NAMESPACE_LABELS if namespace == DEFAULT_NAMESPACE else {}
        try:
            if leases.ensure_namespace(api, namespace, labels):
                log.info("Created namespace %s for the leader-election Lease", namespace)
        except Forbidden as exc:
            raise StartupError(f"the leader-election Lease's namespace {namespace} cannot be read or created with "
                               f"this kubeconfig ({exc}): create it, name another with --leader-election-namespace, "
                               "or run without leader election (--no-leader-elect)") from None
        except KubeError as exc:   # the API is not answering yet: the election loop retries
            log.warning("Namespace %s for the leader-election Lease not checked: %s", namespace, exc)
    pod = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()
    return Elector(api, namespace, identity(pod, uuid.uuid4().hex[:8]), timing)


async def _serve(args: argparse.Namespace, memo: kopf.Memo, elector: Elector | None, scope: Scope, *,
                 on_leader: Callable[[bool], None] = lambda leads: None) -> None:
    """/healthz and /readyz, then kopf once this process leads (service.leadership.operate), telling
    ``on_leader`` (the rolloutbatch_leader gauge) when it starts and stops leading."""
    reconciling = asyncio.Event()   # kopf's ready flag: raised once its startup handlers ran

    def status() -> tuple[int, dict]:
        if elector is None:
            return readiness({"role": "leader", "leaderElection": False}, reconciling.is_set())
        return readiness(elector.status(), reconciling.is_set())

    health = HealthServer(status, alive=lambda: elector is None or elector.alive())
    await health.start(args.metrics_address, args.liveness_port)

    async def reconcile(stop: asyncio.Event) -> None:
        memo.stop = stop   # handlers.lifecycle.raise_stop_flag raises it when kopf stops on a signal
        await kopf.operator(
            standalone=True,
            # Cluster-wide by default: Dedicated sandboxes are namespaces created per batch, and
            # their pods must be watched wherever they are. Namespaced: the listed ones only.
            clusterwide=scope.clusterwide,
            namespaces=scope.namespaces,
            memo=memo,
            # kopf's default identity asks getpass for the user name, which raises for a uid
            # without a passwd entry (the image runs as 10001, found running it as a pod).
            identity=f"{socket.gethostname()}/{os.getpid()}",
            stop_flag=stop,
            ready_flag=reconciling,
        )
    try:
        await operate(elector, reconcile, on_leader=on_leader)
    finally:
        await health.stop()
