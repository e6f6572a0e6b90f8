#!/usr/bin/env bash
# Installs what dpukit needs and nothing twice: the Debian packages that are
# missing (apt-get update only when something is), then the project-local venv
# (rebuilt only when python/pyproject.toml changed), then fortio and h2spec into
# .tools/bin. Quiet when all is present.
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

# Go for the tools built from their modules below: the machine's Go in
# /usr/local/go first (Debian bookworm's golang-go is 1.19, too old for fortio,
# which needs >= 1.22), else whatever go is on PATH.
go_bin() {
  local go=/usr/local/go/bin/go
  [ -x "$go" ] || go=$(command -v go || true)
  [ -n "$go" ] || { echo "setup: go (>= 1.22) not found, needed to build $1" >&2; exit 1; }
  echo "$go"
}

# `go install MODULE@VERSION` into .tools/bin (gitignored), the log kept in .tools/NAME-install.log.
go_install() {
  local name=$1 module=$2 go
  go=$(go_bin "$name")
  echo "setup: building $name ${module#*@} into .tools/bin"
  mkdir -p .tools/bin
  local log=.tools/$name-install.log
  if ! GOBIN="$PWD/.tools/bin" GOFLAGS=-mod=mod "$go" install "$module" >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: go install $name failed (log above, kept in $log)" >&2
    exit 1
  fi
}

# mesh: fortio, the load generator of the paper's §V, unless that exact version is there.
fortio_version=1.68.2
fortio=.tools/bin/fortio
if [ ! -x "$fortio" ] || [ "$("$fortio" version 2>/dev/null)" != "$fortio_version" ]; then
  go_install fortio "fortio.org/fortio@v$fortio_version"
fi

# mesh: h2spec, the HTTP/2 conformance suite (python/tests/test_mesh_h2spec.py).
# v2.2.1+incompatible is what `@latest` resolves to on the module proxy (its
# later tags carry no go.mod the proxy serves); the binary names no version of
# its own, so a stamp beside it records which one was built.
h2spec_version=v2.2.1+incompatible
h2spec=.tools/bin/h2spec
if [ ! -x "$h2spec" ] || [ "$(cat .tools/h2spec.version 2>/dev/null)" != "$h2spec_version" ]; then
  go_install h2spec "github.com/summerwind/h2spec/cmd/h2spec@$h2spec_version"
  echo "$h2spec_version" >.tools/h2spec.version
fi

# mesh: dpukit-xds-server, the xDS control plane of the mesh tests and of
# mesh.xds (go-control-plane's snapshot cache; mesh/tests/xds-server, its own
# Go module with pinned versions), rebuilt when its sources or go.sum change
# (a stamp beside it records their hash).
xds_server_src=mesh/tests/xds-server
xds_server=.tools/bin/dpukit-xds-server
xds_server_hash=$(cat "$xds_server_src"/go.mod "$xds_server_src"/go.sum "$xds_server_src"/*.go | sha256sum | cut -d' ' -f1)
if [ ! -x "$xds_server" ] || [ "$(cat .tools/dpukit-xds-server.hash 2>/dev/null)" != "$xds_server_hash" ]; then
  go=$(go_bin dpukit-xds-server)
  echo "setup: building dpukit-xds-server into .tools/bin"
  mkdir -p .tools/bin
  log=.tools/dpukit-xds-server-build.log
  if ! (cd "$xds_server_src" && "$go" build -buildvcs=false -trimpath -o "$OLDPWD/$xds_server" .) >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: building dpukit-xds-server failed (log above, kept in $log)" >&2
    exit 1
  fi
  echo "$xds_server_hash" >.tools/dpukit-xds-server.hash
fi
