// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package qemu runs a real QEMU the way virt-launcher does for the tests of
// issue 21: a q35 machine under TCG with no guest and stopped vCPUs (-S),
// one pcie-root-port per hotplug slot, and a QMP client that plugs disks
// in as libvirt does for a hotplugged KubeVirt volume (blockdev-add of a
// file or host_device node, device_add virtio-blk-pci), reads and writes
// through QEMU's own block layer (HMP qemu-io), resizes (block_resize),
// asks what QEMU sees (query-block) and unplugs (device_del, waiting for
// DEVICE_DELETED, then blockdev-del). It also live-migrates between two
// QEMUs (the target started with -incoming, its disks inactive until the
// handoff) and dumps guest memory into a file QEMU opens itself.
//
// Start can run QEMU as a launcher's would: in the launcher's mount
// namespace, as uid/gid 107, inside the compute container's cgroups, so
// every open is made with the launcher's view, credentials and device
// rules.
//
// It owns the QEMU process and its QMP connection. It refuses to judge
// (what a test expects is the test's), to fake QEMU, to boot a guest or
// to need KVM, and it knows nothing of hpmount, kubelet paths or the
// simulated node: callers pass paths, pids and cgroup directories.
package qemu
