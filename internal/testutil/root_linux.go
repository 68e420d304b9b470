package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// RequireRootEnv is set by `make test` (and so by CI): a root test that cannot
// run then fails instead of skipping, so CI never passes on skipped root tests.
const RequireRootEnv = "HPMOUNT_REQUIRE_ROOT"

const inNamespaceEnv = "HPMOUNT_TEST_PRIVATE_MOUNT_NS"

// RequiresRoot skips t when not running as root, unless RequireRootEnv is set,
// in which case it fails t.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(RequireRootEnv) != "" {
		t.Fatalf("test needs root and %s is set: refusing to skip", RequireRootEnv)
	}
	t.Skip("test needs root")
}

// RunInPrivateMountNamespace is called from TestMain. As root, it re-runs the
// test binary in a new mount namespace whose mounts are all private, so that
// nothing a test mounts can reach the machine's own mount table, and exits
// with the child's status. Otherwise it runs m directly.
func RunInPrivateMountNamespace(m *testing.M) {
	if os.Geteuid() != 0 || os.Getenv(inNamespaceEnv) != "" {
		os.Exit(m.Run())
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), inNamespaceEnv+"=1")
	// Go makes "/" recursively private in the child before exec when it
	// unshares a mount namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintf(os.Stderr, "re-running tests in a private mount namespace: %v\n", err)
		os.Exit(2)
	}
	os.Exit(0)
}
