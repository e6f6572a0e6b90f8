#!/usr/bin/env bash
# Fuzzes measure's packet parser (measure/src/trace/parse.cc) with clang's
# libFuzzer under AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/fuzz-measure.sh [SECONDS]      (default 180)
#
# Installs clang-14 (and libFuzzer's runtime) when missing, builds
# build/fuzz-measure/parse_fuzz, runs it for SECONDS on a copy of
# measure/fuzz/corpus and exits non-zero on a crash, leak or sanitizer report,
# leaving the input in build/fuzz-measure/crash-* (scripts/fuzz-lib.sh).
# Environment: FUZZ_OUT (output dir), FUZZ_CXX (compiler), FUZZ_ARGS (extra
# libFuzzer flags).
set -euo pipefail
# shellcheck source=scripts/fuzz-lib.sh
source "$(dirname "$0")/fuzz-lib.sh"
fuzz_init measure "${1:-180}"

fuzz_build parse_fuzz -I measure/src -I core/include measure/fuzz/parse_fuzz.cc measure/src/trace/parse.cc
fuzz_run parse_fuzz measure/fuzz/corpus -max_len=512 -use_value_profile=1
