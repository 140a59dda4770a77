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
"""
