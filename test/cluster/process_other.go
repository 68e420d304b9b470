// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package cluster

import (
	"os/exec"
	"syscall"
)

// childProcAttr has no parent-death signal outside Linux; Stop and
// t.Cleanup are the only way children are ended there.
func childProcAttr() *syscall.SysProcAttr { return nil }

// startCmd starts cmd; without a parent-death signal any thread may fork.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
