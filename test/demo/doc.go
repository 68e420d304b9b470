// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command demo is `make demo`: a narrated walk-through of hpmount on a
// simulated node, and a smoke test of the built binary.
//
// It starts a real control plane (etcd + kube-apiserver, package
// test/cluster) and a simulated node (package test/simnode: a kubelet root
// with real ext4/xfs filesystems on loop devices, a virt-launcher process in
// a slave mount namespace and its own device cgroup), applies deploy/rbac.yaml
// and runs `hpmount agent` (the --binary) with that ServiceAccount's token
// against the node. Then it plays virt-controller and the kubelet through the
// steps: hotplug, a storage re-attach under a running QEMU (diag says
// stale-open and the agent warns), attachment-pod replacement, resize after
// replacement, unplug, an agent crash and VMI deletion. It also plays
// virt-launcher with a real QEMU (package test/qemu) in the launcher's mount
// namespace, as uid 107 in its device cgroup, which opens each hotplugged
// volume as libvirt does, and prints QEMU's query-block after each step: the
// VM's view. After each step it shows what the launcher sees, what QEMU
// sees, `hpmount diag`, a few metrics and the VMI's Events. The
// agent process, the VM model and the waits are test/harness's, shared with
// the end-to-end tests; this command narrates around them.
//
// Everything runs in a private mount namespace of its own; on exit (also on
// Ctrl-C) the agent is killed, the control plane stopped and the mounts, loop
// devices and cgroups removed. A step whose expectation fails ends the demo
// with a non-zero exit status, which fails TestDemo in make test. It needs
// Linux and root.
package main
