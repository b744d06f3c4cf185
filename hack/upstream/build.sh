#!/usr/bin/env bash
# Builds the upstream test peers from their pinned Go modules into target/upstream/bin/:
#   upstream-ccm   k8s.io/cloud-provider's cloud-controller-manager with a fake cloud (cloud-provider/)
# The Go build cache makes a second build take seconds.
#
#   hack/upstream/build.sh        prints the path of the binary on its last line
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/upstream/bin"

# shellcheck source=../lib/go-build.sh
. "$root/hack/lib/go-build.sh"
require_go upstream "the upstream CCM the differential suite and the benchmark compare against"

# The version comes from go.mod; the binary reports it like a release build does.
version="$(sed -n 's#^[[:space:]]*k8s.io/cloud-provider \(v[0-9.]*\)$#\1#p' "$here/cloud-provider/go.mod")"
if [ -z "$version" ]; then
  echo "upstream: $here/cloud-provider/go.mod does not require k8s.io/cloud-provider at a release version" >&2
  exit 1
fi
go_build_versioned "$here/cloud-provider" "$version" "$out/upstream-ccm"
echo "$out/upstream-ccm"
