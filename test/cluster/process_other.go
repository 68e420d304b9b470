//go:build !linux

package cluster

import "syscall"

// childProcAttr has no parent-death signal outside Linux; Stop and
// t.Cleanup are the only way children are ended there.
func childProcAttr() *syscall.SysProcAttr { return nil }
