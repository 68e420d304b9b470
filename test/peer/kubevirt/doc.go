// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package peer runs KubeVirt's own code against hpmount's (issue 20), at
// v1.7.0 (go.mod) and at v1.8.4 (go test -modfile=go.kv184.mod
// -tags=kubevirt184): the same files, but for kubevirt170_linux_test.go and
// kubevirt184_linux_test.go, which hold the calls whose signatures differ.
// The README's coexistence section lists what differs between the two.
//
//   - vmi_linux_test.go builds VMIs with kubevirt.io/api@v1.7.0's types and
//     decodes them with hpmount's kubevirt.DecodeVMI: every field the model
//     reads must be there, under its name, with KubeVirt's meaning.
//   - diff_linux_test.go mounts the same VMI's volumes once with KubeVirt's
//     hotplug mounter (pkg/virt-handler/hotplug-disk, with its real v1
//     cgroup manager and virt-chroot) and once with hpmount's node engine
//     (test/peer/hpmountside), each on a fresh simulated node, and fails on
//     any difference not in its list of measured ones.
//   - cgroupv2_diff_linux_test.go does the same on a cgroup v2 node: a
//     node nested in the first whose /sys/fs/cgroup is the cgroup2
//     hierarchy, where KubeVirt picks its v2 manager. runc's own device
//     program stands for the runtime's; the rule is compared by what a
//     process of the compute container's cgroup may open and mknod.
//     cgroupv2_coexist_linux_test.go shows KubeVirt's program replacing
//     the one that carries hpmount's rule there.
//   - known_linux_test.go reproduces kubevirt#16520, #16532 and #17882
//     with KubeVirt's code and runs hpmount in the same situation;
//     known17882_again_linux_test.go follows #17882 to a second migration
//     of the VMI to the same node with KubeVirt's mounter alone and the
//     kubelet's pod teardown: the baseline of handler_target_linux_test.go.
//   - handler_linux_test.go runs virt-handler's own VM controller
//     (pkg/virt-handler's VirtualMachineController, its informers fed by a
//     fake API server, its real mounter and per-sync cgroup managers, its
//     real status updates) beside hpmount. virt-launcher's choice of the
//     disks to attach and detach and virt-controller's volume status are
//     the test's own (libvirt needs cgo); each disk is opened and closed
//     by a real QEMU (test/qemu's blockdev-add and blockdev-del, as 107,
//     in the launcher's mount namespace and compute cgroup;
//     launcherqemu_linux_test.go). handler_unplug_linux_test.go runs
//     KubeVirt's unplug order with it, on cgroup v1 and v2;
//     handler_rules_linux_test.go measures, on v2, how long QEMU's
//     blockdev-add is refused a block volume whose rule virt-handler's
//     syncs drop, beside hpmount's rule watch (hpmountside op watch).
//     handler_target_linux_test.go runs virt-handler's migration-target
//     controller too, on a migration's target node (the source is on
//     another node, as in production): a failed migration to the node and
//     a second one that succeeds, with either mounter binding first;
//     handler_source_linux_test.go runs the VM controller on a source node
//     through a migration away and the cleanups of both.
//     handler_nodes_linux_test.go runs both nodes of a migration at once,
//     each with its own virt-handler (its VM, migration-source and
//     migration-target controllers) and hpmount, on one real
//     kube-apiserver (test/cluster) with KubeVirt's own VMI CRD: the
//     second node is the test binary again, nested in the first as a
//     node of its own and driven step by step over two pipes.
//   - migrated_linux_test.go measures what each does while a hotplugged
//     volume is volume-migrated (KubeVirt reads status.migratedVolumes,
//     hpmount does not), on the source node and on the target.
//
// The test binary runs as PID 1 of its own PID and mount namespaces,
// pivoted into a node root (node_linux_test.go), because KubeVirt's mounter
// reaches the node only through /proc/1/root, /proc/1/ns/mnt, /pods and
// /usr/bin. Pods are processes of the same binary in mount namespaces of
// their own, found by KubeVirt through the sockets they own (SO_PEERCRED).
//
// It is a Go module of its own so that KubeVirt's dependency pins (its go.mod
// replaces k8s.io/* by v0.33.5) never reach the product's go.mod; the root
// module's go list, go vet and go test do not see it. make peer-test runs
// it. A cold build (empty GOCACHE, modules downloaded, -p=1 on the shared
// 2-core machine) took 414 s; downloading the modules about 40 s more.
package peer
