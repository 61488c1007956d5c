#!/usr/bin/env bash
# Install the Debian 12 packages linkpass builds and tests with, when missing.
# Safe to run again: it installs nothing that is already there.
set -euo pipefail
packages=(
  build-essential cmake pkg-config          # toolchain
  libibverbs-dev rdma-core ibverbs-utils    # verbs headers, ibv_devinfo, ibv_rc_pingpong
  perftest                                  # ib_write_bw & co, run on the simulated fabric
  libnl-3-dev libnl-route-3-dev             # link state through netlink
  libcriterion-dev                          # unit tests
  iproute2 procps psmisc                    # ss, ip, pkill
  gnuplot-nox                               # bench/plots.sh draws docs/img/*.png
  rsyslog                                   # the syslog integration test starts its own rsyslogd
  autoconf automake libtool                 # tests/peers builds the reference IB plugin from ../shared/peers
  clang-format                              # tests/layers checks src/ and plugin/ against .clang-format
  prometheus-node-exporter prometheus       # tests/ops/scrape.sh: a real scrape, promtool check metrics
  curl jq                                   # the scrape over HTTP; JSON of linkpass-status and the dashboard
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
