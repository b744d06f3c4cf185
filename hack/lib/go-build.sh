# Sourced by the build scripts of the Go test tooling (hack/realkube, hack/upstream): one way to check for Go
# and to build a Kubernetes-versioned binary from a pinned module.

# require_go NAME WHAT: exits with a message naming what Go is needed for when `go` is missing.
require_go() {
  if ! command -v go >/dev/null 2>&1; then
    echo "$1: 'go' is not installed; install Go 1.26 or newer (https://go.dev/doc/install, or the golang" >&2
    echo "$1: package of your distribution) to build $2" >&2
    exit 1
  fi
}

# go_build_versioned MODULE_DIR VERSION OUTPUT: builds the module in MODULE_DIR into OUTPUT, stripped, with
# the Kubernetes version VERSION (vX.Y.Z; a staging module's v0.Y.Z is reported as v1.Y.Z) stamped into
# component-base and client-go as release builds have it. Never fetches a toolchain: the installed Go
# builds, with modules from the module proxy (go.sum pins them).
go_build_versioned() {
  local dir="$1" version="$2" output="$3"
  local minor patch ldflags="-s -w"
  minor="$(echo "$version" | cut -d. -f2)"
  patch="${version##*.}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v1.$minor.$patch -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  mkdir -p "$(dirname "$output")"
  (
    cd "$dir"
    GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
      go build -trimpath -ldflags "$ldflags" -o "$output" .
  )
}
