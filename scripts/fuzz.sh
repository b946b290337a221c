#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (fuzz_graph, fuzz_budget, fuzz_maxflow,
# fuzz_knapsack, fuzz_memory, fuzz_plan: every entry point of the C core) over the core (no Python) with
# -fsanitize=fuzzer,address,undefined and runs each for a bounded time,
# starting from the seed corpus in tests/fuzz_corpus/<target>/.  Fails on
# any crash, sanitizer report, failed check, leak, or timeout.
#
#   bash scripts/fuzz.sh [target ...]      (default: every fuzz/fuzz_*.c)
#
# FXCUT_FUZZ_TIME  seconds per target (default 60)
# FXCUT_FUZZ_OUT   where binaries, the grown corpus and crash artifacts go
#                  (default: a fresh temporary directory, kept on failure)
# clang is installed with apt-get when missing; without apt-get (or root)
# this fails loudly rather than skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TIME=${FXCUT_FUZZ_TIME:-60}
OUT=${FXCUT_FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/fxcut-fuzz.XXXXXX")}
mkdir -p "$OUT"

have_fuzzer() {
  command -v clang >/dev/null 2>&1 || return 1
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$OUT/probe.c"
  clang -fsanitize=fuzzer,address,undefined "$OUT/probe.c" -o "$OUT/probe" >/dev/null 2>&1
}

if ! have_fuzzer; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "fuzz.sh: FAILED: clang with -fsanitize=fuzzer is missing and apt-get is not available to install it" >&2
    exit 1
  fi
  echo "fuzz.sh: installing clang with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq clang >/dev/null
  if ! have_fuzzer; then
    # Newer Debian splits the sanitizer/fuzzer runtime out of clang.
    ver=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
    apt-get install -y -qq "libclang-rt-${ver}-dev" >/dev/null || true
  fi
  if ! have_fuzzer; then
    echo "fuzz.sh: FAILED: clang cannot build with -fsanitize=fuzzer after installing" >&2
    exit 1
  fi
fi
echo "fuzz.sh: $(clang --version | head -1); ${TIME}s per target; output in $OUT"

CORE=$(ls csrc/*.c | grep -v -e '/module\.c$' -e '/py_')
CFLAGS=(-std=c11 -g -O1 -fno-omit-frame-pointer -pthread
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion -Werror
        -Icsrc -Ifuzz)

if [ $# -gt 0 ]; then targets=("$@"); else
  targets=(); for f in fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi

export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=0
for t in "${targets[@]}"; do
  # shellcheck disable=SC2086
  clang "${CFLAGS[@]}" $CORE "fuzz/$t.c" -o "$OUT/$t"
  seeds="tests/fuzz_corpus/$t"
  if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
    echo "fuzz.sh: FAILED: no seed corpus in $seeds" >&2
    exit 1
  fi
  mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t"
  echo "fuzz.sh: running $t for ${TIME}s"
  set +e
  "$OUT/$t" -max_total_time="$TIME" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$t/" \
    "$OUT/corpus/$t" "$seeds" >"$OUT/$t.log" 2>&1
  rc=$?
  set -e
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)' "$OUT/$t.log" | sed "s/^/fuzz.sh: $t: /" || true
  if [ "$rc" -ne 0 ]; then
    echo "fuzz.sh: FAILED: $t exited $rc; log and reproducer in $OUT:" >&2
    tail -60 "$OUT/$t.log" >&2
    ls -l "$OUT/artifacts/$t" >&2
    failed=1
  fi
done
if [ "$failed" -ne 0 ]; then exit 1; fi
echo "fuzz.sh: ${#targets[@]} passed, 0 failed"
[ -n "${FXCUT_FUZZ_OUT:-}" ] || rm -rf "$OUT"
