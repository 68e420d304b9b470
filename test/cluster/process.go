// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a child gets to exit after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// process is one child (etcd or kube-apiserver) whose stdout and stderr go
// to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the child has exited
	waitErr error         // valid after done is closed
}

func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log %q: %w", name, logPath, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	fmt.Fprintf(logFile, "+ %s %s\n", bin, strings.Join(args, " "))
	if err := startCmd(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s %q: %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, and SIGKILL after stopGrace. A child that already
// exited on its own is not an error here: readiness checks report that.
func (p *process) stop() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("terminate %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopGrace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.done
	return nil
}

// tail returns the last n lines of the log, headed by the process name.
func (p *process) tail(n int) string {
	if p == nil {
		return ""
	}
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("--- %s log %q unreadable: %v\n", p.name, p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s (%s):\n%s\n", len(lines), p.name, p.logPath, bytes.Join(lines, []byte("\n")))
}

// exitError describes an early exit, with the log tail.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited before it was ready: %v\n%s", p.name, p.waitErr, p.tail(40))
}
