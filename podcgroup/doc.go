// Package podcgroup owns finding a pod's cgroups on the node: the pod-level
// cgroup the kubelet made for a pod UID (cgroupfs or systemd naming, below
// any --cgroup-root), every cgroup below it, where each pod's directory is
// remembered between searches, and which processes run in them.
//
// Walks are bounded in depth and size and never follow symlinks; a pod UID
// that is not letters, digits, '-' and '_' is refused before any path is
// built from it, and a pod with two cgroups is refused rather than guessed.
//
// It refuses device rules (blockdev's), mount namespaces (isolation's) and
// any knowledge of kubelet paths or KubeVirt.
package podcgroup
