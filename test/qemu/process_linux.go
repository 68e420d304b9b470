// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package qemu

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Start runs QEMU as o says and returns it with QMP negotiated:
//
//	qemu-system-x86_64 -machine q35 -accel tcg -nodefaults -display none -S
//	  -chardev socket,id=qmp,fd=3,server=on,wait=off -mon chardev=qmp,mode=control
//	  -global ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off
//	  -device pcie-root-port,id=rpN,bus=pcie.0,chassis=N …
//
// The QMP socket is a listening socket this process made and hands over
// as fd 3, so no path has to be reachable from QEMU's mount namespace and
// by its uid, and connecting needs no wait for QEMU to create it: the
// connection queues until QEMU accepts, and fails if QEMU exits first.
//
// A root shell joins o.Cgroups, then nsenter enters the launcher's mount
// namespace and setpriv drops to o.UID/o.GID: setns needs CAP_SYS_ADMIN,
// so the credentials change last, and everything ends in an exec so QEMU
// keeps the pid Start returns.
func Start(ctx context.Context, o Options) (*QEMU, error) {
	ln, sock, removeDir, err := listenQMP()
	if err != nil {
		return nil, err
	}
	defer removeDir()
	defer ln.Close()
	lf, err := ln.File()
	if err != nil {
		return nil, fmt.Errorf("qmp listener file: %w", err)
	}
	defer lf.Close()

	cmd := exec.Command("sh", wrapperArgs(o)...)
	cmd.ExtraFiles = []*os.File{lf}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	q := &QEMU{Pid: cmd.Process.Pid, cmd: cmd, out: newLines(stdout), done: make(chan struct{}), stderr: stderr}
	go func() {
		q.wait = cmd.Wait()
		close(q.done)
	}()
	// Connect while this process still holds the listener (the
	// connection queues), then let go of it: from then on only QEMU holds
	// it, and if QEMU exits before accepting the connection is reset
	// instead of waiting forever.
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	lf.Close()
	ln.Close()
	if err == nil {
		q.Client, err = newClient(ctx, conn)
	}
	if err != nil {
		q.Kill()
		return nil, fmt.Errorf("qmp of qemu: %w (exit: %v, stderr: %s)", err, q.wait, strings.TrimSpace(stderr.String()))
	}
	return q, nil
}

// listenQMP makes a listening unix socket for QMP in a private directory;
// closing the listener removes the socket, and removeDir the directory.
func listenQMP() (ln *net.UnixListener, sock string, removeDir func(), err error) {
	dir, err := os.MkdirTemp("", "hpmount-qmp-")
	if err != nil {
		return nil, "", nil, err
	}
	removeDir = func() { os.RemoveAll(dir) }
	sock = dir + "/qmp.sock"
	if ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"}); err != nil {
		removeDir()
		return nil, "", nil, fmt.Errorf("listen on %q: %w", sock, err)
	}
	return ln, sock, removeDir, nil
}

// wrapperArgs are sh's arguments: join the cgroups, then exec nsenter,
// setpriv and QEMU as needed.
func wrapperArgs(o Options) []string {
	script := `n=$1; shift
while [ "$n" -gt 0 ]; do echo $$ > "$1/cgroup.procs" || exit 97; shift; n=$((n-1)); done
exec "$@"`
	args := []string{"-c", script, "sh", strconv.Itoa(len(o.Cgroups))}
	args = append(args, o.Cgroups...)
	if o.MountNamespaceOf != 0 {
		args = append(args, "nsenter", "--mount=/proc/"+strconv.Itoa(o.MountNamespaceOf)+"/ns/mnt", "--")
	}
	if o.UID != 0 || o.GID != 0 {
		args = append(args, "setpriv", "--reuid", strconv.Itoa(o.UID), "--regid", strconv.Itoa(o.GID),
			"--clear-groups", "--pdeathsig", "KILL", "--")
	}
	return append(args, qemuArgs(o)...)
}

func qemuArgs(o Options) []string {
	bin := o.Binary
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	args := []string{bin, "-machine", "q35", "-accel", "tcg", "-nodefaults", "-display", "none", "-S",
		"-chardev", "socket,id=qmp,fd=3,server=on,wait=off", "-mon", "chardev=qmp,mode=control",
		// Native PCIe hotplug, not ACPI's: an unplug from a slot the guest
		// never powered on completes at once (DEVICE_DELETED) instead of
		// waiting for a guest's _EJ0 that never comes.
		"-global", "ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off"}
	if o.Incoming {
		args = append(args, "-incoming", "defer")
	}
	if o.MemoryMiB != 0 {
		args = append(args, "-m", strconv.Itoa(o.MemoryMiB))
	}
	ports := o.RootPorts
	if ports == 0 {
		ports = 4
	}
	for i := 1; i <= ports; i++ {
		args = append(args, "-device", fmt.Sprintf("pcie-root-port,id=rp%d,bus=pcie.0,chassis=%d", i, i))
	}
	return args
}

// Kill stops QEMU at once and waits for it; the descriptors it held close
// with it.
func (q *QEMU) Kill() {
	if q.Client != nil {
		q.Client.Close()
	}
	_ = q.cmd.Process.Kill()
	<-q.done
}

// Stderr is what QEMU printed on stderr so far.
func (q *QEMU) Stderr() string { return q.stderr.String() }

// syncBuffer collects a process's output while others read it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
