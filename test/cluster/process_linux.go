// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// childProcAttr makes the kernel kill a child when the test process dies, so
// a crashed or interrupted test leaves no etcd or apiserver behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// The parent-death signal fires when the *thread* that forked the child
// exits (prctl(2) PR_SET_PDEATHSIG), not the process. Go retires a thread
// whose goroutine ends while locked to it, which is how the isolation
// package leaves a thread that joined the host mount namespace; a control
// plane forked earlier from that same thread was then killed mid-test. So
// every child is forked from one thread that stays locked and never exits.
var (
	forkOnce sync.Once
	forks    chan func()
)

// startCmd starts cmd from the forking thread.
func startCmd(cmd *exec.Cmd) error {
	forkOnce.Do(func() {
		forks = make(chan func())
		go func() {
			runtime.LockOSThread()
			for f := range forks {
				f()
			}
		}()
	})
	done := make(chan error, 1)
	forks <- func() { done <- cmd.Start() }
	return <-done
}
