package realnode

import (
	"fmt"
	"os"
	"strings"
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
	before := TakeSnapshot()
	code := m.Run()
	if shared.env != nil {
		if err := shared.env.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: tear down the real node: %v\n", err)
			code = 1
		}
		if left := before.Added(TakeSnapshot()); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the real node's teardown left behind:\n  %s\n", strings.Join(left, "\n  "))
			code = 1
		} else {
			fmt.Fprintf(os.Stderr, "the real node's teardown left nothing behind in %s, the links or the cgroups\n",
				strings.Join(HostPaths, ", "))
		}
	}
	os.Exit(code)
}
