// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/hpmount/hpmount/podcgroup"
)

// Linux limits of a device number's parts (MINORBITS is 20; majors fit in 12 bits).
const (
	maxMajor = 1<<12 - 1
	maxMinor = 1<<20 - 1
)

// Device is a block device by number. Rules are always for a block device
// ("b") with access "rwm".
type Device struct {
	Major uint32
	Minor uint32
}

// String returns the device as in a devices.list line without access, e.g. "b 7:3".
func (d Device) String() string { return fmt.Sprintf("b %d:%d", d.Major, d.Minor) }

// Validate refuses device numbers the kernel cannot represent.
func (d Device) Validate() error {
	if d.Major > maxMajor || d.Minor > maxMinor {
		return fmt.Errorf("device %d:%d: %w", d.Major, d.Minor, ErrInvalidDevice)
	}
	return nil
}

// ErrInvalidDevice is wrapped when a device number is out of range.
var ErrInvalidDevice = errors.New("device number out of range")

// Container names the container whose processes may open a device: the
// launcher's compute container, where QEMU runs. The pod's other containers
// never get the device.
type Container struct {
	PodUID string
	// ID is the container ID as the pod status gives it
	// ("containerd://<id>"); empty while the pod status names none.
	ID string
}

// ErrAncestorDenies is wrapped when a cgroup above the container denies a
// device: on v2 a device program attached to an ancestor (the pod cgroup or
// above) that refuses it, on v1 a parent whose devices list does not allow
// it. hpmount changes cgroups of the container only, so the device stays
// denied; the error names the ancestor.
var ErrAncestorDenies = errors.New("a cgroup above the container denies the device, and hpmount changes only the container's")

// DeviceRules lets the processes of one container of a pod open a block
// device, and takes that permission back. Implementations are idempotent:
// allowing twice keeps one rule, denying a device that was never allowed
// succeeds.
type DeviceRules interface {
	// Allow permits "rwm" on dev in the container's cgroup and all its
	// descendants, never in the pod cgroup or above. A container whose
	// cgroup is not there wraps podcgroup.ErrContainerNotFound (or
	// podcgroup.ErrNoContainerID): nothing is granted to the pod instead.
	Allow(c Container, dev Device) error
	// Deny removes what Allow added for dev anywhere in the pod's
	// cgroups: in every container, current or not, and in the pod cgroup
	// where older hpmount versions granted it.
	Deny(podUID string, dev Device) error
	// Allowed reports whether the container's processes may open dev:
	// the rule Allow adds is in effect in the container's cgroup and
	// every descendant, and nothing above denies it (an ancestor that
	// does wraps ErrAncestorDenies, naming it).
	Allowed(c Container, dev Device) (bool, error)
	// Watch returns a RuleWatch of the container's cgroup and its
	// descendants as they are now. A rule Allow added can be lost to
	// another writer while the node stays: virt-handler's cgroup v2
	// manager rebuilds the device program from its own list
	// (kubevirt#7710), and a reload of the container's systemd unit
	// reverts it (kubevirt#14825). The watch tells the caller to ask
	// Allowed again; it grants and reads no rule itself.
	Watch(c Container) (RuleWatch, error)
	// Root is the hierarchy pod cgroups are searched under.
	Root() string
}

// RuleWatch tells when the device rules of one container's cgroups were
// rewritten. It is cheap enough to ask twice a second for every launcher
// of a node: one BPF_PROG_QUERY (v2) or one devices.list read (v1) per
// cgroup, on files opened once, when the watch was made.
type RuleWatch interface {
	// Changed reports whether the device rules of the watched cgroups
	// changed since the watch was made or last asked, by any writer,
	// hpmount included: on v2 the set of device programs attached to
	// each (a rewrite replaces the program), on v1 the text of each
	// devices.list. A cgroup that went away is an error.
	Changed() (bool, error)
	// Close releases the watched cgroups' files, kept open between asks.
	Close() error
}

var (
	_ DeviceRules = (*V1)(nil)
	_ DeviceRules = (*V2)(nil)
)

// V1 manages device rules with the cgroup v1 devices controller. Root is the
// devices hierarchy's mount point (or a directory below it), e.g.
// /sys/fs/cgroup/devices.
type V1 struct {
	root string
	pods podcgroup.Finder
}

// NewV1 returns device rules for the cgroup v1 devices hierarchy at root.
func NewV1(root string) *V1 { return &V1{root: root} }

// Root returns the directory pod cgroups are searched under.
func (v *V1) Root() string { return v.root }

// CgroupMode selects the device-cgroup flavour NewDeviceRules programs.
type CgroupMode string

// Modes accepted by NewDeviceRules.
const (
	CgroupV1   CgroupMode = "v1"
	CgroupV2   CgroupMode = "v2"
	CgroupAuto CgroupMode = "auto"
)

// Valid reports an error for a mode NewDeviceRules does not know.
func (m CgroupMode) Valid() error {
	switch m {
	case CgroupV1, CgroupV2, CgroupAuto:
		return nil
	}
	return fmt.Errorf("device cgroup mode %q: want %q, %q or %q", m, CgroupV1, CgroupV2, CgroupAuto)
}

// NewDeviceRules picks the implementation for mode ("v1", "v2" or "auto").
// For "auto", root is the cgroup mount root: a cgroup.controllers file there
// means the unified hierarchy (v2), else <root>/devices is taken as the v1
// devices hierarchy. For "v1" and "v2", root may be either the hierarchy
// itself or the directory above it (<root>/devices, <root>/unified).
func NewDeviceRules(mode CgroupMode, root string) (DeviceRules, error) {
	if root == "" {
		return nil, errors.New("device cgroup root is empty")
	}
	switch mode {
	case CgroupV1:
		if !exists(filepath.Join(root, "devices.list")) && exists(filepath.Join(root, "devices", "devices.list")) {
			root = filepath.Join(root, "devices")
		}
		if !exists(filepath.Join(root, "devices.list")) {
			return nil, fmt.Errorf("cgroup v1 devices hierarchy: no devices.list in %q", root)
		}
		return NewV1(root), nil
	case CgroupV2:
		if !exists(filepath.Join(root, "cgroup.controllers")) && exists(filepath.Join(root, "unified", "cgroup.controllers")) {
			root = filepath.Join(root, "unified")
		}
		if !exists(filepath.Join(root, "cgroup.controllers")) {
			return nil, fmt.Errorf("cgroup v2 hierarchy: no cgroup.controllers in %q", root)
		}
		return NewV2(root), nil
	case CgroupAuto:
		if exists(filepath.Join(root, "cgroup.controllers")) {
			return NewV2(root), nil
		}
		if exists(filepath.Join(root, "devices", "devices.list")) {
			return NewV1(filepath.Join(root, "devices")), nil
		}
		return nil, fmt.Errorf("detect cgroup version under %q: neither cgroup.controllers nor devices/devices.list found", root)
	default:
		return nil, mode.Valid()
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// V2 manages device rules on the cgroup v2 unified hierarchy by wrapping the
// BPF_PROG_TYPE_CGROUP_DEVICE programs attached in a pod's cgroup subtree.
// Root is the cgroup2 mount point (or a directory below it).
type V2 struct {
	root string
	pods podcgroup.Finder
	// mu serialises read-modify-replace of device programs within this
	// process; across processes the replace is guarded by BPF_F_REPLACE.
	mu sync.Mutex
}

// NewV2 returns device rules for the cgroup v2 hierarchy at root.
func NewV2(root string) *V2 { return &V2{root: root} }

// Root returns the directory pod cgroups are searched under.
func (v *V2) Root() string { return v.root }
