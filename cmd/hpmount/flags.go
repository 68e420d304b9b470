// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/pflag"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
)

// nodeLocation points at the settings that locate the node's pieces; the
// agent and diag take the same flags with the same defaults.
type nodeLocation struct {
	host        *isolation.Host
	kubeletRoot *string
	cgroupRoot  *string
	cgroupMode  *blockdev.CgroupMode
	handlerDir  *string
}

func nodeFlags(f *pflag.FlagSet, l nodeLocation) {
	f.StringVar(l.kubeletRoot, "kubelet-root", *l.kubeletRoot, "kubelet root directory, as the kubelet is configured (resolved in the host mount namespace)")
	f.StringVar(&l.host.Proc, "host-proc", l.host.Proc, "the host's /proc")
	f.IntVar(&l.host.PID, "host-pid", l.host.PID, "a host process whose mount namespace and mountinfo are the host's")
	f.StringVar(l.cgroupRoot, "cgroup-root", *l.cgroupRoot, "where the cgroup hierarchies are mounted")
	f.Var((*cgroupModeFlag)(l.cgroupMode), "cgroup-mode", "device cgroup flavour: auto, v1 or v2")
	f.StringVar(l.handlerDir, "kubevirt-state-dir", *l.handlerDir, "virt-handler's hotplug record directory on the host, read only: a target its record names is left to virt-handler to remove; empty reads none")
}

// cgroupModeFlag parses --cgroup-mode into a blockdev.CgroupMode.
type cgroupModeFlag blockdev.CgroupMode

func (m *cgroupModeFlag) String() string { return string(*m) }
func (m *cgroupModeFlag) Type() string   { return "string" }
func (m *cgroupModeFlag) Set(s string) error {
	if err := blockdev.CgroupMode(s).Valid(); err != nil {
		return err
	}
	*m = cgroupModeFlag(s)
	return nil
}
