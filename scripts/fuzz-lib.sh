# Shared by scripts/fuzz-*.sh (sourced, not run): builds a libFuzzer target
# with clang under AddressSanitizer and UndefinedBehaviorSanitizer and runs it
# on a copy of its seed corpus.
#
#   fuzz_init NAME SECONDS        checks SECONDS, sets $root and $out
#                                 (FUZZ_OUT or build/fuzz-NAME), finds or
#                                 installs clang-14 with libFuzzer ($cxx)
#   fuzz_build BINARY ARGS...     compiles ARGS (sources, -I flags) into $out/BINARY
#   fuzz_run BINARY CORPUS ARGS...  fuzzes for $secs seconds from a copy of
#                                 CORPUS (the seeds stay untouched; new inputs
#                                 go to $out/corpus), ARGS are libFuzzer flags;
#                                 exits non-zero on a crash, leak or sanitizer
#                                 report, leaving the input in $out/crash-*
# Environment: FUZZ_OUT (output dir), FUZZ_CXX (compiler), FUZZ_ARGS (extra
# libFuzzer flags). Debian keeps libFuzzer's runtime in libclang-rt-14-dev; on
# Ubuntu 22.04 it comes with clang-14 itself.

fuzz_init() {
  fuzz_name=$1
  secs=$2
  case "$secs" in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  root=$(pwd)
  out=${FUZZ_OUT:-$root/build/fuzz-$fuzz_name}
  mkdir -p "$out"

  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  apt_updated=0

  cxx=${FUZZ_CXX:-}
  if [ -z "$cxx" ]; then
    for c in clang++-14 clang++; do
      if command -v "$c" >/dev/null; then cxx=$c; break; fi
    done
  fi
  if [ -z "$cxx" ]; then
    fuzz_apt_install clang-14
    cxx=clang++-14
  fi

  # Does the compiler link a libFuzzer target?
  probe_dir=$(mktemp -d)
  trap 'rm -rf "$probe_dir"' EXIT
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$probe_dir/p.cc"
  if ! fuzz_links; then
    fuzz_apt_install libclang-rt-14-dev
    fuzz_links || { echo "fuzz-$fuzz_name: $cxx cannot link -fsanitize=fuzzer (libFuzzer runtime missing)" >&2; exit 1; }
  fi
}

fuzz_apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" -eq 0 ]; then "${sudo_cmd[@]}" apt-get update -qq; apt_updated=1; fi
  echo "fuzz-$fuzz_name: installing $*"
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

fuzz_links() { "$cxx" -fsanitize=fuzzer,address,undefined "$probe_dir/p.cc" -o "$probe_dir/p" >/dev/null 2>&1; }

fuzz_build() {
  local binary=$1
  shift
  echo "fuzz-$fuzz_name: building $out/$binary with $cxx"
  "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    "$@" -o "$out/$binary"
}

fuzz_run() {
  local binary=$1 corpus=$2
  shift 2
  rm -rf "$out/corpus"
  cp -r "$corpus" "$out/corpus"
  rm -f "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-*

  echo "fuzz-$fuzz_name: fuzzing for ${secs}s (log: $out/fuzz.log)"
  local rc
  set +e
  # shellcheck disable=SC2086
  "$out/$binary" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$out/" \
    "$@" ${FUZZ_ARGS:-} "$out/corpus" >"$out/fuzz.log" 2>&1
  rc=$?
  set -e

  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)' "$out/fuzz.log" || true
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$out/fuzz.log" || true
  echo "fuzz-$fuzz_name: corpus now $(find "$out/corpus" -type f | wc -l) inputs"
  if [ "$rc" -ne 0 ] || compgen -G "$out/crash-*" >/dev/null || compgen -G "$out/leak-*" >/dev/null; then
    echo "fuzz-$fuzz_name: FAILED (exit $rc); the end of the log:" >&2
    tail -40 "$out/fuzz.log" >&2
    ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null >&2 || true
    exit 1
  fi
  echo "fuzz-$fuzz_name: no crash"
}
