// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

// TestOpenBeneathDeadFilesystem: on a filesystem that answers only I/O
// errors (xfs shut down, as when its device is gone) an O_PATH open
// succeeds and its fstat fails. That is an I/O error to report, never a
// refusal of unsafe tenant content.
func TestOpenBeneathDeadFilesystem(t *testing.T) {
	testutil.RequiresRoot(t)
	base := t.TempDir()
	mnt := filepath.Join(base, "mount")
	must(t, os.Mkdir(mnt, 0o755))
	testutil.NewFilesystem(t, "xfs", testutil.MinXFSSize, mnt)
	must(t, os.WriteFile(filepath.Join(mnt, "disk.img"), nil, 0o644))
	testutil.Run(t, "xfs_io", "-x", "-c", "shutdown", mnt)
	r, err := OpenRoot(base)
	must(t, err)
	defer r.Close()
	for _, rel := range []string{"mount", "mount/disk.img"} {
		f, err := OpenBeneath(r, rel, How{Flags: unix.O_PATH})
		if err == nil {
			f.Close()
			t.Fatalf("%s: opened a path on a dead filesystem", rel)
		}
		if errors.Is(err, ErrUnsafePath) || !errors.Is(err, unix.EIO) {
			t.Fatalf("%s: %v, want EIO and no refusal", rel, err)
		}
	}
}
