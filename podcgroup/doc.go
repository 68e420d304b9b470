// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package podcgroup owns finding a pod's cgroups on the node: the pod-level
// cgroup the kubelet made for a pod UID (cgroupfs or systemd naming, below
// any --cgroup-root), every cgroup below it, the cgroup of one container of
// the pod by the container ID of the pod status (each runtime's and cgroup
// driver's naming, ContainerDirNames), where each pod's directory is
// remembered between searches (and, for a reader that looks once, each
// pod's whole answer and its processes: Settle), and which processes run
// in them.
//
// Walks are bounded in depth and size and never follow symlinks; a pod UID
// that is not letters, digits, '-' and '_' (a container ID that is not
// letters and digits) is refused before any path is built from it, and a
// pod or container with two cgroups is refused rather than guessed.
//
// It refuses device rules (blockdev's), mount namespaces (isolation's) and
// any knowledge of kubelet paths or KubeVirt.
package podcgroup
