#!/usr/bin/env bash
# Installs what dpukit needs and nothing twice: the Debian packages that are
# missing (apt-get update only when something is), then the project-local venv
# (rebuilt only when python/pyproject.toml changed). Quiet when all is present.
set -euo pipefail
cd "$(dirname "$0")/.."

# One package a line; '#' starts a comment.
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/apt-packages.txt)
missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python 3.11 for the front door, in .venv.
py=${DPUKIT_PYTHON:-}
if [ -z "$py" ]; then
  for c in python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))'; then py=$c; break; fi
  done
fi
[ -n "$py" ] || { echo "setup: Python >= 3.11 not found" >&2; exit 1; }
stamp=.venv/.dpukit-installed
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ] || [ python/pyproject.toml -nt "$stamp" ]; then
  echo "setup: preparing .venv"
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  log=.venv/pip-install.log
  if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e 'python[test]'; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: installing the Python front door failed (log above, kept in $log)" >&2
    exit 1
  fi
  touch "$stamp"
fi

# mesh: fortio, the load generator of the paper's §V, built from its Go module
# into .tools/bin (gitignored) unless that exact version is there.
fortio_version=1.68.2
fortio=.tools/bin/fortio
if [ ! -x "$fortio" ] || [ "$("$fortio" version 2>/dev/null)" != "$fortio_version" ]; then
  # fortio needs Go >= 1.22: the machine's Go in /usr/local/go first (Debian
  # bookworm's golang-go is 1.19, too old), else whatever go is on PATH.
  go=/usr/local/go/bin/go
  [ -x "$go" ] || go=$(command -v go || true)
  [ -n "$go" ] || { echo "setup: go (>= 1.22) not found, needed to build fortio" >&2; exit 1; }
  echo "setup: building fortio $fortio_version into .tools/bin"
  mkdir -p .tools/bin
  log=.tools/fortio-install.log
  if ! GOBIN="$PWD/.tools/bin" GOFLAGS=-mod=mod "$go" install "fortio.org/fortio@v$fortio_version" >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: go install fortio failed (log above, kept in $log)" >&2
    exit 1
  fi
fi
