// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"os"
	"os/exec"
	"testing"

	"github.com/hpmount/hpmount/outcome"
)

// BenchmarkBind compares one bind of disk.img onto a launcher's target and
// its removal, with raw syscalls (Attach, Detach: open_tree/move_mount on
// fds, umount2, unlink) and with an exec of mount(8) and umount(8).
func BenchmarkBind(b *testing.B) {
	n := newNode(b, "ext4")
	b.Run("raw", func(b *testing.B) {
		tbl := hostTable(b)
		b.ReportAllocs()
		for b.Loop() {
			if res, err := n.a.Attach(tbl, hpVolDir, launchDir, "bench.img"); err != nil || res != outcome.Mounted {
				b.Fatalf("attach: %v %v", res, err)
			}
			if res, err := n.a.Detach(tbl, launchDir, "bench.img"); err != nil || res != outcome.Removed {
				b.Fatalf("detach: %v %v", res, err)
			}
		}
	})
	b.Run("exec", func(b *testing.B) {
		src, dst := n.path(hpVolDir, "disk.img"), n.path(launchDir, "bench.img")
		b.ReportAllocs()
		for b.Loop() {
			must(b, os.WriteFile(dst, nil, 0o644))
			if out, err := exec.Command("mount", "--bind", src, dst).CombinedOutput(); err != nil {
				b.Fatalf("mount --bind: %v %s", err, out)
			}
			if out, err := exec.Command("umount", dst).CombinedOutput(); err != nil {
				b.Fatalf("umount: %v %s", err, out)
			}
			must(b, os.Remove(dst))
		}
	})
}
