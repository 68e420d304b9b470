// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

// tree builds root/vol/{disk.img,sub/file} plus the tenant's traps, and a
// host file outside root.
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "host-secret")
	must(t, os.MkdirAll(filepath.Join(root, "vol", "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "vol", "disk.img"), []byte("img"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "vol", "sub", "file"), nil, 0o644))
	must(t, os.WriteFile(outside, []byte("secret"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(root, "vol", "link-out")))
	must(t, os.Symlink("..", filepath.Join(root, "vol", "link-up")))
	must(t, os.Symlink("sub", filepath.Join(root, "vol", "link-dir")))
	return root, outside
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenBeneath(t *testing.T) {
	for _, mode := range []struct {
		name string
		walk bool
	}{{"openat2", false}, {"walk", true}} {
		t.Run(mode.name, func(t *testing.T) {
			old := openat2Missing.Load()
			openat2Missing.Store(mode.walk)
			t.Cleanup(func() { openat2Missing.Store(old) })
			root, _ := tree(t)
			r, err := OpenRoot(root)
			must(t, err)
			t.Cleanup(func() { r.Close() })
			for _, tc := range []struct {
				rel    string
				unsafe bool
			}{
				{"vol/disk.img", false},
				{"vol/sub/file", false},
				{"vol/link-out", true},
				{"vol/link-up/vol/disk.img", true},
				{"vol/link-dir/file", true},
				{"vol/../vol/disk.img", true},
				{"/etc/passwd", true},
				{"vol//disk.img", true},
				{"vol/disk.img\x00x", true},
			} {
				t.Run(tc.rel, func(t *testing.T) {
					f, err := OpenBeneath(r, tc.rel, How{Flags: unix.O_RDONLY})
					if tc.unsafe {
						if !errors.Is(err, ErrUnsafePath) {
							t.Fatalf("got %v, want ErrUnsafePath", err)
						}
						return
					}
					must(t, err)
					f.Close()
				})
			}
		})
	}
}

func TestOpenBeneathSameMount(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, walk := range []bool{false, true} {
		old := openat2Missing.Load()
		openat2Missing.Store(walk)
		t.Cleanup(func() { openat2Missing.Store(old) })
		root, outside := tree(t)
		img := filepath.Join(root, "vol", "disk.img")
		// A host file bind-mounted over disk.img: same name, other mount.
		must(t, unix.Mount(outside, img, "", unix.MS_BIND, ""))
		t.Cleanup(func() { unix.Unmount(img, unix.MNT_DETACH) })
		r, err := OpenRoot(filepath.Join(root, "vol"))
		must(t, err)
		_, err = OpenBeneath(r, "disk.img", How{Flags: unix.O_RDONLY, SameMount: true})
		if !errors.Is(err, ErrUnsafePath) {
			t.Fatalf("walk=%v: got %v, want ErrUnsafePath for a mount crossing", walk, err)
		}
		f, err := OpenBeneath(r, "disk.img", How{Flags: unix.O_RDONLY})
		must(t, err)
		f.Close()
		r.Close()
	}
}

func TestFollowLinkBeneath(t *testing.T) {
	root, outside := tree(t)
	must(t, os.MkdirAll(filepath.Join(root, "publish"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "publish", "dev"), nil, 0o644))
	links := map[string]string{
		"good":     filepath.Join(root, "publish", "dev"),
		"relative": "publish/dev",
		"escape":   outside,
		"dotdot":   filepath.Join(root, "publish", "..", "..", "host-secret"),
		"via-link": filepath.Join(root, "vol", "link-out"),
	}
	for name, target := range links {
		must(t, os.Symlink(target, filepath.Join(root, "vol", name)))
	}
	r, err := OpenRoot(root)
	must(t, err)
	defer r.Close()
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"good", true}, {"relative", false}, {"escape", false}, {"dotdot", false}, {"via-link", false}, {"disk.img", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FollowLinkBeneath(r, []string{root}, "vol/"+tc.name, How{Flags: unix.O_PATH})
			if tc.ok {
				must(t, err)
				f.Close()
				return
			}
			if err == nil {
				f.Close()
				t.Fatalf("link %q was followed", tc.name)
			}
		})
	}
}

// TestLookupRetriesAreBounded: the kernel answers EAGAIN to a confined
// lookup that a rename or mount raced, and a retry is right, but a tenant
// renaming in a loop can make every attempt race. Both confined opens
// retry a few times and then fail with ErrLookupRaced, never loop.
func TestLookupRetriesAreBounded(t *testing.T) {
	root, _ := tree(t)
	r, err := OpenRoot(root)
	must(t, err)
	defer r.Close()
	opens := map[string]func() (*os.File, error){
		"OpenBeneath": func() (*os.File, error) { return OpenBeneath(r, "vol/disk.img", How{Flags: unix.O_PATH}) },
		"OpenInRoot":  func() (*os.File, error) { return OpenInRoot(r, "/vol/sub/../disk.img") },
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			// The kernel answers EAGAIN far more often than a lookup may
			// retry, then gives up with ENOENT: a lookup without a bound
			// would say ENOENT.
			calls := 0
			openat2Syscall = func(int, string, *unix.OpenHow) (int, error) {
				if calls++; calls > 1000 {
					return -1, unix.ENOENT
				}
				return -1, unix.EAGAIN
			}
			defer func() { openat2Syscall = unix.Openat2 }()
			f, err := open()
			if err == nil {
				f.Close()
			}
			if !errors.Is(err, ErrLookupRaced) || !errors.Is(err, unix.EAGAIN) || calls != maxLookupRetries {
				t.Fatalf("%s with EAGAIN on every try: %v after %d calls; want ErrLookupRaced after %d", name, err, calls, maxLookupRetries)
			}
			// A race that passes within the bound is retried through.
			calls = 0
			openat2Syscall = func(dirfd int, path string, how *unix.OpenHow) (int, error) {
				if calls++; calls < maxLookupRetries {
					return -1, unix.EAGAIN
				}
				return unix.Openat2(dirfd, path, how)
			}
			f, err = open()
			if err != nil {
				t.Fatalf("%s with EAGAIN %d times: %v; want it opened", name, maxLookupRetries-1, err)
			}
			f.Close()
		})
	}
}

