# Task runner for the cloud-controller-manager workspace. `make help` lists the targets.
#
# Every target that compiles uses the same feature set (FEATURES) so one build serves
# the binary, the tests and clippy.

CARGO    ?= cargo
FEATURES ?= --all-features
MOTO     := .venv/bin/moto_server

.PHONY: help build build-arm64 test test-arm64 test-realkube test-reliability test-real-nodes real-nodes-deps test-upstream verify-manifests realkube upstream demo e2e e2e-kind bench bench-scale bench-lb-traffic reliability fuzz fmt fmt-check lint clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

build: ## Build every crate and binary.
	$(CARGO) build --workspace $(FEATURES) --all-targets --locked

build-arm64: ## The release daemon for arm64 Linux with every provider (target/arm64/release/cloud-controller-manager; needs gcc-aarch64-linux-gnu).
	hack/build-release.sh arm64 aws,digitalocean,fake target/arm64/release/cloud-controller-manager

test: fmt-check build lint $(MOTO) ## The full suite: formatting, clippy, unit, integration and end-to-end tests, then the arm64 build, the real-Kubernetes suites, the manifests and the upstream suites.
	@# The kubectl tests run the kubectl on PATH, else the one hack/realkube builds beside the control plane.
	hack/realkube/build.sh >/dev/null
	$(CARGO) test --workspace $(FEATURES) --locked --no-fail-fast
	$(MAKE) --no-print-directory test-arm64
	$(MAKE) --no-print-directory test-realkube
	$(MAKE) --no-print-directory test-reliability
	$(MAKE) --no-print-directory test-real-nodes
	$(MAKE) --no-print-directory verify-manifests
	$(MAKE) --no-print-directory test-upstream

test-arm64: ## The arm64 daemon (dev build) under qemu: --version, a node initialized, a clean stop (needs gcc-aarch64-linux-gnu, qemu-user).
	hack/arm64-smoke.sh

test-realkube: ## The conformance and end-to-end suites against a real kube-apiserver (hack/realkube; needs Go).
	CARGO="$(CARGO)" FEATURES="$(FEATURES)" hack/realkube/test.sh

test-reliability: ## The reliability scenarios on the real control plane with the debug daemon: kube-apiserver and etcd restarted, etcd compacted, leader failover under partitions, a slow API server (about 7 minutes).
	CARGO="$(CARGO)" FEATURES="$(FEATURES)" hack/realkube/reliability.sh

test-real-nodes: ## The end-to-end suite on three real kubelets with containerd and kube-proxy beside the real control plane (needs root and `make real-nodes-deps`; the host is restored and checked afterwards).
	CARGO="$(CARGO)" FEATURES="$(FEATURES)" hack/realkube/test-nodes.sh

real-nodes-deps: ## Install the Debian packages real nodes need (containerd, runc, CNI plugins, iptables, nftables, conntrack, busybox-static, curl).
	hack/realkube/install-node-deps.sh

test-upstream: ## The differential suite: the same scenarios with upstream's CCM (hack/upstream) and ours on a real kube-apiserver.
	CARGO="$(CARGO)" FEATURES="$(FEATURES)" hack/upstream/test.sh

# In make test it runs after test-realkube: without a kubectl on PATH the script uses the one hack/realkube
# builds, and it dry-runs every overlay on a control plane of its own when that is built.
verify-manifests: ## Render every kustomize overlay and the Helm chart of deploy/ and check them: parsing, kinds per mode, flags, RBAC equal to deploy/base/rbac.yaml, the chart against cloud-provider-aws's, helm install and upgrade.
	hack/verify-manifests.sh

upstream: ## Build the upstream test peers (k8s.io/cloud-provider's CCM with a fake cloud, cloud-provider-aws's CCM) from Go modules.
	hack/upstream/build.sh

realkube: ## Build the real control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) from Go modules.
	hack/realkube/build.sh

demo: ## Run the whole CCM on an embedded API server and the fake cloud, narrated (REAL=1: on a real kube-apiserver; REAL=1 NODES=2: with real kubelets, ending with a request through a load balancer; KEEP=1: keep the cluster running for kubectl).
	$(CARGO) build --locked -p cloud-controller-manager -p ccm-demo
ifeq ($(REAL),1)
	CARGO="$(CARGO)" NODES="$(NODES)" hack/realkube/demo.sh
else
	$(CARGO) run --locked -p ccm-demo --
endif

e2e: ## The end-to-end suite against an embedded API server, the CCM running as a separate process.
	$(CARGO) build --locked $(FEATURES) -p cloud-controller-manager
	$(CARGO) test --locked $(FEATURES) -p ccm-e2e -- --nocapture

e2e-kind: ## The end-to-end suite against a kind cluster (needs docker and kind).
	hack/e2e-kind.sh

bench: ## Whole-process benchmarks of the release daemon, side by side with upstream's CCM (figures: test/bench/README.md).
	$(CARGO) build --release --locked -p cloud-controller-manager -p ccm-bench
	hack/upstream/build.sh
	$(CARGO) run --release --locked -p ccm-bench -- --upstream target/upstream/bin/upstream-ccm

reliability: ## The reliability scenarios with the release daemon, their figures as a Markdown table (test/bench/README.md has the last ones).
	CARGO="$(CARGO)" PROFILE=release hack/realkube/reliability.sh

bench-scale: ## The scale benchmarks: 100,000 nodes (e, e-start, e-pass) and 10,000 load balancers (f); about 12 minutes.
	$(CARGO) build --release --locked -p cloud-controller-manager -p ccm-bench
	$(CARGO) run --release --locked -p ccm-bench -- --scenario scale

bench-lb-traffic: ## The fake load balancers' data path: connections per second and throughput through one, against the node port directly.
	$(CARGO) build --release --locked -p cloud-controller-manager -p ccm-bench
	$(CARGO) run --release --locked -p ccm-bench -- --scenario lb-traffic

# make test replays every committed corpus through its target (test/fuzz/tests/corpus.rs), without libFuzzer.
fuzz: ## Fuzz every parser that reads outside input, FUZZ_SECONDS (600) per target (cargo-fuzz; test/fuzz/README.md).
	hack/fuzz.sh

fmt: ## Format the code.
	$(CARGO) fmt --all

# The lint steps never fail for want of a tool: without rustfmt or clippy they say so loudly and
# the tests still run.
fmt-check:
	@if $(CARGO) fmt --version >/dev/null 2>&1; then $(CARGO) fmt --all -- --check; \
	else echo "!!! rustfmt is not installed: formatting was NOT checked (rustup component add rustfmt)" >&2; fi

lint: ## Clippy with warnings as errors; no import cycle between the modules of a crate.
	@if $(CARGO) clippy --version >/dev/null 2>&1; then \
		$(CARGO) clippy --workspace $(FEATURES) --all-targets --locked -- -D warnings; \
	else echo "!!! clippy is not installed: lints were NOT checked (rustup component add clippy)" >&2; fi
	python3 hack/module-cycles.py

$(MOTO): ## The AWS API emulator used by the AWS provider tests, in a local virtualenv.
	python3 -m venv .venv
	.venv/bin/pip install --quiet --disable-pip-version-check 'moto[server]'

clean:
	$(CARGO) clean
