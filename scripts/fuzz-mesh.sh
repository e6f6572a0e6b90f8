#!/usr/bin/env bash
# Fuzzes mesh's request path (the HTTP/1.1 parser and deparser,
# mesh/src/http/, target mesh/fuzz/request_fuzz.cc) with clang's libFuzzer
# under AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/fuzz-mesh.sh [SECONDS]      (default 180)
#
# Installs clang-14 (and libFuzzer's runtime) when missing, builds
# build/fuzz-mesh/request_fuzz, runs it for SECONDS on a copy of
# mesh/fuzz/corpus with a dictionary of HTTP/1.1 tokens and exits non-zero on
# a crash, leak, failed invariant or sanitizer report, leaving the input in
# build/fuzz-mesh/crash-* (scripts/fuzz-lib.sh). Replay one with
# build/fuzz-mesh/request_fuzz build/fuzz-mesh/crash-...
# Environment: FUZZ_OUT (output dir), FUZZ_CXX (compiler), FUZZ_ARGS (extra
# libFuzzer flags).
set -euo pipefail
# shellcheck source=scripts/fuzz-lib.sh
source "$(dirname "$0")/fuzz-lib.sh"
fuzz_init mesh "${1:-180}"

fuzz_build request_fuzz -I mesh/src -I core/include mesh/fuzz/request_fuzz.cc mesh/src/http/*.cc

# The words that steer the parser: framing fields, codings, versions, line ends.
cat >"$out/http.dict" <<'DICT'
"\x0d\x0a"
"\x0d\x0a\x0d\x0a"
"\x0a"
"\x0d"
" HTTP/1.1\x0d\x0a"
" HTTP/1.0\x0d\x0a"
"HTTP/1.1"
"GET "
"POST "
"CONNECT "
"OPTIONS * "
"http://"
"Host: "
"Content-Length: "
"Transfer-Encoding: "
"chunked"
"gzip"
"Connection: "
"close"
"keep-alive"
"Upgrade"
"Expect: 100-continue"
"0\x0d\x0a\x0d\x0a"
";ext=\""
", "
": "
"\x09"
"18446744073709551616"
"ffffffffffffffff"
DICT
fuzz_run request_fuzz mesh/fuzz/corpus -max_len=2048 -dict="$out/http.dict"
