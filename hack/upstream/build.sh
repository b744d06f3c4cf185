#!/usr/bin/env bash
# Builds the upstream test peers from their pinned Go modules into target/upstream/bin/:
#   upstream-ccm       k8s.io/cloud-provider's cloud-controller-manager with a fake cloud (cloud-provider/)
#   upstream-aws-ccm   k8s.io/cloud-provider-aws's aws-cloud-controller-manager, unmodified (aws/)
# The Go build cache makes a second build take seconds.
#
#   hack/upstream/build.sh        prints the path of upstream-ccm on its last line, upstream-aws-ccm's
#                                 on the line before
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/upstream/bin"

# shellcheck source=../lib/go-build.sh
. "$root/hack/lib/go-build.sh"
require_go upstream "the upstream CCM the differential suite and the benchmark compare against"

# module_version DIR MODULE: the release version of MODULE that DIR/go.mod requires; the binaries report it
# like release builds do.
module_version() {
  local version
  version="$(sed -n "s#^[[:space:]]*$2 \\(v[0-9.]*\\)\\( // indirect\\)\\{0,1\\}\$#\\1#p" "$1/go.mod")"
  if [ -z "$version" ]; then
    echo "upstream: $1/go.mod does not require $2 at a release version" >&2
    exit 1
  fi
  echo "$version"
}

aws_version="$(module_version "$here/aws" k8s.io/cloud-provider-aws)"
version="$(module_version "$here/cloud-provider" k8s.io/cloud-provider)"
go_build_versioned "$here/aws" "$aws_version" "$out/upstream-aws-ccm"
go_build_versioned "$here/cloud-provider" "$version" "$out/upstream-ccm"
echo "$out/upstream-aws-ccm"
echo "$out/upstream-ccm"
