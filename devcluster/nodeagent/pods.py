"""Pods bound to this node: list+watch, one lifecycle task per pod, kubelet-like status writes.

Status writes are strategic-merge patches of pods/{name}/status carrying the complete
containerStatuses; a Job pod normally costs two writes (Running, then terminal). Writes of
one pod are serialised and coalesced (a write that finds a newer state pending sends it).
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import time

from . import cni, images, sandbox, status as S, termination, volumes
from .envvars import ConfigError, build_command, build_env, kubernetes_service_env, referenced_objects
from .ipam import PodIPs
from .kubeapi import Api, ApiError
from .logstore import LogStore
from .process import ContainerProcess

log = logging.getLogger("nodeagent.pods")

HOST_IP = "127.0.0.1"
RETRY_MIN, RETRY_MAX = 1.0, 20.0          # config/volume errors
POLICY_POLL = 5.0                         # re-check deletion/deadline while policy is pending
BACKOFF_MIN, BACKOFF_MAX = 1.0, 60.0      # container restarts (kubelet: 10 s .. 5 min)
# The Running write waits this long: a container that is already done by then gets a single
# (terminal) status write, like the kubelet's batching status manager. Saves one API write per
# very short pod; longer pods see Running after this delay.
RUNNING_WRITE_DELAY = float(os.environ.get("NODEAGENT_RUNNING_WRITE_DELAY", "0.2"))


def _terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def resolv_conf(pod: dict, cluster_dns: str | None) -> str:
    """What the kubelet writes for the pod's dnsPolicy with --cluster-dns (pure)."""
    spec, ns = pod["spec"], pod["metadata"]["namespace"]
    policy = spec.get("dnsPolicy", "ClusterFirst")
    if spec.get("hostNetwork") and policy == "ClusterFirst":
        policy = "Default"
    cfg = spec.get("dnsConfig") or {}
    servers: list[str] = []
    search: list[str] = []
    opts: list[str] = []
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and cluster_dns:
        servers = [cluster_dns]
        search = [f"{ns}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
        opts = ["ndots:5"]
    if policy == "None" or servers:
        servers += [x for x in cfg.get("nameservers") or [] if x not in servers]
        search += [x for x in cfg.get("searches") or [] if x not in search]
        for o in cfg.get("options") or []:
            opts.append(o["name"] + (f":{o['value']}" if o.get("value") is not None else ""))
    if not servers and not search:
        return "# no upstream DNS in the devcluster\n"
    lines = [f"nameserver {x}" for x in servers[:3]]
    if search:
        lines.append("search " + " ".join(search))
    if opts:
        lines.append("options " + " ".join(opts))
    return "\n".join(lines) + "\n"


class Shared:
    """What every pod worker needs."""

    def __init__(self, api: Api, node_name: str, state_dir: str, allocatable: dict, logs: LogStore,
                 net: cni.Network | None = None, kubernetes_service: tuple[str, int] | None = None):
        self.api = api
        self.node_name = node_name
        self.state_dir = state_dir
        self.pods_dir = os.path.join(state_dir, "pods")
        self.allocatable = allocatable
        self.logs = logs
        self.ips = PodIPs(node_name)
        self.net = net
        self.host_ip = net.node_ip if net else HOST_IP
        self.gate = cni.PolicyGate(net.node_netns) if net and net.wait_for_netpol else None
        self.root_layout = sandbox.host_root_layout()
        self.runtime_bins: dict[str, str] = {}
        self.service_env = kubernetes_service_env(*kubernetes_service) if kubernetes_service else {}

    def runtime_bin(self, rt: images.Runtime) -> str:
        if rt.name not in self.runtime_bins:
            self.runtime_bins[rt.name] = images.ensure_bin_dir(self.state_dir, rt)
        return self.runtime_bins[rt.name]


class Container:
    def __init__(self, spec: dict, prior: dict | None):
        self.spec = spec
        self.name = spec["name"]
        self.runtime = images.resolve(spec.get("image", ""))
        self.view = S.ContainerView(name=self.name, image=spec.get("image", ""),
                                    image_id=self.runtime.image_id if self.runtime else "")
        if prior:  # agent restarted while the pod ran: continue its restart count
            self.view.restart_count = prior.get("restartCount", 0)
        self.proc: ContainerProcess | None = None
        self.argv: list[str] = []
        self.env: dict = {}
        self.task: asyncio.Task | None = None
        self.term_file: str | None = None    # host side of terminationMessagePath
        self.user = (0, 0)


class PodWorker:
    def __init__(self, shared: Shared, pod: dict, on_done):
        self.sh = shared
        self.pod = pod
        meta = pod["metadata"]
        self.uid = meta["uid"]
        self.ns = meta["namespace"]
        self.name = meta["name"]
        self.dir = os.path.join(shared.pods_dir, self.uid)
        self.wake = asyncio.Event()
        self.gone = False                   # the API object is deleted
        self.pod_ip: str | None = None
        self.netns_made = False
        self.start_time: float | None = None
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.sandbox_ready = False
        self.init_done = not pod["spec"].get("initContainers")
        self.cond_prev: dict = {}
        prior = {c["name"]: c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        self.containers = [Container(c, prior.get(c["name"])) for c in pod["spec"]["containers"]]
        iprior = {c["name"]: c for c in (pod.get("status") or {}).get("initContainerStatuses") or []}
        self.inits = [Container(c, iprior.get(c["name"])) for c in pod["spec"].get("initContainers") or []]
        self.stopping = False
        self.stop_ev = asyncio.Event()
        self.shutting_down = False
        self.tmpfs: list[str] = []
        self._want = 0
        self._written = 0
        self._wlock = asyncio.Lock()
        self._deleted_sent = False
        self._on_done = on_done
        all_names = [c.name for c in self.inits + self.containers]
        self.logs = shared.logs.register(self.ns, self.name, self.uid, os.path.join(self.dir, "logs"), all_names)
        self.task = asyncio.create_task(self._main(), name=f"pod {self.ns}/{self.name}")

    # ---- events -----------------------------------------------------------------------------
    def update(self, pod: dict) -> None:
        self.pod = pod
        self.wake.set()

    def deleted(self) -> None:
        self.gone = True
        self.wake.set()

    @property
    def deleting(self) -> bool:
        return bool(self.pod["metadata"].get("deletionTimestamp"))

    async def _sleep_or_wake(self, timeout: float | None) -> None:
        self.wake.clear()
        if timeout is not None and timeout <= 0:
            return
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def _deadline(self) -> float | None:
        ads = self.pod["spec"].get("activeDeadlineSeconds")
        if ads is None or self.start_time is None:
            return None
        return self.start_time + int(ads)

    def _deadline_passed(self) -> bool:
        d = self._deadline()
        return d is not None and time.time() >= d

    # ---- status -----------------------------------------------------------------------------
    def _build_status(self) -> dict:
        views = [c.view for c in self.containers]
        ivs = [c.view for c in self.inits]
        desired = S.desired_conditions(self.phase, views, self.sandbox_ready, self.init_done)
        self.cond_prev, conds = S.merge_conditions(self.cond_prev, desired, time.time(), views)
        return S.pod_status(phase=self.phase, conditions=conds, containers=views, init_containers=ivs,
                            host_ip=self.sh.host_ip, pod_ip=self.pod_ip, start_time=self.start_time,
                            reason=self.reason, message=self.message)

    async def write_status(self) -> None:
        self._want += 1
        mine = self._want
        async with self._wlock:
            if self._written >= mine or self.gone:
                return
            version = self._want
            delay = 0.5
            # Retried until the API takes it, as a kubelet's status manager does: a write lost
            # while the apiserver restarts would leave an ended pod Running forever.
            while not self.gone and not self.shutting_down:
                body = S.status_patch(self.uid, self._build_status())
                try:
                    await self.sh.api.patch(f"/api/v1/namespaces/{self.ns}/pods/{self.name}/status", body)
                    break
                except ApiError as e:
                    if e.status == 404:
                        self.gone = True
                        break
                    if e.status is not None and 400 <= e.status < 500 and e.status not in (409, 429):
                        log.warning("%s/%s: status write refused: %s", self.ns, self.name, e)
                        break
                    log.warning("%s/%s: status write failed (%s); retrying in %.1fs", self.ns, self.name, e, delay)
                except Exception as e:  # noqa: BLE001 - never let a status write kill the worker
                    log.warning("%s/%s: status write failed (%s); retrying in %.1fs", self.ns, self.name, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            self._written = version

    # ---- lifecycle --------------------------------------------------------------------------
    async def _main(self) -> None:
        try:
            await self._lifecycle()
        except asyncio.CancelledError:
            self.shutting_down = True
            raise
        except Exception:  # noqa: BLE001
            log.exception("%s/%s: pod worker crashed", self.ns, self.name)
        finally:
            if not self.shutting_down:
                await self._kill_all(0)
                await self._release_runtime()
                try:
                    await self._await_removal()
                finally:
                    await self._cleanup()
                    self._on_done(self)

    async def _lifecycle(self) -> None:
        pod = self.pod
        if _terminal(pod):
            return  # nothing to run (agent restart after the pod finished)
        prior_started = any(c.view.restart_count or c.name in {
            s["name"] for s in (pod.get("status") or {}).get("containerStatuses") or []
            if "running" in s.get("state", {}) or "terminated" in s.get("state", {})} for c in self.containers)
        st = pod.get("status") or {}
        self.start_time = time.time()
        if st.get("startTime"):
            from .logstore import parse_ts
            self.start_time = parse_ts(st["startTime"])
        if prior_started and pod["spec"].get("restartPolicy", "Always") == "Never":
            # we lost the processes (agent restart): a Never pod cannot be rerun
            for c in self.containers:
                c.view.state = S.terminated(137, None, time.time(), reason="ContainerStatusUnknown",
                                            message="The container could not be located when the pod was terminated")
            self.phase = "Failed"
            await self.write_status()
            return
        if self.deleting:
            await self._finish_deleted()
            return
        # images
        bad = [c for c in self.inits + self.containers if c.runtime is None]
        if bad:
            for c in self.inits + self.containers:
                c.view.state = (S.waiting("ErrImagePull", images.unsupported_message(c.view.image))
                                if c.runtime is None else S.waiting("PodInitializing" if self.inits else "ContainerCreating"))
            await self.write_status()
            while not (self.deleting or self.gone or self._deadline_passed()):
                d = self._deadline()
                await self._sleep_or_wake(None if d is None else d - time.time())
            await self._finish_stopped()
            return
        if self.pod["spec"].get("hostNetwork"):
            self.pod_ip = self.sh.host_ip
        elif self.sh.net is None:
            self.pod_ip = self.sh.ips.allocate()
        os.makedirs(self.dir, exist_ok=True)
        # network, then configuration (volumes, env), retried until it works
        delay, last_err = RETRY_MIN, None
        while True:
            if self.deleting or self.gone or self._deadline_passed():
                await self._finish_stopped()
                return
            err = await self._network() if self.pod_ip is None else None
            if err is None:
                err = await self._prepare()
            if err is None:
                break
            if err != last_err:
                last_err = err
                log.info("%s/%s: %s", self.ns, self.name, err)
                await self.write_status()
            await self._sleep_or_wake(delay)
            delay = min(delay * 2, RETRY_MAX)
        self.sandbox_ready = True
        if self.sh.gate is not None and not self.pod["spec"].get("hostNetwork"):
            if not await self._await_policy():
                await self._finish_stopped()
                return
        # init containers, in order; sidecars (restartPolicy: Always) start and keep running
        for c in self.inits:
            if c.spec.get("restartPolicy") == "Always":
                await self._spawn(c)
                c.task = asyncio.create_task(self._supervise(c, always=True))
                continue
            ok = await self._run_init(c)
            if not ok:
                return
        self.init_done = True
        # app containers
        for c in self.containers:
            await self._spawn(c)
        self.phase = "Running"
        for c in self.containers:
            c.task = asyncio.create_task(self._supervise(c))
        await self._sleep_or_wake(RUNNING_WRITE_DELAY)
        if not all(c.task.done() for c in self.containers):
            await self.write_status()
        while True:
            if self.gone:
                return
            if self.deleting:
                await self._finish_deleted()
                return
            if self._deadline_passed():
                await self._finish_deadline()
                return
            if all(c.task.done() for c in self.containers):
                await self._stop_sidecars()
                self.phase = S.pod_phase(self._policy(), [c.view for c in self.containers])
                await self.write_status()
                return
            d = self._deadline()
            await self._sleep_or_wake(None if d is None else max(0.0, d - time.time()))

    def _policy(self) -> str:
        return self.pod["spec"].get("restartPolicy", "Always")

    async def _network(self) -> str | None:
        """The pod's netns and address from the CNI plugins. Returns an error message or None."""
        try:
            self.pod_ip = await cni.setup(self.sh.net, self.uid)
            self.netns_made = True
            return None
        except (cni.CniError, OSError) as e:
            self.netns_made = True  # partial setups are undone too
            return self._config_error("ContainerCreating", f"failed to set up the pod network: {e}")

    async def _await_policy(self) -> bool:
        """Publish the pod IP, then wait until the policy engine has programmed the pod. False
        when the pod was deleted or hit its deadline first (its containers never ran)."""
        await self.write_status()
        told = False
        while not await self.sh.gate.wait(self.ns, self.name, self.pod_ip, POLICY_POLL):
            if self.deleting or self.gone or self._deadline_passed():
                return False
            if not told:
                told = True
                log.warning("%s/%s: the NetworkPolicy engine has not programmed %s yet; waiting",
                            self.ns, self.name, self.pod_ip)
                self._config_error("ContainerCreating", "waiting for the NetworkPolicy engine")
                await self.write_status()
        return True

    def _netns_path(self) -> str | None:
        if self.sh.net is None:
            return None
        if self.pod["spec"].get("hostNetwork"):
            return os.path.join(cni.NETNS_DIR, self.sh.net.node_netns)
        return os.path.join(cni.NETNS_DIR, self.sh.net.pod_netns(self.uid))

    async def _prepare(self) -> str | None:
        """Fetch references, build volumes, env and argv. Returns an error message or None."""
        pod = self.pod
        cms, secs = referenced_objects(pod)
        api = self.sh.api

        async def fetch(kind: str, name: str):
            try:
                return name, await api.get(f"/api/v1/namespaces/{self.ns}/{kind}/{name}")
            except ApiError as e:
                if e.status == 404:
                    return name, None
                raise
        try:
            got = await asyncio.gather(*[fetch("configmaps", n) for n in cms],
                                       *[fetch("secrets", n) for n in secs])
        except Exception as e:  # noqa: BLE001
            return self._config_error("ContainerCreating", f"fetching configuration: {e}")
        cm_objs = dict(got[:len(cms)])
        sec_objs = dict(got[len(cms):])
        try:
            vols = await volumes.prepare(api, pod, self.dir, configmaps=cm_objs, secrets=sec_objs,
                                         pod_ip=self.pod_ip, host_ip=self.sh.host_ip,
                                         allocatable=self.sh.allocatable, mounted=self.tmpfs)
        except (volumes.VolumeError, OSError) as e:
            return self._config_error("ContainerCreating", f"MountVolume.SetUp failed: {e}")
        etc = self._write_etc()
        for c in self.inits + self.containers:
            try:
                self._configure(c, vols, etc, cm_objs, sec_objs)
            except (ConfigError, volumes.VolumeError) as e:
                return self._config_error("CreateContainerConfigError", str(e), c)
        return None

    def _config_error(self, reason: str, message: str, only: Container | None = None) -> str:
        for c in self.inits + self.containers:
            if only is None or c is only:
                c.view.state = S.waiting(reason, message)
            elif "waiting" in c.view.state:
                c.view.state = S.waiting("ContainerCreating" if not self.inits else "PodInitializing")
        return f"{reason}: {message}"

    def _hostname(self) -> str:
        return (self.pod["spec"].get("hostname") or self.name)[:63]

    def _write_etc(self) -> dict:
        etc = os.path.join(self.dir, "etc")
        os.makedirs(etc, exist_ok=True)
        hn = self._hostname()
        sub = self.pod["spec"].get("subdomain")
        fq = f"{hn}.{sub}.{self.ns}.svc.cluster.local {hn}" if sub else hn
        files = {"hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                          f"{self.pod_ip}\t{fq}\n",
                 "hostname": hn + "\n", "resolv.conf": self._resolv_conf()}
        out = {}
        for n, text in files.items():
            p = os.path.join(etc, n)
            with open(p, "w") as f:
                f.write(text)
            os.chmod(p, 0o644)
            out["/etc/" + n] = p
        return out

    def _resolv_conf(self) -> str:
        return resolv_conf(self.pod, self.sh.net.cluster_dns if self.sh.net else None)

    def _configure(self, c: Container, vols: dict, etc: dict, cms: dict, secs: dict) -> None:
        spec, pspec = c.spec, self.pod["spec"]
        sc = spec.get("securityContext") or {}
        psc = pspec.get("securityContext") or {}
        uid = sc.get("runAsUser", psc.get("runAsUser", 0))
        gid = sc.get("runAsGroup", psc.get("runAsGroup", 0))
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) and uid == 0:
            raise ConfigError("container has runAsNonRoot and image will run as root")
        groups = list(psc.get("supplementalGroups") or [])
        if psc.get("fsGroup") is not None:
            groups.append(psc["fsGroup"])
        hn = self._hostname()
        base = {"PATH": images.DEFAULT_PATH, "HOSTNAME": hn, "HOME": "/root" if uid == 0 else "/",
                "LANG": "C.UTF-8", **self.sh.service_env}
        c.env = build_env(self.pod, spec, base=base, configmaps=cms, secrets=secs, pod_ip=self.pod_ip,
                          host_ip=self.sh.host_ip, allocatable=self.sh.allocatable)
        argv = build_command(spec, c.runtime.default_command, c.env, c.runtime.entrypoint)
        mounts = [sandbox.Mount(src, dest, True) for dest, src in c.runtime.binds.items()]
        mounts += volumes.container_mounts(spec, vols, self.pod, c.env)
        # One file per container, writable by its user, read after every exit (kubelet semantics).
        c.term_file, c.user = os.path.join(self.dir, "termination", c.name), (uid, gid)
        termination.prepare(c.term_file, uid, gid)
        mounts.append(sandbox.Mount(c.term_file, termination.path_of(spec), False))
        caps = sc.get("capabilities") or {}
        c.argv = sandbox.build_argv(sandbox.SandboxSpec(
            argv=argv, hostname=hn, runtime_bin=self.sh.runtime_bin(c.runtime), mounts=mounts,
            etc_files=etc, working_dir=spec.get("workingDir"), uid=uid, gid=gid,
            groups=tuple(dict.fromkeys(groups)),
            no_new_privs=sc.get("allowPrivilegeEscalation") is False,
            cap_add=tuple(caps.get("add") or ()), cap_drop=tuple(caps.get("drop") or ()),
            root_layout=self.sh.root_layout, host_network=bool(pspec.get("hostNetwork")),
            netns=self._netns_path()))

    async def _spawn(self, c: Container) -> None:
        c.view.container_id = "bwrap://" + hashlib.sha256(
            f"{self.uid}/{c.name}/{c.view.restart_count}/{time.time_ns()}".encode()).hexdigest()
        self.logs[c.name].start(c.view.restart_count)
        if c.term_file:
            termination.prepare(c.term_file, *c.user)   # a restart starts with an empty message
        c.proc = ContainerProcess(c.argv, c.env, self.logs[c.name])
        try:
            await c.proc.start()
        except OSError as e:
            now = time.time()
            c.view.state = S.terminated(128, now, now, c.view.container_id, reason="StartError",
                                        message=str(e))
            self.logs[c.name].close()
            c.proc = None
            return
        c.view.state = S.running(c.proc.started_at)

    async def _wait_exit(self, c: Container) -> int:
        if c.proc is None:
            return c.view.exit_code or 128
        code = await c.proc.wait()
        self.logs[c.name].close()
        text = termination.message(c.term_file, termination.policy_of(c.spec), code, self.logs[c.name].path())
        c.view.state = S.terminated(code, c.proc.started_at, c.proc.finished_at, c.view.container_id,
                                    message=text)
        return code

    def _should_restart(self, code: int) -> bool:
        p = self._policy()
        return p == "Always" or (p == "OnFailure" and code != 0)

    async def _stop_sidecars(self) -> None:
        """App containers are done: sidecars get SIGTERM (then SIGKILL after the grace period)."""
        side = [c for c in self.inits if c.task is not None]
        if not side:
            return
        self.stopping = True
        self.stop_ev.set()
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        await asyncio.gather(*[c.proc.stop(grace) for c in side if c.proc is not None], return_exceptions=True)
        await asyncio.wait([c.task for c in side], timeout=10)

    async def _supervise(self, c: Container, always: bool = False) -> None:
        """Wait for one container; restart it per restartPolicy with exponential backoff."""
        backoff = BACKOFF_MIN
        while True:
            code = await self._wait_exit(c)
            if self.stopping or not (always or self._should_restart(code)):
                self.wake.set()
                return
            lived = c.proc.finished_at - c.proc.started_at if c.proc else 0
            if lived > 2 * BACKOFF_MAX:
                backoff = BACKOFF_MIN
            # wait for the backoff (a deletion/deadline wakes the main loop, which stops us)
            try:
                await asyncio.wait_for(self.stop_ev.wait(), backoff)
            except asyncio.TimeoutError:
                pass
            backoff = min(backoff * 2, BACKOFF_MAX)
            if self.stopping:
                self.wake.set()
                return
            c.view.last_state = c.view.state
            c.view.restart_count += 1
            await self._spawn(c)
            await self.write_status()

    async def _run_init(self, c: Container) -> bool:
        backoff = BACKOFF_MIN
        self.phase = "Pending"
        while True:
            await self._spawn(c)
            await self.write_status()
            waiter = asyncio.create_task(self._wait_exit(c))
            while not waiter.done():
                if self.deleting or self.gone or self._deadline_passed():
                    await self._kill_all(self._grace())
                    await waiter
                    await (self._finish_deleted() if self.deleting or self.gone else self._finish_deadline())
                    return False
                d = self._deadline()
                self.wake.clear()
                woken = asyncio.ensure_future(self.wake.wait())
                await asyncio.wait([waiter, woken],
                                   timeout=None if d is None else max(0.0, d - time.time()),
                                   return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
            code = waiter.result()
            if code == 0:
                return True
            if self._policy() == "Never":
                self.phase = "Failed"
                self.init_done = False
                await self.write_status()
                return False
            await self._sleep_or_wake(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
            c.view.last_state = c.view.state
            c.view.restart_count += 1

    def _grace(self) -> float:
        g = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if g is None:
            g = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        return float(g)

    async def _kill_all(self, grace: float) -> None:
        self.stopping = True
        self.stop_ev.set()
        procs = [c.proc for c in self.inits + self.containers if c.proc is not None and c.proc.running]
        if procs:
            await asyncio.gather(*[p.stop(grace) for p in procs], return_exceptions=True)
        tasks = [c.task for c in self.inits + self.containers if c.task is not None and not c.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=10)

    def _not_started_to_terminated(self) -> None:
        now = time.time()
        for c in self.inits + self.containers:
            if "waiting" in c.view.state and c.proc is None:
                w = c.view.state["waiting"]
                if w.get("reason") in ("ErrImagePull", "CreateContainerConfigError"):
                    continue  # keep the reason visible; a waiting container may stay waiting
                c.view.state = S.terminated(137, None, now, reason="ContainerStatusUnknown",
                                            message="The container could not be located when the pod was terminated")
            elif "running" in c.view.state:
                c.view.state = S.terminated(137, c.proc.started_at if c.proc else None, now, c.view.container_id)

    async def _finish_stopped(self) -> None:
        if self.deleting or self.gone:
            await self._finish_deleted()
        else:
            await self._finish_deadline()

    async def _finish_deadline(self) -> None:
        await self._kill_all(float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
        self._not_started_to_terminated()
        self.phase = "Failed"
        self.reason = "DeadlineExceeded"
        ads = self.pod["spec"].get("activeDeadlineSeconds")
        self.message = f"Pod was active on the node longer than the specified deadline ({ads}s)"
        await self.write_status()

    async def _finish_deleted(self) -> None:
        await self._kill_all(self._grace())
        if not self.gone:
            self._not_started_to_terminated()
            views = [c.view for c in self.containers]
            if all(v.is_terminated for v in views):
                self.phase = S.pod_phase(self._policy(), views, terminal=True)
            else:
                self.phase = "Failed"
            await self.write_status()
            await self._send_delete()

    async def _send_delete(self) -> None:
        if self._deleted_sent or self.gone:
            return
        self._deleted_sent = True
        try:
            await self.sh.api.delete(f"/api/v1/namespaces/{self.ns}/pods/{self.name}",
                                     {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                      "preconditions": {"uid": self.uid}})
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("%s/%s: final delete failed: %s", self.ns, self.name, e)

    async def _await_removal(self) -> None:
        """After the pod ended: keep logs until the API object is gone; finish a deletion."""
        while not self.gone:
            if self.deleting and self.pod["metadata"].get("deletionGracePeriodSeconds", 0) != 0:
                await self._send_delete()
            await self._sleep_or_wake(None)

    async def _release_runtime(self) -> None:
        """Pod finished: give back its IP, netns and tmpfs mounts (logs stay until deletion)."""
        if self.sh.net is None:
            self.sh.ips.release(self.pod_ip)
        elif self.netns_made:
            self.netns_made = False
            await cni.teardown(self.sh.net, self.uid)
        for mp in reversed(self.tmpfs):
            volumes.unmount(mp)
        self.tmpfs.clear()

    async def _cleanup(self) -> None:
        self.sh.logs.unregister(self.ns, self.name, self.uid)
        volumes.unmount_all(self.dir)
        # directory removal is slow-ish on a busy disk: keep it off the event loop
        await asyncio.to_thread(shutil.rmtree, self.dir, True)

    async def shutdown(self) -> None:
        """Agent exit: kill the sandboxes, drop mounts; the pod's API state is left as is."""
        self.stopping = True
        self.shutting_down = True
        for c in self.inits + self.containers:
            if c.proc is not None:
                c.proc.kill()
        self.task.cancel()
        try:
            await self.task
        except BaseException:  # noqa: BLE001
            pass
        volumes.unmount_all(self.dir)


class PodManager:
    def __init__(self, shared: Shared):
        self.sh = shared
        self.workers: dict[str, PodWorker] = {}
        self.rv: str | None = None

    def _done(self, w: PodWorker) -> None:
        if self.workers.get(w.uid) is w:
            del self.workers[w.uid]

    def _handle(self, etype: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        w = self.workers.get(uid)
        if etype == "DELETED":
            if w is not None:
                w.update(pod)
                w.deleted()
            return
        if w is not None:
            w.update(pod)
        elif not _terminal(pod):
            self.workers[uid] = PodWorker(self.sh, pod, self._done)

    async def _list(self) -> None:
        items, cont = [], None
        path = "/api/v1/pods"
        while True:
            params = {"fieldSelector": f"spec.nodeName={self.sh.node_name}", "limit": "500"}
            if cont:
                params["continue"] = cont
            out = await self.sh.api.get(path, **params)
            items += out.get("items") or []
            cont = out["metadata"].get("continue")
            if not cont:
                self.rv = out["metadata"]["resourceVersion"]
                break
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["uid"])
            self._handle("ADDED", pod)
        for uid, w in list(self.workers.items()):
            if uid not in seen:
                w.deleted()

    async def run(self) -> None:
        os.makedirs(self.sh.pods_dir, exist_ok=True)
        self._clean_stale()
        if self.sh.net is not None:  # netns of pods a previous agent run lost
            for uid in cni.stale_pods(self.sh.net):
                await cni.teardown(self.sh.net, uid)
        while True:
            try:
                if self.rv is None:
                    await self._list()
                params = {"fieldSelector": f"spec.nodeName={self.sh.node_name}",
                          "resourceVersion": self.rv, "allowWatchBookmarks": "true",
                          "timeoutSeconds": "300"}
                async for ev in self.sh.api.watch("/api/v1/pods", params):
                    et, obj = ev.get("type"), ev.get("object") or {}
                    if et == "ERROR":
                        if obj.get("code") == 410:
                            self.rv = None
                        else:
                            log.warning("watch error: %s", obj.get("message"))
                            self.rv = None
                        break
                    self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                    if et in ("ADDED", "MODIFIED", "DELETED"):
                        self._handle(et, obj)
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.status == 410:
                    self.rv = None
                else:
                    log.warning("pod watch: %s", e)
                    await asyncio.sleep(1)
            except Exception as e:  # noqa: BLE001 - reconnect on anything
                log.warning("pod watch: %r", e)
                await asyncio.sleep(1)

    def _clean_stale(self) -> None:
        """Leftovers of a previous agent run: mounts and pod dirs (the pods are relisted)."""
        volumes.unmount_all(self.sh.pods_dir)
        for d in os.listdir(self.sh.pods_dir):
            shutil.rmtree(os.path.join(self.sh.pods_dir, d), ignore_errors=True)

    async def shutdown(self) -> None:
        await asyncio.gather(*[w.shutdown() for w in list(self.workers.values())], return_exceptions=True)
        volumes.unmount_all(self.sh.pods_dir)
