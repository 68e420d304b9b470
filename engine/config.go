// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// Config locates the host's pieces and says what the engine may change.
type Config struct {
	// Host locates the host's mount namespace and mountinfo.
	Host isolation.Host
	// KubeletRoot is the kubelet's --root-dir as configured; New resolves
	// it in the host namespace.
	KubeletRoot string
	// CgroupRoot is where the cgroup hierarchies are mounted.
	CgroupRoot string
	CgroupMode blockdev.CgroupMode
	// SysRoot is sysfs ("/sys"), DevRoot the device directory ("/dev").
	SysRoot, DevRoot string
	// PrivateDir is where older versions of the agent made the temporary
	// mounts of online growth. Growth mounts nothing now (it is an ioctl on
	// the launcher's bind); the start-up sweep still unmounts what such a
	// version left there after an upgrade.
	PrivateDir string
	// LauncherDir is where the launcher's compute container mounts
	// hotplug-disks; attaches are confirmed to be seen there.
	LauncherDir string
	// UID and GID own what is made in the launcher (QEMU's, 107).
	UID, GID int
	Grow     GrowPolicy
	// CreateDiskImages lets Attach create the disk.img a filesystem-mode
	// PVC lacks (sparse, owned by UID:GID, KubeVirt's size); off, such an
	// attach fails naming the flag that enables it.
	CreateDiskImages bool
	// CallTimeout bounds each call in the host namespace (0: none); a call
	// past it is abandoned on its own thread and the next calls go on.
	CallTimeout time.Duration
	// GrowTimeout bounds each growth, which runs on a thread of its own
	// so that a resize on a frozen filesystem stalls no attach.
	GrowTimeout time.Duration
	// WholeTable reads the host's whole mountinfo for each batch even
	// where statmount(2) could read each launcher's mounts alone (Linux
	// ≥ 6.8): the path older kernels take, kept for tests and as a way
	// back.
	WholeTable bool
	// MountEvents lets WatchMounts report mount changes as they happen
	// (Linux ≥ 6.15), so that a foreign change to a target is repaired at
	// once rather than at the next resync.
	MountEvents bool
	// HandlerStateDir is virt-handler's hotplug record directory in the
	// host's namespace (kubevirt.HandlerStateDir); "" reads no record,
	// and hpmount then removes what leaves the spec as if virt-handler
	// kept none.
	HandlerStateDir string
	// HandlerStuckAfter is how long a record must name the same gone
	// target, unchanged, before virt-handler counts as stuck on it and
	// hpmount removes what it would have left to it (stuckMemo).
	HandlerStuckAfter time.Duration
}

// GrowPolicy is what Grow may change.
type GrowPolicy struct {
	// Filesystems grows a mounted filesystem whose device grew.
	Filesystems bool
	// DiskImages also grows disk.img to KubeVirt's usable size.
	DiskImages bool
}

// DefaultConfig returns the defaults of `hpmount agent`'s node flags.
func DefaultConfig() Config {
	return Config{
		Host:        isolation.DefaultHost,
		KubeletRoot: kubelet.DefaultRoot,
		CgroupRoot:  "/sys/fs/cgroup",
		CgroupMode:  blockdev.CgroupAuto,
		SysRoot:     "/sys",
		DevRoot:     "/dev",
		// Where older versions grew; /run is a tmpfs on the host, so
		// their leftovers did not outlive a reboot either.
		PrivateDir:  "/run/hpmount/grow",
		LauncherDir: kubevirt.HotplugDisksMountPath,
		UID:         107,
		GID:         107,
		MountEvents: true,
		// Read in the host's namespace: /var/run is the host's link.
		HandlerStateDir:   kubevirt.HandlerStateDir,
		HandlerStuckAfter: 2 * time.Minute,
		Grow:              GrowPolicy{Filesystems: true},
		CallTimeout:       30 * time.Second,
		GrowTimeout:       10 * time.Minute,
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if err := c.Host.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !filepath.IsAbs(c.KubeletRoot) {
		errs = append(errs, fmt.Errorf("kubelet root %q is not an absolute path", c.KubeletRoot))
	}
	if !filepath.IsAbs(c.CgroupRoot) {
		errs = append(errs, fmt.Errorf("cgroup root %q is not an absolute path", c.CgroupRoot))
	}
	if err := c.CgroupMode.Valid(); err != nil {
		errs = append(errs, err)
	}
	if c.CallTimeout < 0 || c.GrowTimeout < 0 {
		errs = append(errs, fmt.Errorf("call timeout %s and grow timeout %s must not be negative", c.CallTimeout, c.GrowTimeout))
	}
	if c.HandlerStateDir != "" && !filepath.IsAbs(c.HandlerStateDir) {
		errs = append(errs, fmt.Errorf("virt-handler state directory %q is not an absolute path", c.HandlerStateDir))
	}
	if c.UID < 0 || c.GID < 0 {
		errs = append(errs, fmt.Errorf("qemu uid/gid %d/%d must not be negative", c.UID, c.GID))
	}
	return errors.Join(errs...)
}