// TestOpenInRootUnderARenameLoop: a tenant renames in a loop beneath the
// root while the agent looks up a path that climbs with "..", which the
// kernel answers EAGAIN whenever a rename raced it. Every lookup returns,
// opened or failed with ErrLookupRaced.
func TestOpenInRootUnderARenameLoop(t *testing.T) {
	root, _ := tree(t)
	r, err := OpenRoot(root)
	must(t, err)
	defer r.Close()
	a, b := filepath.Join(root, "vol", "a"), filepath.Join(root, "vol", "b")
	must(t, os.WriteFile(a, nil, 0o644))
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Rename(a, b)
			_ = unix.Rename(b, a)
		}
	}()
	defer func() { close(stop); <-stopped }()

	done := make(chan [2]int)
	go func() {
		var opened, raced int
		// Each ".." is a point where the kernel checks for a racing
		// rename; many make a race likely.
		path := "/vol" + strings.Repeat("/sub/..", 50) + "/disk.img"
		for range 2000 {
			f, err := OpenInRoot(r, path)
			switch {
			case err == nil:
				f.Close()
				opened++
			case errors.Is(err, ErrLookupRaced):
				raced++
			default:
				t.Errorf("OpenInRoot: %v", err)
			}
		}
		done <- [2]int{opened, raced}
	}()
	select {
	case n := <-done:
		t.Logf("under a rename loop: %d opened, %d failed as raced", n[0], n[1])
	case <-time.After(60 * time.Second):
		t.Fatal("OpenInRoot did not return under a rename loop")
	}
}

// TestCheckOpenat2: this kernel has openat2; one that answers ENOSYS is
// reported as unsupported, which the agent's start line says.
func TestCheckOpenat2(t *testing.T) {
	if err := CheckOpenat2(); err != nil {
		t.Fatalf("CheckOpenat2 on this kernel: %v", err)
	}
	openat2Syscall = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	defer func() { openat2Syscall = unix.Openat2 }()
	if err := CheckOpenat2(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("CheckOpenat2 without openat2: %v, want ErrUnsupported", err)
	}
}
