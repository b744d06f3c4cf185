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

if ! command -v go >/dev/null 2>&1; then
  echo "upstream: 'go' is not installed; install Go 1.25 or newer to build the upstream CCM the differential suite compares against" >&2
  exit 1
fi

# The version comes from go.mod; the binary reports it like a release build does.
version="$(sed -n 's#^[[:space:]]*k8s.io/cloud-provider \(v[0-9.]*\)$#\1#p' "$here/cloud-provider/go.mod")"
if [ -z "$version" ]; then
  echo "upstream: $here/cloud-provider/go.mod does not require k8s.io/cloud-provider at a release version" >&2
  exit 1
fi
minor="$(echo "$version" | cut -d. -f2)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v1.$minor.${version##*.} -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

mkdir -p "$out"
(
  cd "$here/cloud-provider"
  # Never fetch a toolchain: build with the installed Go, modules from the module proxy (go.sum pins them).
  GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/upstream-ccm" .
)
echo "$out/upstream-ccm"
