"""devcluster node agent: a kubelet-like Python process that runs pods as bubblewrap sandboxes.

Modules, one job each:
  kubeapi   - kubeconfig loading and an asyncio REST client (requests, list+watch)
  node      - Node registration, Lease renewal, status heartbeat
  pods      - pod watch, per-pod lifecycle workers, status writes, final deletion
  process   - one sandboxed container process: spawn, log capture, signals
  sandbox   - pure: the bwrap argv for one container
  volumes   - materialise configMap/secret/emptyDir/downwardAPI/projected/hostPath volumes
  envvars   - pure: container environment (fieldRef, keyRefs, envFrom, $(VAR) expansion)
  images    - the image -> local runtime table
  status    - pure: pod/container status dicts
  logstore  - per-container log files (CRI-like line format) and their reading
  logserver - HTTPS /containerLogs and /healthz
  quantity  - pure: Kubernetes resource quantities

Run: python -m devcluster.nodeagent --kubeconfig K --node-name devnode-0 --port P --state-dir D
     --tls-cert C --tls-key K [--cpu 32 --memory 64Gi --pods 250]   (the launcher does this)

Status writes per pod: one when the containers run (deferred 0.2 s, so a pod that is already
done by then gets only its terminal write) and one terminal write; restarts write once each.
Deletion: SIGTERM to each container's command, SIGKILL after deletionGracePeriodSeconds,
terminal status, then DELETE with gracePeriodSeconds 0 and a uid precondition.

Not implemented (kubelet features this node does not have): probes (a running container is
ready), resource limits/cgroups (memory/CPU are not enforced), images beyond the table in
images.py, exec/attach/port-forward, ConfigMap/Secret update propagation and token refresh in
volumes, persistentVolumeClaim/CSI volumes, service environment variables other than the
API's own (KUBERNETES_SERVICE_HOST/PORT, from --kubernetes-service). Networking: with --node-netns (the launcher always passes it) each pod
gets its own netns from the CNI plugins (cni.py) and a resolv.conf for the cluster DNS; without
it, each container gets a loopback-only netns. Restart backoff is
1 s doubling to 60 s (the kubelet's is 10 s to 5 min).
"""
