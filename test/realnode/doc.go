// Package realnode runs hpmount against a real node: the upstream kubelet,
// containerd and runc, the CNI plugins and a CSI node plugin, started by the
// test process inside its private mount namespace, with pods that really
// run (issue #12). Its runc tests drive runc directly, without kubelet or
// containerd, to check hpmount's device-cgroup rules against the rules runc
// really makes.
package realnode
