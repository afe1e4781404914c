#!/usr/bin/env bash
# Installs everything weft needs on Debian 12, as root, from Debian's own packages. Idempotent:
# packages already present are left as they are, and apt is not asked again when all are there.
set -euo pipefail
packages=(
  g++ cmake ninja-build make pkg-config git ca-certificates clang-format lld
  libopenmpi-dev openmpi-bin
  libdnnl-dev
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libfmt-dev
  libxxhash-dev liburing-dev
  libcpp-httplib-dev
  curl jq
  libgtest-dev libgmock-dev libbenchmark-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
