#!/usr/bin/env bash
# Builds hack/realkube (etcd, kube-apiserver, kube-controller-manager and kubectl in one test binary) from the
# Kubernetes modules pinned in go.mod, into target/realkube/bin/, with a `kubectl` link beside it, and the test
# pods' echo server (hack/realkube/echo) as realkube-echo, which realkube puts into the nodes' images.
# The Go build cache makes a second build take seconds.
#
#   hack/realkube/build.sh        prints the path of the binary on its last line
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/realkube/bin"

# shellcheck source=../lib/go-build.sh
. "$root/hack/lib/go-build.sh"
require_go realkube "the real Kubernetes control plane the tests run against"

# The Kubernetes version comes from go.mod; the components report it like release builds do.
version="$(sed -n 's#^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\)$#\1#p' "$here/go.mod")"
if [ -z "$version" ]; then
  echo "realkube: $here/go.mod does not require k8s.io/kubernetes at a release version" >&2
  exit 1
fi
go_build_versioned "$here" "$version" "$out/realkube"
# The echo server links no Kubernetes package: the version stamp passes it by.
go_build_versioned "$here/echo" "$version" "$out/realkube-echo"
ln -sf realkube "$out/kubectl"
echo "$out/realkube"
