#!/bin/sh
# A domain VM: the other domain routed through the WAN router, the chosen
# kernel line, Causeway's prerequisites (its own `cargo xtask setup`), a build.
set -eu
export DEBIAN_FRONTEND=noninteractive
ip route replace "$CW_OTHER.0/24" via "$CW_GATEWAY"
apt-get update -qq
case "$CW_KERNEL" in
  6.1) ;;
  6.12) apt-get install -y -qq linux-image-6.12-amd64 ;;
  7.x)
    echo "deb http://deb.debian.org/debian trixie-backports main" > /etc/apt/sources.list.d/cw-backports.list
    apt-get update -qq
    apt-get install -y -qq -t trixie-backports linux-image-amd64 ;;
  *) echo "CW_KERNEL must be 6.1, 6.12 or 7.x" >&2; exit 1 ;;
esac
apt-get install -y -qq curl build-essential git
if ! command -v cargo >/dev/null; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --toolchain stable
  "$HOME/.cargo/bin/rustup" toolchain install nightly --component rust-src
fi
. "$HOME/.cargo/env"
cd /causeway
cargo xtask setup
cargo xtask build
echo "provisioned $(hostname): kernel $(uname -r) (reboot for a newly installed kernel)"
