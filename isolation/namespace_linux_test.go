package isolation

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestMountNamespaceDo(t *testing.T) {
	testutil.RequiresRoot(t)
	// A process with a private namespace of its own stands in for the host.
	other := testutil.StartLauncher(t)
	dir := t.TempDir()
	ns, err := OpenMountNamespace("/proc/" + strconv.Itoa(other.Pid) + "/ns/mnt")
	must(t, err)
	defer ns.Close()
	target := filepath.Join(dir, "m")
	must(t, os.Mkdir(target, 0o755))
	must(t, ns.Do(func() error { return unix.Mount("hpmount-ns-test", target, "tmpfs", 0, "") }))
	if !strings.Contains(other.MountInfo(t), target) {
		t.Fatalf("mount on %q not in the other namespace", target)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.ReadFile("/proc/thread-self/mountinfo")
	must(t, err)
	if strings.Contains(string(self), target) {
		t.Fatalf("mount on %q leaked into the caller's namespace:\n%s\nother:\n%s", target, self, other.MountInfo(t))
	}
	// Processes started from inside Do see the joined namespace.
	var seen string
	must(t, ns.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/mountinfo")
		seen = string(b)
		return err
	}))
	if !strings.Contains(seen, target) {
		t.Fatalf("Do ran outside the namespace")
	}
	ns.Close()
	if err := ns.Do(func() error { return nil }); err != ErrClosed {
		t.Fatalf("Do after Close: %v", err)
	}
}

func TestOpenMountNamespaceMissing(t *testing.T) {
	testutil.RequiresRoot(t)
	if _, err := OpenMountNamespace(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("joined a namespace that does not exist")
	}
}
