#!/usr/bin/env bash
# Builds the daemon for Linux on amd64 or arm64, as the release images have it: a glibc binary (arm64 is
# cross-compiled with Debian's gcc-aarch64-linux-gnu; heap profiles need glibc, see
# pkg/app/src/serving/profiles.rs), with the providers given and jemalloc. Used by the Dockerfile (one
# build per --platform), by `make build-arm64` and, in the dev profile, by the arm64 smoke test of make test.
#
#   hack/build-release.sh ARCH FEATURES OUTPUT [PROFILE]
#     ARCH      amd64 or arm64
#     FEATURES  the providers, comma-separated (aws,digitalocean,fake)
#     OUTPUT    where the binary is copied
#     PROFILE   release (default) or dev
set -euo pipefail
arch=${1:?usage: $0 ARCH FEATURES OUTPUT [PROFILE]}
features=${2:?usage: $0 ARCH FEATURES OUTPUT [PROFILE]}
output=${3:?usage: $0 ARCH FEATURES OUTPUT [PROFILE]}
profile=${4:-release}
cd "$(dirname "$0")/.."

case "$arch" in
  amd64) target=x86_64-unknown-linux-gnu; cc=gcc ;;
  arm64) target=aarch64-unknown-linux-gnu; cc=aarch64-linux-gnu-gcc ;;
  *) echo "build-release: unknown architecture $arch (amd64 or arm64)" >&2; exit 2 ;;
esac
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-release: $cc is missing: install Debian's gcc-aarch64-linux-gnu and libc6-dev-arm64-cross" >&2
  exit 1
fi
if ! rustc --print target-libdir --target "$target" >/dev/null 2>&1 \
   || [ ! -d "$(rustc --print target-libdir --target "$target")" ]; then
  rustup target add "$target"
fi
cargo build --locked --profile "$profile" --target "$target" -p cloud-controller-manager \
  --no-default-features --features "jemalloc,$features"
dir=$profile
[ "$profile" = dev ] && dir=debug
mkdir -p "$(dirname "$output")"
cp "target/$target/$dir/cloud-controller-manager" "$output"
echo "$output"
