// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"fmt"
	"strings"

	"github.com/hpmount/hpmount/mountinfo"
)

// NotSharedError says that a host path lives on a mount that is not shared,
// so mounts made under it stay on the host.
type NotSharedError struct {
	// Path is the path checked, e.g. the kubelet pods directory.
	Path string
	// MountPoint is the mount Path lives on.
	MountPoint string
	// Propagation is that mount's propagation as findmnt names it:
	// "private", "slave" or "unbindable".
	Propagation string
	// Master is the peer group a slave mount receives from, 0 otherwise.
	Master int
}

func (e *NotSharedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q is on mount %q whose propagation is %s", e.Path, e.MountPoint, e.Propagation)
	if e.Master != 0 {
		fmt.Fprintf(&b, " (receiving from peer group %d but passing nothing on)", e.Master)
	}
	b.WriteString(", not shared: mounts the agent makes under it never reach pods that mount it with mountPropagation: HostToContainer")
	if e.Propagation == "unbindable" {
		b.WriteString(", and an unbindable mount cannot even be bind-mounted into a pod")
	}
	fmt.Fprintf(&b, "; fix on the host: run \"mount --make-rshared %s\"", e.MountPoint)
	if e.MountPoint == "/" {
		b.WriteString(", and keep it across reboots by removing MountFlags=private or MountFlags=slave (or setting MountFlags=shared) in the kubelet and container runtime systemd units (systemctl edit kubelet containerd; systemctl daemon-reload)")
	} else {
		fmt.Fprintf(&b, ", and keep it across reboots with the option rshared on that mount (fstab: \"%s %s none bind,rshared 0 0\", or Options=bind,rshared in its systemd .mount unit) and no MountFlags=private/slave in the kubelet and container runtime units", e.MountPoint, e.MountPoint)
	}
	b.WriteString("; launcher pods started before the fix must be recreated")
	return b.String()
}

// NotSlaveError says that a launcher's mount does not receive propagation
// from the host mount the agent mounts into.
type NotSlaveError struct {
	HostPath, HostMountPoint string
	// HostShared is the host mount's peer group.
	HostShared                       int
	LauncherPath, LauncherMountPoint string
	// LauncherPropagation is the launcher mount's propagation; Master and
	// Shared are its peer groups (0 when absent).
	LauncherPropagation            string
	LauncherMaster, LauncherShared int
}

func (e *NotSlaveError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "launcher path %q is on mount %q (%s", e.LauncherPath, e.LauncherMountPoint, e.LauncherPropagation)
	if e.LauncherMaster != 0 {
		fmt.Fprintf(&b, ", master:%d", e.LauncherMaster)
	}
	if e.LauncherShared != 0 {
		fmt.Fprintf(&b, ", shared:%d", e.LauncherShared)
	}
	fmt.Fprintf(&b, "), which does not receive mounts from host mount %q (shared:%d) holding %q", e.HostMountPoint, e.HostShared, e.HostPath)
	switch {
	case e.LauncherMaster != 0:
		fmt.Fprintf(&b, ": it is a slave of peer group %d, not %d, so the host mount was replaced or re-shared after the pod started", e.LauncherMaster, e.HostShared)
	default:
		b.WriteString(": the pod's hotplug-disks volumeMount lacks mountPropagation: HostToContainer, or the host mount was not shared when the pod started")
	}
	b.WriteString("; fix the host mount first (it must be shared), then recreate the launcher pod (migrate or restart the VM)")
	return b.String()
}

// CheckShared returns nil when path lives on a shared mount of t, and a
// *NotSharedError naming the mount, its propagation and the fix otherwise.
func CheckShared(t *mountinfo.Table, path string) error {
	m, err := MountOf(t, path)
	if err != nil {
		return err
	}
	return CheckSharedMount(m, path)
}

// MountOf returns the mount of t that path lives on, which need not exist
// yet (mountinfo.Table.Containing), or an error naming path when t holds
// none: the mount CheckShared judges.
func MountOf(t *mountinfo.Table, path string) (*mountinfo.Info, error) {
	if m := t.Containing(path); m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("no mount in the table contains %q", path)
}

// CheckSharedMount is CheckShared of path on m, the mount it lives on, as
// read alone (mountinfo.StatFd).
func CheckSharedMount(m *mountinfo.Info, path string) error {
	if m.Shared != 0 && !m.Unbindable {
		return nil
	}
	return &NotSharedError{Path: path, MountPoint: m.MountPoint, Propagation: m.Propagation(), Master: m.Master}
}

// CheckSlaveOf checks that the launcher's mount of launcherPath (in the
// launcher's own mount table) receives the mounts the host makes under
// hostPath: the host mount is shared, and the launcher mount is a slave of
// its peer group or a peer in it. Otherwise it returns a *NotSharedError for
// the host side or a *NotSlaveError for the launcher side.
func CheckSlaveOf(host, launcherView *mountinfo.Table, hostPath, launcherPath string) error {
	if err := CheckShared(host, hostPath); err != nil {
		return err
	}
	hm := host.Containing(hostPath)
	lm := launcherView.Containing(launcherPath)
	if lm == nil {
		return fmt.Errorf("no mount in the launcher's table contains %q", launcherPath)
	}
	if lm.Master == hm.Shared || lm.Shared == hm.Shared {
		return nil
	}
	return &NotSlaveError{
		HostPath: hostPath, HostMountPoint: hm.MountPoint, HostShared: hm.Shared,
		LauncherPath: launcherPath, LauncherMountPoint: lm.MountPoint,
		LauncherPropagation: lm.Propagation(), LauncherMaster: lm.Master, LauncherShared: lm.Shared,
	}
}
