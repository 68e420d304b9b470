// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

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

// TestOpenPublishedDeviceUnderALinkedRoot: the kubelet writes the
// volumeDevices link with the root as configured (/var/lib/kubelet), which
// is a link to where the root really is (/data/kubelet). Both spellings are
// inside the root; anything else is still refused.
func TestOpenPublishedDeviceUnderALinkedRoot(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	mustOK(t, err)
	real := filepath.Join(dir, "data", "kubelet")
	configured := filepath.Join(dir, "var-lib-kubelet")
	mustOK(t, os.MkdirAll(real, 0o755))
	mustOK(t, os.Symlink(real, configured))
	r, err := ResolveRoot(nil, configured)
	mustOK(t, err)

	for _, pv := range []string{"pv-1", "pv-2"} {
		publish := CSIPublishFile(pv, "pod-a")
		mustOK(t, os.MkdirAll(filepath.Join(real, filepath.Dir(publish)), 0o755))
		mustOK(t, os.WriteFile(filepath.Join(real, publish), nil, 0o644))
	}
	mustOK(t, os.WriteFile(filepath.Join(dir, "host-disk"), nil, 0o644))
	devices := filepath.Join(real, VolumeDevicesDir("pod-a"), "kubernetes.io~csi")
	mustOK(t, os.MkdirAll(devices, 0o755))
	for name, target := range map[string]string{
		"pv-1":       filepath.Join(configured, CSIPublishFile("pv-1", "pod-a")), // as the kubelet writes it
		"pv-2":       filepath.Join(real, CSIPublishFile("pv-2", "pod-a")),       // resolved spelling
		"pv-outside": filepath.Join(dir, "host-disk"),
	} {
		mustOK(t, os.Symlink(target, filepath.Join(devices, name)))
	}
	for pv, ok := range map[string]bool{"pv-1": true, "pv-2": true, "pv-outside": false} {
		f, err := OpenPublishedDevice(r, "pod-a", pv)
		if ok {
			if err != nil {
				t.Errorf("%s: %v", pv, err)
				continue
			}
			f.Close()
			continue
		}
		if !errors.Is(err, isolation.ErrUnsafePath) {
			t.Errorf("%s: err = %v, want an unsafe-path refusal", pv, err)
		}
		if f != nil {
			f.Close()
		}
	}
}

// TestOpenPublishedDeviceRefusesForeignLinks: the volumeDevices entry of a
// block volume must be the kubelet's link to this PV's publish file for this
// pod. A link someone else made, even one that stays inside the kubelet
// root, is refused before anything is opened: to another PV's or another
// pod's publish file (another tenant's disk), to a pod's volume directory,
// relative, with "..", to a host device; a link to the right file is
// opened.
func TestOpenPublishedDeviceRefusesForeignLinks(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	mustOK(t, err)
	r := Root{Path: root, Configured: root}
	for _, f := range []string{CSIPublishFile("pv-1", "pod-a"), CSIPublishFile("pv-other", "pod-a"), CSIPublishFile("pv-1", "pod-b"), "pods/pod-b/volumes/disk"} {
		mustOK(t, os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755))
		mustOK(t, os.WriteFile(filepath.Join(root, f), nil, 0o644))
	}
	devices := filepath.Join(root, VolumeDevicesDir("pod-a"), "kubernetes.io~csi")
	mustOK(t, os.MkdirAll(devices, 0o755))
	publish := filepath.Join(root, CSIPublishFile("pv-1", "pod-a"))
	for _, tc := range []struct {
		name, target string
		ok           bool
	}{
		{"the kubelet's link", publish, true},
		{"another PV's publish file", filepath.Join(root, CSIPublishFile("pv-other", "pod-a")), false},
		{"another pod's publish file", filepath.Join(root, CSIPublishFile("pv-1", "pod-b")), false},
		{"a file of another pod", filepath.Join(root, "pods/pod-b/volumes/disk"), false},
		{"relative", "../../../../" + CSIPublishFile("pv-1", "pod-a"), false},
		{"dot-dot inside the root", filepath.Join(root, "pods") + "/../" + CSIPublishFile("pv-1", "pod-a"), true},
		{"the publish directory", filepath.Dir(publish), false},
		{"a host device", "/dev/null", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := filepath.Join(devices, "pv-1")
			_ = os.Remove(link)
			mustOK(t, os.Symlink(tc.target, link))
			f, err := OpenPublishedDevice(r, "pod-a", "pv-1")
			if f != nil {
				defer f.Close()
			}
			if tc.ok != (err == nil) {
				t.Fatalf("link to %q: err = %v, want ok=%t", tc.target, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, isolation.ErrUnsafePath) {
				t.Fatalf("link to %q: err = %v, want an unsafe-path refusal", tc.target, err)
			}
		})
	}
}
