"""devcluster: a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler from the `localkube` multi-call binary) and real nodes (kubelet, containerd, runc,
gVisor), on one machine and without Docker. `python -m devcluster.cluster up|down|status` drives it; see docs/design.md §9.
"""
