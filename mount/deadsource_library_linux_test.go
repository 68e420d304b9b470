// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"
)

// TestDeadSourceAgainstMountUtils is why DeadSource is hpmount's own rule
// and not k8s.io/mount-utils' IsCorruptedMnt, which the design named: the
// two agree on the errnos of a filesystem that is gone, and differ where
// the library would make hpmount wrong. A row that starts to agree (a new
// mount-utils) is the moment to switch to the library.
func TestDeadSourceAgainstMountUtils(t *testing.T) {
	pathErr := func(e unix.Errno) error { return &os.PathError{Op: "stat", Path: "/x/disk.img", Err: e} }
	wrapped := func(e unix.Errno) error { return fmt.Errorf("stat target %q: %w", "/x/v.img", pathErr(e)) }
	tests := []struct {
		name      string
		err       error
		dead, lib bool
		why       string
	}{
		{"EIO", pathErr(unix.EIO), true, true, "both: shut down after an error"},
		{"ESTALE", pathErr(unix.ESTALE), true, true, "both: NFS handle of a gone export"},
		{"ENOTCONN", pathErr(unix.ENOTCONN), true, true, "both: FUSE daemon gone"},
		{"EHOSTDOWN", pathErr(unix.EHOSTDOWN), true, true, "both: storage server gone"},
		{"ENODEV", pathErr(unix.ENODEV), true, true, "both: device removed"},
		{"ENXIO", pathErr(unix.ENXIO), true, false, "a detached loop or removed disk answers ENXIO: the library keeps waiting on a dead volume"},
		{"EACCES", pathErr(unix.EACCES), false, true, "a permission refusal is not a dead filesystem: the library would report a healthy volume dead"},
		{"EAGAIN", pathErr(unix.EAGAIN), false, true, "transient (xfs growth answers EAGAIN to a racing resizer): the library would stop retrying"},
		{"wrapped EIO", wrapped(unix.EIO), true, false, "the engine wraps errors with %w; the library looks only at the outermost error's type"},
		{"ENOENT", pathErr(unix.ENOENT), false, false, "a missing file is not-mounted, not dead"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DeadSource(tc.err); got != tc.dead {
				t.Errorf("DeadSource = %v, want %v (%s)", got, tc.dead, tc.why)
			}
			if got := mountutils.IsCorruptedMnt(tc.err); got != tc.lib {
				t.Errorf("mount-utils IsCorruptedMnt = %v, was %v when this table was written (%s): look again at using the library", got, tc.lib, tc.why)
			}
		})
	}
}
