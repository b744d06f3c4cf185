#!/usr/bin/env bash
# Runs the fuzz targets of test/fuzz with cargo-fuzz (libFuzzer), each for FUZZ_SECONDS (default 600),
# one after the other; new inputs land in test/fuzz/corpus/<target>, crashes in
# test/fuzz/fuzz/artifacts/<target> (and the script fails). With FUZZ_CMIN=1 each corpus is minimized
# afterwards (cargo fuzz cmin: the smallest set of inputs with the same coverage), as committed.
#
#   hack/fuzz.sh [target...]        (make fuzz; FUZZ_SECONDS=60 make fuzz for a short run)
#
# Installs cargo-fuzz when it is missing. On a stable toolchain RUSTC_BOOTSTRAP=1 lets rustc take the
# instrumentation flags cargo-fuzz passes. No sanitizer: the parsers are safe Rust (no `unsafe`), so
# AddressSanitizer would halve the executions and find nothing libFuzzer's own checks miss; overflow checks
# and debug assertions are on (cargo-fuzz's default), so an arithmetic overflow is a crash.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/test/fuzz"

seconds="${FUZZ_SECONDS:-600}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^ccm-fuzz-targets$')
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi
if ! rustc --version | grep -q nightly; then
    export RUSTC_BOOTSTRAP=1
fi

for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "fuzz: $target for ${seconds}s" >&2
    cargo fuzz run --fuzz-dir fuzz --sanitizer none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1
    if [ "${FUZZ_CMIN:-0}" = 1 ]; then
        cargo fuzz cmin --fuzz-dir fuzz --sanitizer none "$target" "corpus/$target" -- -max_len=4096
    fi
done
