// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ReexecInPrivateMountNamespace re-runs the program in a new mount
// namespace whose mounts are all private, so that nothing it mounts reaches
// the machine, and exits with the child's status. env marks the child: in
// it (or when not root) the call returns at once and the caller goes
// on; the parent never returns.
func ReexecInPrivateMountNamespace(env string) {
	if os.Geteuid() != 0 || os.Getenv(env) != "" {
		return
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env+"=1")
	// Go makes "/" recursively private in the child before exec when it
	// unshares a mount namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "re-run in a private mount namespace: %v\n", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// Process is a process in a mount namespace of its own whose mounts are
// slaves of the caller's, as a virt-launcher container with a
// HostToContainer volume sees the host.
type Process struct {
	Pid int
	cmd *exec.Cmd
}

// StartSlaveProcess starts it and waits until its namespace is set up.
func StartSlaveProcess() (*Process, error) {
	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", "--", "sleep", "infinity")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start launcher process: %w", err)
	}
	p := &Process{Pid: cmd.Process.Pid, cmd: cmd}
	// unshare(1) sets up the namespace before exec'ing sleep; wait for it
	// so that nothing enters the parent's namespace by mistake.
	for range 500 {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid)); strings.HasSuffix(exe, "sleep") {
			return p, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Stop()
	return nil, fmt.Errorf("launcher process %d did not start", p.Pid)
}

// Stop kills the process.
func (p *Process) Stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// Exec runs a shell script in the process's mount namespace; prefix, if
// not empty, runs first in the same shell (e.g. joining a cgroup).
func (p *Process) Exec(prefix, script string) (string, error) {
	if prefix != "" {
		script = prefix + " && " + script
	}
	return Run("nsenter", "--mount=/proc/"+strconv.Itoa(p.Pid)+"/ns/mnt", "--", "sh", "-c", script)
}

// MountInfo is the process's own view of the mount table.
func (p *Process) MountInfo() (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/mountinfo")
	return string(b), err
}

// Run runs a command and returns its trimmed output, or an error with it.
func Run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// NewLoop attaches a loop device over a new sparse file of size bytes at
// backing and returns its device path; Detach undoes it.
func NewLoop(backing string, size int64) (string, error) {
	f, err := os.Create(backing)
	if err != nil {
		return "", err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return "", err
	}
	return Run("losetup", "--find", "--show", backing)
}

// DetachLoop detaches a loop device.
func DetachLoop(dev string) { _ = exec.Command("losetup", "-d", dev).Run() }

// GrowLoop enlarges the backing file and has the loop driver pick up the
// new size, as a storage backend growing a volume would.
func GrowLoop(dev, backing string, size int64) error {
	if err := os.Truncate(backing, size); err != nil {
		return err
	}
	_, err := Run("losetup", "--set-capacity", dev)
	return err
}

// Mkfs makes a fresh fstype ("ext4" or "xfs") filesystem on dev; "" makes
// none (a raw block volume).
func Mkfs(dev, fstype string) error {
	var err error
	switch fstype {
	case "ext4":
		_, err = Run("mkfs.ext4", "-q", "-F", dev)
	case "xfs":
		_, err = Run("mkfs.xfs", "-q", "-f", dev)
	case "":
	default:
		err = fmt.Errorf("unknown filesystem type %q", fstype)
	}
	return err
}
