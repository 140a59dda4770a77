# rolloutbatch: the README's promises. `make test` and `make demo` work on a fresh machine:
# every target installs what it needs (Python venv, Debian packages, the localkube binary).
SHELL := /bin/bash
.DEFAULT_GOAL := help

ROOT      := $(abspath .)
STATE     := $(ROOT)/.devcluster
VENV      := $(ROOT)/.venv
PY        := $(VENV)/bin/python
LOCALKUBE := $(STATE)/bin/localkube
CNI_BIN   := $(STATE)/bin/cni
CNI       := $(CNI_BIN)/bridge $(CNI_BIN)/host-local $(CNI_BIN)/loopback
HELM      := $(STATE)/bin/helm
KUEUE     := $(STATE)/bin/kueue/kueue
# Always the devcluster: `make demo`/`make bench` must never act on a user's own cluster.
export KUBECONFIG := $(STATE)/kubeconfig
export GOTOOLCHAIN := local
export CGO_ENABLED := 0
export PATH := $(VENV)/bin:$(STATE)/bin/links:$(PATH)

K8S_VERSION := v1.37.2
LDFLAGS := -s -w \
  -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
  -X k8s.io/component-base/version.gitTreeState=clean \
  -X k8s.io/client-go/pkg/version.gitVersion=$(K8S_VERSION) \
  -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# --- installation -----------------------------------------------------------------------------
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[operator,dev]'
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Python virtualenv with the package, its operator extra and the test tools

.PHONY: system-deps
system-deps: ## Debian packages the devcluster and tests use (iptables, ipset, lua5.1, prometheus)
	@missing=""; \
	command -v iptables >/dev/null || missing="$$missing iptables"; \
	command -v ipset >/dev/null || missing="$$missing ipset"; \
	command -v nsenter >/dev/null || missing="$$missing util-linux"; \
	command -v lua5.1 >/dev/null || missing="$$missing lua5.1"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# The binary depends on its sources only: an up-to-date binary means no go invocation at all.
# It holds kube-router's NetworkPolicy controller too (`localkube kube-router-netpol`, netpol.go),
# built against the same Kubernetes libraries as everything else in it.
LOCALKUBE_SRC := devcluster/localkube/go.mod devcluster/localkube/go.sum \
  devcluster/localkube/main.go devcluster/localkube/netpol.go
$(LOCALKUBE): $(LOCALKUBE_SRC)
	@mkdir -p $(dir $@)
	@hack/cached-build.sh $@ -- $^ -- 'cd devcluster/localkube && go build -trimpath -ldflags "$(LDFLAGS)" -o $@ .'
	@mkdir -p $(STATE)/bin/links && for c in kubectl; do ln -sf $@ $(STATE)/bin/links/$$c; done

.PHONY: localkube
localkube: $(LOCALKUBE) $(CNI) ## build the multi-call Kubernetes binary (kube-router's policy controller included) and CNI plugins (cached)

# Upstream's plugins, listed as `tool`s of their own module (devcluster/cni/go.mod).
$(CNI) &: devcluster/cni/go.mod devcluster/cni/go.sum
	@mkdir -p $(CNI_BIN)
	@hack/cached-build.sh $(CNI) -- $^ -- 'cd devcluster/cni && go build -trimpath -ldflags "-s -w" -o $(CNI_BIN)/ tool'

# Helm, upstream's command listed as a `tool` of its own module (devcluster/helm/go.mod), with the
# version upstream's Makefile stamps into it (`helm version`), read from that go.mod. The unit
# tests lint and render the chart with it (tests/unit/test_chart.py); the e2e tests install it.
HELM_VERSION = $(shell awk '$$1 == "helm.sh/helm/v4" {print $$2}' devcluster/helm/go.mod)
$(HELM): devcluster/helm/go.mod devcluster/helm/go.sum
	@mkdir -p $(dir $@)
	@hack/cached-build.sh $@ -- $^ -- 'cd devcluster/helm && go build -trimpath \
	  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)" -o $@ helm.sh/helm/v4/cmd/helm'
	@mkdir -p $(STATE)/bin/links && ln -sf $@ $(STATE)/bin/links/helm

.PHONY: helm
helm: $(HELM) ## build the helm command from its Go module (cached)

