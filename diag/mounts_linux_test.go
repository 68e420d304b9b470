// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// TestFindmntMatchesMountinfoLive reads this process's live mount table
// both ways.
func TestFindmntMatchesMountinfoLive(t *testing.T) {
	compareLive(t)
}

// requireFindmnt skips t without findmnt, unless testutil.RequireRootEnv
// is set (make test, CI): .ci/install-deps.sh installs util-linux there,
// so a findmnt missing is a broken machine, and the findmnt half of diag
// would go untested while the run passes.
func requireFindmnt(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("findmnt")
	switch {
	case err == nil:
	case os.Getenv(testutil.RequireRootEnv) != "":
		t.Fatalf("findmnt is not installed (%v) and %s is set: refusing to skip; .ci/install-deps.sh installs it (util-linux)", err, testutil.RequireRootEnv)
	default:
		t.Skip("findmnt is not installed")
	}
}

func compareLive(t *testing.T) {
	t.Helper()
	requireFindmnt(t)
	ctx := context.Background()
	fromFindmnt, err := RunFindmnt(ctx, isolation.Host{Proc: "/proc", PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fromMountinfo, err := mountinfo.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	sameMounts(t, fromFindmnt, fromMountinfo)
	for _, src := range []string{MountSourceFindmnt, MountSourceMountinfo} {
		tb, used, err := LoadTable(ctx, src, isolation.Host{Proc: "/proc", PID: os.Getpid()})
		if err != nil || used != src || tb.Len() != len(fromMountinfo) {
			t.Errorf("LoadTable(%s) = %d mounts, %q, %v", src, tb.Len(), used, err)
		}
	}
}
