// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"fmt"
	"os"
	"testing"

	"github.com/hpmount/hpmount/internal/sandbox"
)

// TestMain runs the package in a private mount namespace, shares one
// control plane and one node among the tests, and after the node is torn
// down fails the run if anything of it is left on the host (HostPaths,
// links, cgroups).
func TestMain(m *testing.M) {
	// As testutil.RunInPrivateMountNamespace, with work after m.Run.
	sandbox.ReexecInPrivateMountNamespace("HPMOUNT_TEST_PRIVATE_MOUNT_NS")
	hostBefore = TakeSnapshot()
	code := m.Run()
	if shared.env != nil {
		r := StopChecked(hostBefore, shared.env.stop)
		fmt.Fprint(os.Stderr, r)
		if !r.Clean() {
			code = 1
		}
	}
	os.Exit(code)
}
