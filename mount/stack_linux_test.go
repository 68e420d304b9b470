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
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/outcome"
	"github.com/hpmount/hpmount/test/qemu"
)

// TestAttachKeepsTheBindBeneath: two binds of the volume on one target, as
// when virt-handler binds between its look and hpmount's bind (the peer
// matrix's hpmount-inside order), with a file open through the top one, as
// QEMU opens the target virt-handler reported mounted. Attach unmounts the
// top alone: the bind beneath stays (the same mount, and before each
// change the target still held the volume), and the open file goes on
// writing the volume. Before, Attach peeled both and bound anew, and in
// between the target was an empty file, or an empty directory.
func TestAttachKeepsTheBindBeneath(t *testing.T) {
	for _, c := range []struct {
		name, source, held string
		mode               uint32
		attach             func(t *testing.T, n *node) (outcome.Result, error)
		single             func(n *node, t *testing.T) int
	}{
		{name: "two.img", source: "disk.img", held: "", mode: unix.S_IFREG,
			attach: func(t *testing.T, n *node) (outcome.Result, error) {
				return n.a.Attach(hostTable(t), hpVolDir, launchDir, "two.img")
			},
			single: func(n *node, t *testing.T) int { return n.wantSingleBind(t, "two") }},
		{name: "dump", source: "", held: "memory.dump", mode: unix.S_IFDIR,
			attach: func(t *testing.T, n *node) (outcome.Result, error) {
				return n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump")
			},
			single: func(n *node, t *testing.T) int { return n.wantSingleDirBind(t, "dump") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t, "ext4")
			source, target := n.path(hpVolDir, c.source), n.path(launchDir, c.name)
			if c.mode == unix.S_IFDIR {
				must(t, os.Mkdir(target, 0o750))
			} else {
				must(t, os.WriteFile(target, nil, 0o600))
			}
			// The first layer is private, as in TestAttachRepairsLeftovers,
			// so that the second does not propagate back onto the source.
			must(t, unix.Mount(source, target, "", unix.MS_BIND, ""))
			must(t, unix.Mount("", target, "", unix.MS_PRIVATE, ""))
			beneath := hostTable(t).At(target)[0].ID
			must(t, unix.Mount(source, target, "", unix.MS_BIND, ""))
			held, err := os.OpenFile(filepath.Join(target, c.held), os.O_RDWR|os.O_CREATE, 0o600)
			must(t, err)
			defer held.Close()

			// Before each change Attach makes, the target must still hold
			// a bind of the volume.
			var changes []string
			n.a.BeforeChange = func(step string) {
				changes = append(changes, fmt.Sprintf("%s (%d mounts on the target)", step, len(hostTable(t).At(target))))
			}
			res, err := c.attach(t, n)
			n.a.BeforeChange = nil
			if err != nil || res != outcome.Replaced {
				t.Fatalf("attach: %v %v, want %v", res, err, outcome.Replaced)
			}
			if len(changes) == 0 || changes[0] != "unmount (2 mounts on the target)" ||
				slices.ContainsFunc(changes[1:], func(c string) bool { return !strings.HasPrefix(c, "chown (1 ") }) {
				t.Fatalf("attach made the changes %q, want one unmount of the top, then at most an owner's fix", changes)
			}
			if id := c.single(n, t); id != beneath {
				t.Fatalf("the mount on the target is %d, want the one beneath, %d", id, beneath)
			}
			if _, err := held.WriteAt([]byte("qemu"), 0); err != nil {
				t.Fatalf("write through the file opened on the top bind: %v", err)
			}
			b, err := os.ReadFile(filepath.Join(n.path(hpVolDir), c.source, c.held))
			if err != nil || string(b[:4]) != "qemu" {
				t.Fatalf("the volume reads %q, %v; want what was written through the held file", b, err)
			}
			if res, err := c.attach(t, n); err != nil || res != outcome.Unchanged {
				t.Fatalf("attach again: %v %v, want %v", res, err, outcome.Unchanged)
			}
		})
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
