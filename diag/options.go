// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"time"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Options are the flags of `hpmount diag`. The node flags have the agent's
// defaults (see DefaultOptions).
type Options struct {
	// NodeName is the node diagnosed; required.
	NodeName string
	// Namespace restricts the VMIs looked at unless AllNamespaces is set;
	// empty means "default".
	Namespace     string
	AllNamespaces bool
	// VMIs, when not empty, restricts the report to these VMI names.
	VMIs []string
	// KubeletRoot is the kubelet root as configured; Run resolves it in the
	// host mount namespace, as the agent does.
	KubeletRoot string
	// Host locates the host's mount table and mount namespace.
	Host isolation.Host
	// CgroupRoot and CgroupMode locate the device cgroups (see
	// blockdev.NewDeviceRules).
	CgroupRoot string
	CgroupMode blockdev.CgroupMode
	// HandlerStateDir is virt-handler's hotplug record directory on the
	// host (kubevirt.HandlerStateDir); "" reads no record. A target its
	// record leaves to virt-handler is no orphan (LeftToHandler).
	HandlerStateDir string
	// MountSource is "auto", "findmnt" or "mountinfo".
	MountSource string
	// SysRoot is sysfs; "" means "/sys". DevRoot is the device directory;
	// "" means "/dev".
	SysRoot, DevRoot string
	// CallTimeout bounds each look at the node: a stat, open or readlink
	// in the host mount namespace, a read of /proc, sysfs or the device
	// cgroups, the findmnt run. A look past it is abandoned and its volume
	// judged stuck, and the other volumes are diagnosed. 0 means
	// DefaultCallTimeout.
	CallTimeout time.Duration
}

// DefaultOptions returns the defaults of the command's flags.
func DefaultOptions() Options {
	return Options{
		Namespace:   "default",
		KubeletRoot: kubelet.DefaultRoot,
		Host:        isolation.DefaultHost,
		CgroupRoot:  "/sys/fs/cgroup",
		CgroupMode:  blockdev.CgroupAuto,
		MountSource: MountSourceAuto,
		CallTimeout: DefaultCallTimeout,

		HandlerStateDir: kubevirt.HandlerStateDir,
	}
}

// Clients are the API clients Run reads with. Run only gets and lists.
type Clients struct {
	Kube kubernetes.Interface
	Dyn  dynamic.Interface
}

func (o *Options) sysRoot() string {
	if o.SysRoot == "" {
		return "/sys"
	}
	return o.SysRoot
}

func (o *Options) callTimeout() time.Duration {
	if o.CallTimeout == 0 {
		return DefaultCallTimeout
	}
	return o.CallTimeout
}

func (o *Options) devRoot() string {
	if o.DevRoot == "" {
		return "/dev"
	}
	return o.DevRoot
}