# Kueue's controller, a `tool` of its own module (devcluster/kueue/go.mod), with the CRDs and the
# webhook configurations of the same version copied out of that module beside it
# (devcluster/kueue.py serves them to the devcluster).
$(KUEUE): devcluster/kueue/go.mod devcluster/kueue/go.sum
	@mkdir -p $(dir $@)/crds
	@hack/cached-build.sh $@ -- $^ -- 'cd devcluster/kueue && go build -trimpath -ldflags "-s -w" -o $@ sigs.k8s.io/kueue/cmd/kueue'
	cd devcluster/kueue && src=$$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue) && \
	  install -m 0644 $$src/config/components/crd/bases/*.yaml $(dir $@)/crds/ && \
	  install -m 0644 $$src/config/components/webhook/manifests.yaml $(dir $@)/webhooks.yaml

.PHONY: kueue
kueue: $(KUEUE) ## build Kueue's controller from its Go module (cached)

# The real node's runtime, each from its upstream module (devcluster/<part>/go.mod lists them as
# `tool`s): containerd with its runc shim and ctr; runc (cgo + libseccomp: Debian's runc 1.1.5
# predates the 2024-2025 escape fixes); gVisor's runsc and our build of its containerd shim
# (devcluster/gvisor/shim: gVisor's shim with a start step this machine allows).
RUNTIME_BIN := $(STATE)/bin/runtime
CONTAINERD  := $(RUNTIME_BIN)/containerd $(RUNTIME_BIN)/containerd-shim-runc-v2 $(RUNTIME_BIN)/ctr
RUNC        := $(RUNTIME_BIN)/runc
GVISOR      := $(RUNTIME_BIN)/runsc $(RUNTIME_BIN)/containerd-shim-runsc-v1
GVISOR_SRC  := devcluster/gvisor/go.mod devcluster/gvisor/go.sum $(wildcard devcluster/gvisor/shim/*.go)

$(CONTAINERD) &: devcluster/containerd/go.mod devcluster/containerd/go.sum
	@mkdir -p $(RUNTIME_BIN)
	@hack/cached-build.sh $(CONTAINERD) -- $^ -- 'cd devcluster/containerd && go build -trimpath -ldflags "-s -w" -o $(RUNTIME_BIN)/ tool'

$(RUNC): devcluster/runc/go.mod devcluster/runc/go.sum
	@mkdir -p $(RUNTIME_BIN)
	@dpkg -s libseccomp-dev >/dev/null 2>&1 || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libseccomp-dev >/dev/null)
	@hack/cached-build.sh $@ -- $^ -- 'cd devcluster/runc && CGO_ENABLED=1 go build -trimpath -tags seccomp -ldflags "-s -w" -o $@ github.com/opencontainers/runc'

$(GVISOR) &: $(GVISOR_SRC)
	@mkdir -p $(RUNTIME_BIN)
	@hack/cached-build.sh $(GVISOR) -- $^ -- 'cd devcluster/gvisor && \
	  go build -trimpath -ldflags "-s -w" -o $(RUNTIME_BIN)/runsc gvisor.dev/gvisor/runsc && \
	  go build -trimpath -ldflags "-s -w" -o $(RUNTIME_BIN)/containerd-shim-runsc-v1 ./shim'

.PHONY: runtime
runtime: $(CONTAINERD) $(RUNC) $(GVISOR) ## build the real node's container runtime: containerd, runc, gVisor (cached)

# The real node's images, built here from Debian packages (devcluster/images.py): the Python
# stand-in under every name the examples and tests use, the pause image from the Kubernetes
# module's pause.c, and the operator's image from the Dockerfile (buildah). Cached by input hash.
.PHONY: image-deps
image-deps:
	@missing=""; \
	command -v mmdebstrap >/dev/null || missing="$$missing mmdebstrap"; \
	command -v buildah >/dev/null || missing="$$missing buildah"; \
	command -v gcc >/dev/null || missing="$$missing gcc libc6-dev"; \
	command -v strip >/dev/null || missing="$$missing binutils"; \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

.PHONY: images
images: venv image-deps ## build the real node's images into .devcluster/images (cached)
	@test -f "$$(go env GOMODCACHE)/k8s.io/kubernetes@$(K8S_VERSION)/build/pause/linux/pause.c" || \
	  (cd devcluster/localkube && go mod download k8s.io/kubernetes)
	$(PY) -m devcluster.images build

# A user's own image, into every real node's containerd, as `kind load image-archive` does.
.PHONY: load-image
load-image: venv ## load your own image archive into the real nodes: make load-image IMAGE=name:tag TAR=image.tar
	@test -n "$(IMAGE)" -a -n "$(TAR)" || { echo "usage: make load-image IMAGE=name:tag TAR=image.tar"; exit 2; }
	@for sock in $(STATE)/nodes/*/run/containerd/containerd.sock; do \
	  test -S "$$sock" || { echo "no node is up (make cluster)"; exit 1; }; \
	  $(PY) -m devcluster.images load-image --address $$sock $(IMAGE) $(TAR) || exit 1; done

