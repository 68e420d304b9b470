package isolation

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

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
