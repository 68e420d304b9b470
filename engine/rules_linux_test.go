// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/outcome"
)

// TestRuleRewriteIsReported (#38): a block volume's device rule taken
// away by another writer while its node stays (here a deny written to
// the compute container's devices.list, as a runtime update does; on
// cgroup v2, virt-handler's sync rebuilding the device program) is
// reported by WatchRules for its launcher, and the verify it brings
// allows the device again ("created"); a verify after that changes
// nothing. Without the watch, the rule stayed lost until the resync.
func TestRuleRewriteIsReported(t *testing.T) {
	n := newLinkedRoot(t)
	e := n.engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attach := func(want outcome.Result) {
		t.Helper()
		snap, err := e.Snapshot(ctx)
		must(t, err)
		if r, err := e.Attach(ctx, snap, blockVolume(launcherUID)); err != nil || r != want {
			t.Fatalf("attach = %s, %v; want %s", r, err, want)
		}
	}
	// As runc leaves a container: everything denied but /dev/null.
	ctr := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(launcherUID), computeID)
	must(t, os.WriteFile(filepath.Join(ctr, "devices.deny"), []byte("a"), 0))
	must(t, os.WriteFile(filepath.Join(ctr, "devices.allow"), []byte("c 1:3 rwm"), 0))
	attach(outcome.Created)
	defer detachAll(t, e, launcherUID)

	reports := make(chan hotplug.MountChange, 16)
	go func() { _ = e.WatchRules(ctx, func(c hotplug.MountChange) { reports <- c }) }()
	dev := deviceOf(t, filepath.Join(n.real, kubelet.CSIPublishFile("pv-blk", string(attachUID))))
	must(t, os.WriteFile(filepath.Join(ctr, "devices.deny"), fmt.Appendf(nil, "b %d:%d rwm", dev.Major, dev.Minor), 0))
	select {
	case c := <-reports:
		if !slices.Equal(c.Launchers, []types.UID{launcherUID}) || c.Lost {
			t.Fatalf("reported %+v, want launcher %s", c, launcherUID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the rewrite was not reported in 10 s")
	}
	attach(outcome.Created)
	attach(outcome.Unchanged)
}
