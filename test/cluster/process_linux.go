package cluster

import "syscall"

// childProcAttr makes the kernel kill a child when the test process dies, so
// a crashed or interrupted test leaves no etcd or apiserver behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
