// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hpmount/hpmount/internal/testutil"
)

// TestTeardownLeavesNothing starts a node with make node-up's command
// (its own control plane, name, cgroup root and bridge) and tears it down
// with node-down's: down fails unless the teardown (StopChecked, as the
// tests') left nothing on the host compared with a Snapshot taken before
// the node started. The shared node goes first: the two kubelets would
// share /var/lib/kubelet/device-plugins, and each teardown removes what
// appeared in HostPaths while its node ran.
func TestTeardownLeavesNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	stopShared(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "realnode")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/hpmount/hpmount/test/realnode/cmd/realnode").CombinedOutput(); err != nil {
		t.Fatalf("build the realnode command: %v\n%s", err, out)
	}
	// Short: the plugin's sockets live under it, and a unix socket path
	// has 107 bytes at most (t.TempDir's name alone takes about 40).
	nodeDir, err := os.MkdirTemp("", "hpm-updown-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeDir) })
	// Whatever fails below, the background node does not outlive the test
	// (down after a clean down says no node is up).
	t.Cleanup(func() { _ = exec.Command(bin, "down", "--dir", nodeDir).Run() })
	began := time.Now()
	up, err := exec.Command(bin, "up", "--dir", nodeDir, "--name", "realnode-updown").CombinedOutput()
	if err != nil {
		t.Fatalf("realnode up: %v\n%s", err, up)
	}
	t.Logf("node up in %v:\n%s", time.Since(began).Round(time.Millisecond), up)
	for _, want := range []string{"kubeconfig", "curl --cacert", "nsenter -t"} {
		if !strings.Contains(string(up), want) {
			t.Errorf("up does not say %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "admin.kubeconfig")); err != nil {
		t.Error(err)
	}
	began = time.Now()
	down, err := exec.Command(bin, "down", "--dir", nodeDir).CombinedOutput()
	if err != nil {
		t.Fatalf("realnode down: %v\n%s", err, down)
	}
	t.Logf("node down in %v: %s", time.Since(began).Round(time.Millisecond), down)
	if _, err := os.Stat(filepath.Join(nodeDir, "stack")); !os.IsNotExist(err) {
		t.Errorf("the node's dir is still there after down: %v", err)
	}
}
