// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package blockdev owns block-mode hotplug volumes on the node: the
// major:minor of the device the CSI driver published for the attachment pod
// (found where kubelet.OpenPublishedDevice says, checked to be a block
// device here), mknod, verification and unlink of the device node in the launcher's
// hotplug-disks directory, the size of a block device (DeviceSize, from
// sysfs, for growth and diag too), and the device-cgroup rules
// that let the launcher's compute container (QEMU's, and no other
// container of the pod) open the device (cgroup v1 devices controller and
// cgroup v2 BPF_PROG_TYPE_CGROUP_DEVICE programs), and whether a cgroup
// above that container denies the device anyway (ErrAncestorDenies: the
// effective programs a container inherits are run on the device by
// EvalDeviceProgram; hpmount never rewrites them).
//
// Device-cgroup rules are only ever added for one block device and removed
// again by the same package: on cgroup v1 through devices.allow/devices.deny,
// on cgroup v2 by wrapping the container runtime's own device program in a
// recognisable prefix (see WrapDeviceProgram) whose rules can be parsed back,
// edited and removed, leaving the runtime's program body intact. The package
// refuses to touch device programs it cannot reload unchanged (programs using
// maps or calls), never writes the pod cgroup or above, and it finds pod and
// container cgroups only through podcgroup. Other writers replace those
// rules wholesale (virt-handler's cgroup v2 manager, a runtime update), so
// a RuleWatch tells, cheaply and without reading a program, that a
// container's rules were rewritten and Allowed is worth asking again.
//
// Nodes are made, checked, removed and listed in a hotplug-disks directory
// the caller hands in as a descriptor, never by a path: whether a
// launcher's directory may be used at all (the kubelet's emptyDir, not a
// bind of a host path) is judged against the host's mount table, which
// package mount owns and the engine already holds for its batch, so the
// engine opens it through mount.InLauncherDir and blockdev holds no second
// copy of that rule and no mountinfo knowledge. What blockdev checks
// itself needs no table: a name whose lookup lands on another mount than
// the directory's (statx mount id) has something mounted on it, a host
// file or device node that would be chowned or recorded in the node's
// stead, and is refused (mount.Uncover is what removes such a mount).
// Look is that judgement of one name, read-only, for diag.
//
// It refuses kubelet paths of its own (they are the kubelet package's) and
// any decision about which volume belongs to which launcher (the agent's).
package blockdev
