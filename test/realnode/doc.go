// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package realnode runs hpmount against a real node: the upstream kubelet,
// containerd and runc, the CNI plugins and a CSI node plugin, started by the
// test process inside its private mount namespace, with pods that really
// run (issue #12). Its runc tests drive runc directly, without kubelet or
// containerd, to check hpmount's device-cgroup rules against the rules runc
// really makes.
//
// It owns: starting a node against a test/cluster control plane (Start:
// containerd with its own config, root, state and socket; a static pause
// and busybox-static packed as single-layer OCI tars by WriteOCI and
// imported with ctr; a bridge + host-local CNI whose bridge carries the node
// IP; the kubelet with an rshared --root-dir, its own cgroupRoot and a
// system:nodes token; the test CSI plugin registered through
// plugins_registry), Exec through the API server as kubectl exec does, the
// CSI call log (Node.Calls), and a teardown (Node.Stop) that leaves nothing
// behind, checked by StopChecked against a Snapshot of HostPaths, links,
// cgroups, loop devices and the processes it started (marked through their
// environment, ownerEnv). A Stack's start first clears what an earlier one
// of the same node left when its harness died without a teardown. A Stack is the control plane (with the
// ServiceAccount admission plugin, and a NamespacePublisher standing in for
// the two kube-controller-manager controllers it needs) plus one node: what
// the tests share, and what cmd/realnode (make node-up, make node-down)
// holds in a background process for a person. The agent runs either as the
// built binary on the host with the DaemonSet's flags, or as
// deployed (DeployAgent): its binary packed as the DaemonSet's image, the
// render of deploy/ applied, and a pod made from the DaemonSet's template
// with AgentOverrides, the complete list of what this node changes.
//
// It refuses to be a cluster: no controller-manager or scheduler run, so
// pods name their node, PVs and claims are created bound with their status
// written by the test, and a DaemonSet never becomes pods by itself.
package realnode
