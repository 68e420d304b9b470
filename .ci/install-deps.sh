#!/usr/bin/env bash
# Copyright The hpmount Authors.
# SPDX-License-Identifier: Apache-2.0

# Installs what the tests and the demo need and this machine lacks. Safe to
# run again: it only calls apt-get when a command is missing.
set -euo pipefail

need=()
check() { command -v "$1" >/dev/null 2>&1 || need+=("$2"); }
check mkfs.ext4 e2fsprogs
check resize2fs e2fsprogs
check mkfs.xfs xfsprogs
check xfs_growfs xfsprogs
check losetup mount
check findmnt util-linux
check unshare util-linux
check nsenter util-linux
check fsfreeze util-linux
check blkid util-linux
check sha256sum coreutils
check qemu-system-x86_64 qemu-system-x86
check qemu-img qemu-utils
# The real node (test/realnode): containerd, runc, the CNI plugins, a
# static busybox for its images, ip for its bridge.
check containerd containerd
check ctr containerd
check runc runc
check ip iproute2
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
# Shells whose completion scripts cmd/hpmount's tests parse (bash is there).
check zsh zsh
# A C compiler: test/harness TestCheckStatic builds a dynamically linked
# binary (cgo) to show the real-node harness refuses one.
check gcc gcc
# Static: it runs in images that have no libc (Debian's busybox package is
# dynamic). ldd exits 1 on a static binary, hence the || true.
busybox_ldd=$( { [ -x /bin/busybox ] && LC_ALL=C ldd /bin/busybox 2>&1; } || true)
[[ $busybox_ldd == *"not a dynamic executable"* ]] || need+=(busybox-static)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
fi

command -v go >/dev/null 2>&1 || { echo "go is not installed (expected at /usr/local/go/bin)"; exit 1; }
[ -e /dev/loop-control ] || { echo "/dev/loop-control is missing: loop devices are needed for the root tests"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "the tests need root (real mounts, loop devices, cgroups)"; exit 1; }
