"""``rolloutbatch operator``: builds the shared context and runs kopf with our handlers.

By default it serves the whole cluster; ``--watch-namespace NS`` (repeatable) runs the
least-privilege, namespaced install instead (core.scope: what it refuses and what it skips).

kopf runs standalone (no peering objects): the Deployment has one replica with the ``Recreate``
strategy, so two operators never run at once, and peering would need cluster-wide rights on
KopfPeering objects for no gain (kopf docs, deployment.rst).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import logging
import os
import socket
import sys
import time

import kopf

from rolloutbatch.core.cadence import RESULTS_STEPS, STATUS_STEPS
from rolloutbatch.core.egress import non_pod_dns_cidrs
from rolloutbatch.core.scope import DEGRADED, Scope, parse_namespaces
from rolloutbatch.kube import async_logs, resources
from rolloutbatch.kube.async_logs import AsyncLogReader
from rolloutbatch.kube.client import Api, load_config
from rolloutbatch.kube.errors import ConfigError, KubeError
from rolloutbatch.metrics import Metrics
from rolloutbatch.service.context import Context, Settings
from rolloutbatch.service.policy import BACKOFF, is_transient
from rolloutbatch.service.registry import Registry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Settings()
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then in-cluster)")
    parser.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port (default 8080)")
    parser.add_argument("--metrics-address", default="0.0.0.0")
    parser.add_argument("--liveness-port", type=int, default=8081, help="kopf liveness /healthz port (default 8081)")
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
                             f"append-only shards (default {defaults.results_shard_rows})")
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


def check_port(address: str, port: int, option: str) -> None:
    """Raise StartupError when ``address:port`` cannot be bound (in use, or not ours to bind).

    Binds with SO_REUSEADDR, as both servers do (http.server, asyncio), so a port in TIME_WAIT
    after a previous operator is not reported as busy.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"{option} {port}: cannot resolve address {address!r}: {exc.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(f"{option} {port}: address {address}:{port} is already in use "
                                   "(is another operator running? choose another port)") from None
            raise StartupError(f"{option} {port}: cannot listen on {address}:{port}: {exc.strerror}") from None


def check_ports(args: argparse.Namespace) -> None:
    if args.metrics_port and args.metrics_port == args.liveness_port:
        raise StartupError(f"--metrics-port and --liveness-port are both {args.metrics_port}: they must differ")
    check_port(args.metrics_address, args.metrics_port, "--metrics-port")
    check_port(args.metrics_address, args.liveness_port, "--liveness-port")


def run(args: argparse.Namespace) -> int:
    """Run until stopped; a startup problem (busy port, bad kubeconfig) is one line and exit 1."""
    try:
        check_ports(args)
        config = load_config(args.kubeconfig)
    except (StartupError, ConfigError) as exc:
        print(f"rolloutbatch operator: error: {exc}", file=sys.stderr)
        return 1
    # log_prefix: every line about a batch starts with its namespace/name (kubectl logs readers).
    kopf.configure(verbose=args.verbose, log_prefix=True)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    if args.results_shard_rows < 1:
        print("rolloutbatch operator: error: --results-shard-rows must be at least 1", file=sys.stderr)
        return 1
    for flag in ("status_interval", "status_max_interval", "results_interval", "results_max_interval",
                 "unschedulable_grace"):
        if not 0 <= getattr(args, flag) < 86400:   # also refuses nan and inf, which argparse's float takes
            print(f"rolloutbatch operator: error: --{flag.replace('_', '-')} must be seconds in [0, 86400)",
                  file=sys.stderr)
            return 1
    for kind in ("status", "results"):   # the shortest wait may not exceed the longest
        if getattr(args, f"{kind}_interval") > getattr(args, f"{kind}_max_interval"):
            print(f"rolloutbatch operator: error: --{kind}-interval must not exceed --{kind}-max-interval",
                  file=sys.stderr)
            return 1
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
    # Log reads on the event loop where the credentials allow (kube.async_logs), else in threads.
    reader = AsyncLogReader(config, pool=args.read_concurrency) if async_logs.supported(config) else None
    ctx = Context(api=api, metrics=metrics, settings=settings,
                  read_slots=asyncio.Semaphore(args.read_concurrency), log_reader=reader)
    memo = kopf.Memo(ctx=ctx, registry=Registry(ctx), metrics=metrics)
    import rolloutbatch.handlers  # noqa: F401  (registers the handlers)
    try:
        kopf.run(
            standalone=True,
            # Cluster-wide by default: Dedicated sandboxes are namespaces created per batch, and
            # their pods must be watched wherever they are. Namespaced: the listed ones only.
            clusterwide=scope.clusterwide,
            namespaces=scope.namespaces,
            memo=memo,
            # kopf's default identity asks getpass for the user name, which raises for a uid
            # without a passwd entry (the image runs as 10001, found running it as a pod).
            identity=f"{socket.gethostname()}/{os.getpid()}",
            liveness_endpoint=f"http://{args.metrics_address}:{args.liveness_port}/healthz",
        )
    finally:
        stop_metrics()
    return 0