# --- generated files ----------------------------------------------------------------------------
# Written from code and committed; unit tests fail when a committed copy drifts from its generator
# (tests/unit/test_crdgen.py, test_dashboard.py, test_examples.py).
.PHONY: generate
generate: venv ## regenerate the committed files: the CRD (crds/), the Grafana dashboard, the examples
	$(PY) -m rolloutbatch.crdgen
	$(PY) -m rolloutbatch.dashboard
	$(PY) examples/render.py

# --- the devcluster -----------------------------------------------------------------------------
# Real nodes: kubelet (localkube) + containerd, runc and gVisor, and the images built here
# (docs/real-node.md).
NODE_DEPS := runtime images $(KUEUE)

.PHONY: cluster
cluster: venv system-deps localkube $(NODE_DEPS) ## start the devcluster (no-op when it is up)
	$(PY) -m devcluster.cluster up

.PHONY: cluster-down
cluster-down: ## stop every devcluster process
	@if [ -x $(PY) ]; then $(PY) -m devcluster.cluster down; else echo "no devcluster"; fi

# --- tests ------------------------------------------------------------------------------------
.PHONY: test-unit
# The chart's tests run helm, and compare its output with `kubectl kustomize` (localkube).
test-unit: venv $(LOCALKUBE) $(HELM) ## tests that need no cluster
	$(PY) -m pytest -q tests/unit

.PHONY: test
test: venv system-deps localkube $(HELM) $(NODE_DEPS) ## every test, the devcluster included (started and stopped here)
	@bash hack/run-tests.sh

.PHONY: demo
demo: cluster ## the guide's task as a parallel and a serial batch, then with a model in the loop, summaries side by side
	$(PY) -m rolloutbatch.demo

# The operator, two ways. Locally: this checkout's code against the devcluster, in the
# foreground (Ctrl-C stops it). In the cluster: the real install path, a pod under its own
# ServiceAccount, from the image `make images` builds of this checkout's Dockerfile.
# Both at once is safe: they compete for one Lease, the second waits as a standby and says who
# leads (docs/design.md §5.15); `make demo` uses a leading operator instead of starting its own.
OPERATOR_ARGS ?=
.PHONY: operator
operator: cluster ## run the operator locally against the devcluster (OPERATOR_ARGS for flags)
	$(PY) -m rolloutbatch.cli.main operator $(OPERATOR_ARGS)

.PHONY: install
install: cluster ## kubectl apply -k manifests/default on the devcluster: the operator as a pod
	kubectl apply -k manifests/default
	kubectl rollout status deployment/rolloutbatch-operator -n rolloutbatch-system --timeout=180s

.PHONY: uninstall
uninstall: ## remove the operator Deployment, Service and PodDisruptionBudget of `make install` (CRD, batches, RBAC stay)
	kubectl delete deployment,service,poddisruptionbudget -n rolloutbatch-system -l app.kubernetes.io/name=rolloutbatch --ignore-not-found

.PHONY: uninstall-all
uninstall-all: ## kubectl delete -k manifests/default: the operator, its RBAC, the CRD and EVERY RolloutBatch
	kubectl delete -k manifests/default --ignore-not-found

# The bench wants room for 1,000+ pods at once: 4 nodes x 300 pods. It starts its own devcluster
# with that capacity when none is up (and takes it down at the end); an already running
# cluster is used as it is (its capacity is recorded in the results).
BENCH_NODES ?= 4
BENCH_NODE_PODS ?= 300
BENCH_ARGS ?=
.PHONY: bench
bench: venv system-deps localkube $(NODE_DEPS) ## the benchmark (its defaults fit real nodes); results land in bench/results/
	$(VENV)/bin/pip install -q -e '.[bench]'
	@if $(PY) -m devcluster.cluster status >/dev/null 2>&1; then own=0; else own=1; \
	  DEVCLUSTER_NODES=$(BENCH_NODES) DEVCLUSTER_NODE_PODS=$(BENCH_NODE_PODS) $(PY) -m devcluster.cluster up || exit 1; fi; \
	  PYTHONPATH=$(ROOT)/operator:$(ROOT) $(PY) bench/run.py $(BENCH_ARGS); rc=$$?; \
	  if [ $$own = 1 ]; then $(PY) -m devcluster.cluster down; fi; exit $$rc
