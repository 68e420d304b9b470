// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/outcome"
	"github.com/hpmount/hpmount/test/qemu"
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

// TestAttachKeepsQEMUsDisk is TestAttachKeepsTheBindBeneath with a real
// QEMU, as 107, holding the volume through the top of the two binds (it
// opened the target while virt-handler's bind was on top). Across the
// repair its disk goes on reading and writing disk.img on the volume, and
// the target, opened afresh, is that same file.
func TestAttachKeepsQEMUsDisk(t *testing.T) {
	n := newNode(t, "ext4")
	disk, target := n.path(hpVolDir, "disk.img"), n.path(launchDir, "qemu.img")
	must(t, os.Chown(disk, 107, 107))
	// QEMU's user walks to the target as the launcher's would.
	for _, d := range []string{filepath.Dir(n.base), n.base} {
		must(t, os.Chmod(d, 0o755))
	}
	must(t, os.WriteFile(target, nil, 0o600))
	must(t, unix.Mount(disk, target, "", unix.MS_BIND, ""))
	must(t, unix.Mount("", target, "", unix.MS_PRIVATE, ""))
	must(t, unix.Mount(disk, target, "", unix.MS_BIND, ""))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, err := qemu.Start(ctx, qemu.Options{RootPorts: 1, UID: 107, GID: 107})
	must(t, err)
	defer q.Kill()
	must(t, q.BlockdevAdd(ctx, "vol", qemu.File{Path: target, Direct: true}))
	must(t, q.DeviceAdd(ctx, "disk-vol", "vol", "rp1"))
	must(t, q.WritePattern(ctx, "disk-vol", 0x5a, 0, 1<<20))

	if res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "qemu.img"); err != nil || res != outcome.Replaced {
		t.Fatalf("attach: %v %v, want %v; qemu: %s", res, err, outcome.Replaced, q.Stderr())
	}
	n.wantSingleBind(t, "qemu")
	must(t, q.WritePattern(ctx, "disk-vol", 0x5b, 1<<20, 1<<20))
	must(t, q.ReadPattern(ctx, "disk-vol", 0x5a, 0, 1<<20))
	for _, path := range []string{disk, target} {
		b := make([]byte, 2<<20)
		f, err := os.Open(path)
		must(t, err)
		_, err = f.ReadAt(b, 0)
		f.Close()
		must(t, err)
		if !bytes.Equal(b[:1<<20], bytes.Repeat([]byte{0x5a}, 1<<20)) || !bytes.Equal(b[1<<20:], bytes.Repeat([]byte{0x5b}, 1<<20)) {
			t.Fatalf("%s does not hold what QEMU wrote before and after the repair", path)
		}
	}
}
