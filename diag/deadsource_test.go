// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// TestJudgeDeadSource: an inspection that failed because the volume's
// filesystem is gone gets its own verdict and hint, and so does one that
// got no answer in time (stuck); any other failure stays an error of
// diag's own.
func TestJudgeDeadSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Verdict
	}{
		{"shut down xfs", fmt.Errorf("stat %q: %w", "mount", unix.EIO), DeadSource},
		{"stale NFS handle", fmt.Errorf("open: %w", unix.ESTALE), DeadSource},
		{"device gone", unix.ENODEV, DeadSource},
		{"no permission", fmt.Errorf("open: %w", unix.EACCES), Error},
		{"other", errString("boom"), Error},
		{"abandoned in the host namespace", fmt.Errorf("mount namespace %q: %w: abandoned after 1s", "/proc/1/ns/mnt", isolation.ErrStuck), Stuck},
		{"abandoned outside it", fmt.Errorf("read what QEMU holds: %w after 1s", errStuck), Stuck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v Volume
			judge(&v, &findings{err: tc.err})
			if v.Verdict != tc.want || v.Hint == "" || v.Detail != tc.err.Error() {
				t.Fatalf("verdict %s hint %q detail %q; want %s with a hint and the error", v.Verdict, v.Hint, v.Detail, tc.want)
			}
		})
	}
}
