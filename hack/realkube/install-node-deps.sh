#!/usr/bin/env bash
# Installs the Debian packages the real nodes of `realkube up --nodes N` need: containerd and runc (the
# container runtime), the CNI plugins (bridge, host-local, portmap), iptables and nftables (kube-proxy and
# the CNI plugins' rules), conntrack, busybox-static (the nodes' images are made from it), curl and iproute2
# (the tests' clients). Only what is missing is installed.
set -euo pipefail
packages=()
command -v containerd >/dev/null || packages+=(containerd)
command -v runc >/dev/null || packages+=(runc)
[ -x /usr/lib/cni/bridge ] || packages+=(containernetworking-plugins)
command -v iptables >/dev/null || packages+=(iptables)
command -v nft >/dev/null || packages+=(nftables)
command -v conntrack >/dev/null || packages+=(conntrack)
# The images need the static build: Debian's busybox package is dynamically linked.
dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q "install ok installed" || packages+=(busybox-static)
command -v curl >/dev/null || packages+=(curl)
command -v ip >/dev/null || packages+=(iproute2)
if [ "${#packages[@]}" -eq 0 ]; then
  exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
echo "real nodes: installing ${packages[*]}"
$sudo apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null
