package testutil

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Launcher is a process in a mount namespace of its own whose mounts are
// slaves of the test's namespace, as a virt-launcher container with a
// HostToContainer volume sees the host.
type Launcher struct {
	Pid int
	cmd *exec.Cmd
}

// StartLauncher starts a launcher-like process and kills it when t ends.
func StartLauncher(t testing.TB) *Launcher {
	t.Helper()
	RequiresRoot(t)
	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", "--", "sleep", "infinity")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start launcher: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	l := &Launcher{Pid: cmd.Process.Pid, cmd: cmd}
	// unshare(1) sets up the namespace before exec'ing sleep; wait for it so
	// that Exec never enters the parent's namespace by mistake.
	for i := 0; i < 200; i++ {
		out, _ := exec.Command("readlink", "/proc/"+strconv.Itoa(l.Pid)+"/exe").Output()
		if strings.Contains(string(out), "sleep") {
			return l
		}
		exec.Command("sleep", "0.01").Run()
	}
	t.Fatalf("launcher %d never exec'd sleep", l.Pid)
	return nil
}

// Exec runs a shell script inside the launcher's mount namespace.
func (l *Launcher) Exec(t testing.TB, script string) string {
	t.Helper()
	return Run(t, "nsenter", "--mount=/proc/"+strconv.Itoa(l.Pid)+"/ns/mnt", "--", "sh", "-c", script)
}

// MountInfo returns the launcher's own view of the mount table.
func (l *Launcher) MountInfo(t testing.TB) string {
	t.Helper()
	return Run(t, "cat", "/proc/"+strconv.Itoa(l.Pid)+"/mountinfo")
}
