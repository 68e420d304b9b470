// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"errors"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/mountinfo"
)

const (
	podsDir     = "/var/lib/kubelet/pods"
	hostHotplug = "/var/lib/kubelet/pods/9f8e7d6c-launcher/volumes/kubernetes.io~empty-dir/hotplug-disks"
	inLauncher  = "/var/run/kubevirt/hotplug-disks"
)

func table(t *testing.T, name string) *mountinfo.Table {
	t.Helper()
	tbl, err := mountinfo.ReadTable("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestCheckShared(t *testing.T) {
	for _, tc := range []struct {
		name, file, path string
		// wantMount and wantProp describe the NotSharedError; both empty
		// means the check passes.
		wantMount, wantProp string
		// wantText must appear in the message.
		wantText []string
	}{
		{"shared", "host-shared.mountinfo", podsDir, "", "", nil},
		{"private", "host-private.mountinfo", podsDir, "/var/lib/kubelet", "private",
			[]string{`mount --make-rshared /var/lib/kubelet`, "bind,rshared", "HostToContainer"}},
		{"private root", "host-private.mountinfo", "/srv/kubelet/pods", "/", "private",
			[]string{`mount --make-rshared /`, "MountFlags=shared"}},
		{"slave only", "host-slave.mountinfo", podsDir, "/var/lib/kubelet", "slave",
			[]string{"receiving from peer group 80", `mount --make-rshared /var/lib/kubelet`}},
		{"unbindable", "host-unbindable.mountinfo", podsDir, "/var/lib/kubelet", "unbindable",
			[]string{"cannot even be bind-mounted"}},
		{"private pods dir under a shared kubelet root", "host-nested.mountinfo", hostHotplug, "/var/lib/kubelet/pods", "private",
			[]string{`mount --make-rshared /var/lib/kubelet/pods`}},
		{"shared sibling of the nested mount", "host-nested.mountinfo", "/var/lib/kubelet/plugins", "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckShared(table(t, tc.file), tc.path)
			if tc.wantMount == "" {
				if err != nil {
					t.Fatalf("CheckShared(%q): %v", tc.path, err)
				}
				return
			}
			var ns *NotSharedError
			if !errors.As(err, &ns) {
				t.Fatalf("CheckShared(%q) = %v, want *NotSharedError", tc.path, err)
			}
			if ns.MountPoint != tc.wantMount || ns.Propagation != tc.wantProp || ns.Path != tc.path {
				t.Fatalf("got %+v, want mount %q propagation %q", ns, tc.wantMount, tc.wantProp)
			}
			for _, s := range append(tc.wantText, tc.wantMount, tc.wantProp, tc.path) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message lacks %q:\n%v", s, err)
				}
			}
		})
	}
}

func TestCheckSlaveOf(t *testing.T) {
	for _, tc := range []struct {
		name, hostFile, launcherFile string
		wantErr                      any
		wantText                     []string
	}{
		{"slave of the host group", "host-shared.mountinfo", "launcher-slave.mountinfo", nil, nil},
		{"peer of the host group", "host-shared.mountinfo", "launcher-peer.mountinfo", nil, nil},
		{"private launcher mount", "host-shared.mountinfo", "launcher-private.mountinfo", &NotSlaveError{},
			[]string{inLauncher, "private", "shared:80", "mountPropagation: HostToContainer", "recreate the launcher pod"}},
		{"slave of another group", "host-shared.mountinfo", "launcher-othermaster.mountinfo", &NotSlaveError{},
			[]string{"master:81", "peer group 81, not 80", "recreate the launcher pod"}},
		{"host not shared", "host-private.mountinfo", "launcher-private.mountinfo", &NotSharedError{},
			[]string{"mount --make-rshared /var/lib/kubelet"}},
		{"host pods dir private under shared root", "host-nested.mountinfo", "launcher-slave.mountinfo", &NotSharedError{},
			[]string{"mount --make-rshared /var/lib/kubelet/pods"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSlaveOf(table(t, tc.hostFile), table(t, tc.launcherFile), hostHotplug, inLauncher)
			switch tc.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("CheckSlaveOf: %v", err)
				}
				return
			case *NotSlaveError:
				var e *NotSlaveError
				if !errors.As(err, &e) {
					t.Fatalf("got %v, want *NotSlaveError", err)
				}
			case *NotSharedError:
				var e *NotSharedError
				if !errors.As(err, &e) {
					t.Fatalf("got %v, want *NotSharedError", err)
				}
			}
			for _, s := range tc.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message lacks %q:\n%v", s, err)
				}
			}
		})
	}
	if err := CheckSlaveOf(table(t, "host-shared.mountinfo"), mountinfo.NewTable(nil), hostHotplug, inLauncher); err == nil {
		t.Fatal("empty launcher table passed")
	}
}
