// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command scale is the node-scale harness behind `make bench-node`: a real
// kube-apiserver and etcd, a simulated node with N VMIs × M hotplug volumes
// (a mix of filesystem and block) and thousands of unrelated mounts, and
// the hpmount binary as the agent. It measures what an operator of a busy
// node cares about (fresh attach of every volume, cold start, the latency
// of one attach on the loaded node, the repair of a foreign unmount, idle
// CPU, reconcile and mountinfo costs, one launcher read with statmount
// against the whole table, memory, diag, a storm of changes, what the
// agent receives for claims in a cluster of 20,000 claims beside an
// informer of every claim, the time from a VMI change to a real QEMU's
// open of the disk in its launcher, and a cluster of 20 agents, each on a
// node of its own, through a 60 s API outage: fleet_linux.go), checks that
// the node ends correct (every target mounted once,
// every block node right, no changing syscall on a restart), and writes
// BENCHMARKS.md.
//
// It runs as root, re-executed in a private mount namespace so that
// nothing it mounts reaches the machine.
package main
