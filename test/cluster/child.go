// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

// Child is a program started like etcd and kube-apiserver (forked from the
// one thread that never exits, killed when the test process dies, output
// in a log file), for other harnesses: test/realnode starts containerd,
// the kubelet and the CSI plugin with it.
type Child struct{ p *process }

// StartChild starts bin with args, its stdout and stderr appended to logPath.
func StartChild(name, bin string, args []string, logPath string) (*Child, error) {
	p, err := startProcess(name, bin, args, logPath)
	if err != nil {
		return nil, err
	}
	return &Child{p: p}, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.p.cmd.Process.Pid }

// Done is closed when the child has exited.
func (c *Child) Done() <-chan struct{} { return c.p.done }

// ExitError describes an early exit, with the tail of the log.
func (c *Child) ExitError() error { return c.p.exitError() }

// Tail is the last n lines of the log, headed by the child's name.
func (c *Child) Tail(n int) string { return c.p.tail(n) }

// Stop sends SIGTERM, then SIGKILL after 5 s, and waits for the exit.
func (c *Child) Stop() error { return c.p.stop() }
