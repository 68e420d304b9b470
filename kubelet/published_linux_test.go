package kubelet

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hpmount/hpmount/isolation"
)

// FindPublished on a plain directory tree, in the caller's namespace: no
// root needed.
func TestFindPublished(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	mustOK(t, err)
	mk := func(rel string) {
		mustOK(t, os.MkdirAll(filepath.Join(root, rel), 0o755))
	}
	mk("pods/csi-pod/volumes/kubernetes.io~csi/pvc-a/mount")
	mk("pods/csi-pod/volumes/kubernetes.io~empty-dir/scratch")
	mk("pods/local-pod/volumes/kubernetes.io~local-volume/pv-local")
	mk("pods/unpublished/volumes/kubernetes.io~csi/pvc-b")
	mk("pods/both/volumes/kubernetes.io~csi/pvc-c/mount")
	mk("pods/both/volumes/kubernetes.io~aaa/pvc-c")
	mk("pods/linked/volumes/kubernetes.io~csi")
	mk("host-dir/mount")
	mustOK(t, os.Symlink(filepath.Join(root, "host-dir"), filepath.Join(root, "pods/linked/volumes/kubernetes.io~csi/pvc-d")))
	r := Root{Path: root, Configured: root}
	for _, tc := range []struct {
		name, pod, pv string
		want          string
		wantErr       error
	}{
		{"csi", "csi-pod", "pvc-a", "pods/csi-pod/volumes/kubernetes.io~csi/pvc-a/mount", nil},
		{"other plugin", "local-pod", "pv-local", "pods/local-pod/volumes/kubernetes.io~local-volume/pv-local", nil},
		{"csi before other plugins", "both", "pvc-c", "pods/both/volumes/kubernetes.io~csi/pvc-c/mount", nil},
		{"absent volume", "csi-pod", "pvc-x", "", ErrNotPublished},
		{"absent pod", "no-such-pod", "pvc-a", "", ErrNotPublished},
		{"csi dir without mount", "unpublished", "pvc-b", "", ErrNotPublished},
		{"symlinked volume dir", "linked", "pvc-d", "", isolation.ErrUnsafePath},
		{"pod uid with slash", "csi-pod/../x", "pvc-a", "", isolation.ErrUnsafePath},
		{"pv name dot-dot", "csi-pod", "..", "", isolation.ErrUnsafePath},
		{"empty pv name", "csi-pod", "", "", isolation.ErrUnsafePath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindPublished(r, tc.pod, tc.pv)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("FindPublished(%q, %q) = %q, %v; want %v", tc.pod, tc.pv, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("FindPublished(%q, %q) = %q, %v; want %q", tc.pod, tc.pv, got, err, tc.want)
			}
		})
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
