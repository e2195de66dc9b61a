#!/bin/sh
# Installs what building and testing muster needs on Debian 12, when it is missing.
# Idempotent and quiet when everything is there. Needs root (or sudo) only to install.
set -eu

PKGS="build-essential cmake pkg-config libuv1-dev libmbedtls-dev libcmocka-dev libjansson-dev
libxxhash-dev libssl-dev python3-torch iproute2 iptables procps clang clang-format libclang-rt-14-dev
dpkg-dev file lintian slurmctld slurmd slurm-client munge chromium chromium-driver python3-selenium"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "bootstrap: installing$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing >/dev/null
