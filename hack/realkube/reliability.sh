#!/usr/bin/env bash
# The reliability scenarios (`ccm-bench --scenario reliability`, test/bench/src/reliability): the daemon on
# hack/realkube's real control plane while kube-apiserver and etcd restart, etcd compacts, and TCP fault
# proxies delay, reset, blackhole or cut the daemons' connections. Every case starts a control plane of its
# own, asserts its end state and prints its figures as a Markdown table.
#
#   hack/realkube/reliability.sh [ccm-bench flags]                  the debug builds `make test` made
#   PROFILE=release hack/realkube/reliability.sh [ccm-bench flags]  release builds (make reliability)
#
# e.g. --case leader-kill,leader-sigterm, --nodes 300 --services 60. CARGO and FEATURES come from the
# Makefile, so the debug binaries are the ones `make test` built.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo=${CARGO:-cargo}
features=${FEATURES:---all-features}
profile=${PROFILE:-debug}
target=${CARGO_TARGET_DIR:-$root/target}

realkube="$(hack/realkube/build.sh | tail -n 1)"
if [ "$profile" = release ]; then
  "$cargo" build --release --locked -p cloud-controller-manager -p ccm-bench
else
  # The same command as `make build`: nothing is rebuilt after it.
  # shellcheck disable=SC2086 # FEATURES is a list of flags
  "$cargo" build --workspace $features --all-targets --locked
fi
echo "--- reliability: the daemon on the real control plane under its faults ($profile builds)"
exec "$target/$profile/ccm-bench" --scenario reliability --realkube "$realkube" \
  --daemon "$target/$profile/cloud-controller-manager" "$@"
