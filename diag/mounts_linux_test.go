package diag

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
)

// TestFindmntMatchesMountinfoLive reads this process's live mount table
// both ways.
func TestFindmntMatchesMountinfoLive(t *testing.T) {
	compareLive(t)
}

func compareLive(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("findmnt"); err != nil {
		t.Skip("findmnt is not installed")
	}
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
	fromMountinfo, err := mount.Parse(f)
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
