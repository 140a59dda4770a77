"""Wiring: API client, node registration and leases, pod manager, log server, signals."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import warnings

from .cni import Network
from .kubeapi import Api, load_kubeconfig
from .logserver import start as start_logserver
from .logstore import LogStore
from .node import NodeManager
from .pods import PodManager, Shared

log = logging.getLogger("nodeagent")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devcluster.nodeagent",
                                description="devcluster node agent: runs pods as bubblewrap sandboxes")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node-name", required=True)
    p.add_argument("--port", type=int, required=True, help="HTTPS port for /containerLogs")
    p.add_argument("--state-dir", required=True)
    p.add_argument("--tls-cert", required=True)
    p.add_argument("--tls-key", required=True)
    p.add_argument("--client-ca", help="require client certificates signed by this CA (the apiserver's)")
    p.add_argument("--cpu", default="32")
    p.add_argument("--memory", default="64Gi")
    p.add_argument("--pods", default="250")
    p.add_argument("--ephemeral-storage", default="100Gi")
    # pod networking (the launcher passes all of these; without them pods get loopback only)
    p.add_argument("--node-netns", help="the node's network namespace (name under /run/netns)")
    p.add_argument("--node-ip", help="the node's address in --node-netns (InternalIP, hostIP)")
    p.add_argument("--pod-cidr", help="this node's podCIDR (host-local IPAM range)")
    p.add_argument("--cni-bin", help="directory of the CNI plugins (bridge, host-local, loopback)")
    p.add_argument("--netns-prefix", help="pod network namespaces are named PREFIX-<pod uid>")
    p.add_argument("--cluster-dns", help="nameserver written into pods' resolv.conf")
    p.add_argument("--kubernetes-service", metavar="HOST:PORT",
                   help="the API's Service address, given to containers as KUBERNETES_SERVICE_HOST/PORT")
    p.add_argument("--wait-for-netpol", action="store_true",
                   help="start a pod's containers only once kube-router has programmed the pod")
    p.add_argument("--log-level", default=os.environ.get("NODEAGENT_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


def _install_child_watcher() -> None:
    """Python 3.11 defaults to one waitpid thread per child; use pidfds instead."""
    if sys.version_info >= (3, 12):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            w = asyncio.PidfdChildWatcher()
            w.attach_loop(asyncio.get_running_loop())
            asyncio.set_child_watcher(w)
        except (AttributeError, OSError, NotImplementedError):
            pass


def _raise_fd_limit() -> None:
    """Each running container holds ~5 descriptors (pipes, pidfd, log file)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def run(args: argparse.Namespace) -> int:
    _install_child_watcher()
    _raise_fd_limit()
    state = os.path.abspath(args.state_dir)
    os.makedirs(state, exist_ok=True)
    server, ctx = load_kubeconfig(args.kubeconfig, os.path.join(state, "client"))
    api = Api(server, ctx)
    await api.start()
    capacity = {"cpu": str(args.cpu), "memory": str(args.memory), "pods": str(args.pods),
                "ephemeral-storage": str(args.ephemeral_storage)}
    logs = LogStore()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    net = None
    if args.node_netns:
        net = Network(node_netns=args.node_netns, node_ip=args.node_ip, pod_cidr=args.pod_cidr,
                      cni_bin=args.cni_bin, data_dir=os.path.join(state, "cni"),
                      pod_prefix=args.netns_prefix, cluster_dns=args.cluster_dns,
                      wait_for_netpol=args.wait_for_netpol)
        runner = await start_logserver(logs, args.port, args.tls_cert, args.tls_key,
                                       host=net.node_ip, netns=net.node_netns, client_ca=args.client_ca)
    else:
        runner = await start_logserver(logs, args.port, args.tls_cert, args.tls_key)
    node = NodeManager(api, args.node_name, port=args.port, capacity=capacity,
                       address=net.node_ip if net else "127.0.0.1",
                       pod_cidr=net.pod_cidr if net else None)
    while not stop.is_set():
        try:
            await node.register()
            break
        except Exception as e:  # noqa: BLE001 - the apiserver may still be starting
            log.warning("node registration: %s; retrying", e)
            try:
                await asyncio.wait_for(stop.wait(), 1)
            except asyncio.TimeoutError:
                pass
    service = None
    if args.kubernetes_service:
        host, _, port = args.kubernetes_service.rpartition(":")
        service = (host, int(port))
    pods = PodManager(Shared(api, args.node_name, state, capacity, logs, net, service))
    tasks = [asyncio.create_task(node.run(), name="node"), asyncio.create_task(pods.run(), name="pods")]
    if not stop.is_set():
        log.info("node %s ready (state %s)", args.node_name, state)
    await stop.wait()
    log.info("stopping: killing sandboxes")
    t0 = loop.time()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await pods.shutdown()
    t1 = loop.time()
    await runner.cleanup()
    t2 = loop.time()
    await api.close()
    log.info("stopped (sandboxes %.2fs, log server %.2fs, client %.2fs)", t1 - t0, t2 - t1, loop.time() - t2)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rc = asyncio.run(run(args))
    log.info("event loop closed")
    return rc
