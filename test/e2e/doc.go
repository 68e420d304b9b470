// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package e2e runs the agent binary end to end: a real kube-apiserver and
// etcd (test/cluster), the agent's ClusterRole from deploy/ bound to a
// ServiceAccount token, and a simulated node (test/simnode) with real ext4
// and xfs filesystems and block devices on loop devices, launcher processes
// in slave mount namespaces and real device cgroups. The test plays
// virt-controller and the kubelet; the agent is the process under test.
// The agent process, the VM model and the waits are test/harness's; this
// package wraps them so that a failure fails the running step.
package e2e
