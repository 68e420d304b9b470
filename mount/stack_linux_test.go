// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/outcome"
)

// TestAttachKeepsTheBindBeneath: two binds of the volume's disk.img on one
// target, as when virt-handler binds between its look and hpmount's bind
// (the peer matrix's hpmount-inside order), with a file open through the
// top one, as QEMU opens the target virt-handler reported mounted. Attach
// unmounts the top alone: the bind beneath stays (the same mount, so the
// target never went without the volume), and the open file goes on
// reading and writing the volume's disk.img. Before, Attach peeled both
// and bound anew, and in between the target was an empty file.
func TestAttachKeepsTheBindBeneath(t *testing.T) {
	n := newNode(t, "ext4")
	disk, target := n.path(hpVolDir, "disk.img"), n.path(launchDir, "two.img")
	must(t, os.WriteFile(target, nil, 0o600))
	// The first layer is private, as in TestAttachRepairsLeftovers, so
	// that the second does not propagate back onto disk.img.
	must(t, unix.Mount(disk, target, "", unix.MS_BIND, ""))
	must(t, unix.Mount("", target, "", unix.MS_PRIVATE, ""))
	beneath := hostTable(t).At(target)[0].ID
	must(t, unix.Mount(disk, target, "", unix.MS_BIND, ""))
	held, err := os.OpenFile(target, os.O_RDWR, 0)
	must(t, err)
	defer held.Close()

	// Before each change Attach makes, the target must still hold a
	// bind of the volume.
	var changes []string
	n.a.BeforeChange = func(step string) {
		changes = append(changes, fmt.Sprintf("%s (%d mounts on the target)", step, len(hostTable(t).At(target))))
	}
	res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "two.img")
	n.a.BeforeChange = nil
	if err != nil || res != outcome.Replaced {
		t.Fatalf("attach: %v %v, want %v", res, err, outcome.Replaced)
	}
	if want := []string{"unmount (2 mounts on the target)", "chown (1 mounts on the target)"}; !slices.Equal(changes, want) {
		t.Fatalf("attach made the changes %q, want %q", changes, want)
	}
	if id := n.wantSingleBind(t, "two"); id != beneath {
		t.Fatalf("the mount on the target is %d, want the one beneath, %d", id, beneath)
	}
	if _, err := held.WriteAt([]byte("qemu"), 0); err != nil {
		t.Fatalf("write through the file opened on the top bind: %v", err)
	}
	b := make([]byte, 4)
	f, err := os.Open(disk)
	must(t, err)
	defer f.Close()
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "qemu" {
		t.Fatalf("disk.img reads %q, %v; want what was written through the held file", b, err)
	}
	if res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "two.img"); err != nil || res != outcome.Unchanged {
		t.Fatalf("attach again: %v %v, want %v", res, err, outcome.Unchanged)
	}
}
