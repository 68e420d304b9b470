// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

// TestReached looks at a bind from inside a launcher-like process that
// mounts the host's hotplug-disks at a container path of its own, once as
// a slave (HostToContainer) and once private (a launcher started before the
// pods dir was shared): the first sees disk.img, the second the empty
// target file.
func TestReached(t *testing.T) {
	testutil.RequiresRoot(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testutil.MakeShared(t, base)
	hotplug, slave, private := filepath.Join(base, "hotplug-disks"), filepath.Join(base, "ctr-slave"), filepath.Join(base, "ctr-private")
	vol := filepath.Join(base, "vol")
	for _, d := range []string{hotplug, slave, private, vol} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := testutil.StartLauncher(t)
	l.Exec(t, "mount --bind "+hotplug+" "+slave+" && mount --bind "+hotplug+" "+private+" && mount --make-private "+private)

	testutil.NewFilesystem(t, "ext4", 16<<20, vol)
	disk := filepath.Join(vol, "disk.img")
	target := filepath.Join(hotplug, "data.img")
	for _, f := range []string{disk, target} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(disk, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	want, dirIdent := identOfPath(t, target), identOfPath(t, hotplug)
	var hostMount uint64
	if st, err := statAt(unix.AT_FDCWD, target, 0); err != nil {
		t.Fatal(err)
	} else {
		hostMount = st.mount
	}

	tests := []struct {
		name  string
		dir   string
		pids  []int
		want  Sight
		error string
	}{
		{"slave view sees the bind", slave, []int{l.Pid}, Seen, ""},
		{"private view sees the empty file", private, []int{l.Pid}, NotSeen, "does not see the mount"},
		{"no container mounts it there", filepath.Join(base, "vol"), []int{l.Pid}, NoView, ""},
		{"no process", slave, nil, NoView, ""},
		{"a gone process is passed over", slave, []int{1 << 30, l.Pid}, Seen, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, binds, err := Reached(Launcher{Proc: "/proc", Pids: tt.pids, Dir: tt.dir, DirIdent: dirIdent}, "data.img", want)
			if got != tt.want || (err != nil) != (tt.error != "") || err != nil && !strings.Contains(err.Error(), tt.error) {
				t.Fatalf("Reached = %v, %v; want %v with error %q", got, err, tt.want, tt.error)
			}
			// The launcher's bind is its own mount, not the host's.
			if seen := tt.want == Seen; seen != (len(binds) == 1) || seen && (binds[0].File != want || binds[0].Mount == 0 || binds[0].Mount == hostMount) {
				t.Fatalf("binds = %+v; want the launcher's own bind of %s (the host's is mount %d) when seen", binds, want, hostMount)
			}
			var nse *NotSeenError
			if tt.want == NotSeen && (!errors.As(err, &nse) || nse.Pid != l.Pid) {
				t.Fatalf("error %v is not a *NotSeenError naming pid %d", err, l.Pid)
			}
		})
	}
}

func identOfPath(t *testing.T, path string) Ident {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id, err := IdentOf(f)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
