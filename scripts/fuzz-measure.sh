#!/usr/bin/env bash
# Fuzzes measure's packet parser (measure/src/trace/parse.cc) with clang's
# libFuzzer under AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/fuzz-measure.sh [SECONDS]      (default 180)
#
# Installs clang-14 (and libclang-rt-14-dev, where Debian keeps libFuzzer's
# runtime; on Ubuntu 22.04 it comes with clang-14 itself) when missing, builds
# build/fuzz-measure/parse_fuzz, runs it for SECONDS on a copy of
# measure/fuzz/corpus (the seeds stay untouched; new inputs that libFuzzer
# finds go to build/fuzz-measure/corpus) and exits non-zero on a crash, leak
# or sanitizer report, leaving the input in build/fuzz-measure/crash-*.
# Environment: FUZZ_OUT (output dir), FUZZ_CXX (compiler), FUZZ_ARGS (extra
# libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
secs=${1:-180}
case "$secs" in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
out=${FUZZ_OUT:-$root/build/fuzz-measure}
mkdir -p "$out"

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
apt_updated=0
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" -eq 0 ]; then "${sudo_cmd[@]}" apt-get update -qq; apt_updated=1; fi
  echo "fuzz-measure: installing $*"
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

cxx=${FUZZ_CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++-14 clang++; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
if [ -z "$cxx" ]; then
  apt_install clang-14
  cxx=clang++-14
fi

# Does the compiler link a libFuzzer target?
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$probe_dir/p.cc"
links() { "$cxx" -fsanitize=fuzzer,address,undefined "$probe_dir/p.cc" -o "$probe_dir/p" >/dev/null 2>&1; }
if ! links; then
  apt_install libclang-rt-14-dev
  links || { echo "fuzz-measure: $cxx cannot link -fsanitize=fuzzer (libFuzzer runtime missing)" >&2; exit 1; }
fi

echo "fuzz-measure: building $out/parse_fuzz with $cxx"
"$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I measure/src -I core/include \
  measure/fuzz/parse_fuzz.cc measure/src/trace/parse.cc \
  -o "$out/parse_fuzz"

rm -rf "$out/corpus"
cp -r measure/fuzz/corpus "$out/corpus"
rm -f "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-*

echo "fuzz-measure: fuzzing for ${secs}s (log: $out/fuzz.log)"
set +e
# shellcheck disable=SC2086
"$out/parse_fuzz" -max_total_time="$secs" -max_len=512 -use_value_profile=1 -print_final_stats=1 \
  -artifact_prefix="$out/" ${FUZZ_ARGS:-} "$out/corpus" >"$out/fuzz.log" 2>&1
rc=$?
set -e

grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)' "$out/fuzz.log" || true
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$out/fuzz.log" || true
echo "fuzz-measure: corpus now $(find "$out/corpus" -type f | wc -l) inputs"
if [ "$rc" -ne 0 ] || compgen -G "$out/crash-*" >/dev/null || compgen -G "$out/leak-*" >/dev/null; then
  echo "fuzz-measure: FAILED (exit $rc); the end of the log:" >&2
  tail -40 "$out/fuzz.log" >&2
  ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null >&2 || true
  exit 1
fi
echo "fuzz-measure: no crash"
