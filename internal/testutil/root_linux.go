// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os"
	"testing"

	"github.com/hpmount/hpmount/internal/sandbox"
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
	sandbox.ReexecInPrivateMountNamespace(inNamespaceEnv)
	os.Exit(m.Run())
}
