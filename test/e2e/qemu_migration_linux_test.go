// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/test/qemu"
	"github.com/hpmount/hpmount/test/simnode"
)

// TestQEMUMigration is issue 21's scenario 7: a VM with a filesystem and
// a block volume live-migrates from node-1 to node-2, each node served by
// its own agent. The target launcher's QEMU (-incoming) opens the volumes
// node-2's agent made for it while the source still runs, a real QEMU
// migration hands them over, and the target reads through its own devices
// what the source wrote. The source's QEMU keeps its descriptors through
// the handoff and node-1's cleanup, until it stops.
func TestQEMUMigration(t *testing.T) {
	e := newEnv(t)
	nodeB, _ := e.startNode("node-2")
	v := e.newVM("tenant-q", "qemu-m")
	data := v.addVolume("data", "ext4", 64<<20)
	raw := v.addVolume("raw", "", 32<<20)
	v.newAttachmentPod(data, raw)
	v.apply()
	v.waitMounted(data)
	v.waitNode(raw)
	vols := []simnode.Volume{data, raw}
	opts := qemu.Options{MemoryMiB: 16, RootPorts: 2}
	src := e.launcherQEMU(v.L, opts)
	for i, vol := range vols {
		v.plug(t, src, vol, fmt.Sprintf("rp%d", i+1))
		v.qemuRoundTrip(t, src, vol, 0x5a, 1<<20)
	}
	srcUID := v.Launcher.UID

	e.step("7 the target QEMU opens the volumes node-2 made, the migration hands them over", func(t *testing.T) {
		m, err := v.StartMigration(e.ctx, nodeB)
		e.must(err)
		e.waitEvent(v.NS, v.Name, "MigrationTargetReady", "All 2 hotplug volumes")
		opts.Incoming = true
		dst := e.launcherQEMU(m.L, opts)
		for i, vol := range vols {
			plugFile(t, e, dst, vol, launcherFile(m.L, m.TargetPath(vol), vol.Block), fmt.Sprintf("rp%d", i+1))
		}
		dir, err := os.MkdirTemp("", "hpmount-migration-")
		e.must(err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		e.must(os.Chmod(dir, 0o777))
		uri := "unix:" + filepath.Join(dir, "migration.sock")
		e.must(dst.MigrateIncoming(e.ctx, uri))
		e.must(src.Migrate(e.ctx, uri))
		for _, vol := range vols {
			if err := dst.ReadPattern(e.ctx, disk(vol), 0x5a, 1<<20, 1<<20); err != nil {
				t.Fatalf("the target QEMU does not read what the source wrote: %v", err)
			}
		}
		held := heldFiles(t, src.Pid, vols)

		e.must(m.Complete(e.ctx))
		e.eventually("node-1 clean", 30*time.Second, func() error { return hotplugDirEmpty(e.node, string(srcUID)) })
		e.waitEvent(v.NS, v.Name, "MigrationSourceCleaned", "node-1")
		for _, vol := range vols {
			v.qemuRoundTrip(t, dst, vol, 0x6c, 2<<20)
		}
		// node-1's detach left the source's descriptors alone; they go
		// only when the source QEMU stops.
		assertStillHeld(t, held)
		src.Kill()
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", src.Pid)); !os.IsNotExist(err) {
			t.Fatalf("source QEMU %d still there: %v", src.Pid, err)
		}
	})
}

// heldFiles finds QEMU pid's descriptor on each volume's hotplug-disks
// entry (as its mount namespace names it) and what each reaches.
func heldFiles(t *testing.T, pid int, vols []simnode.Volume) map[string]fileID {
	t.Helper()
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]fileID{}
	for _, vol := range vols {
		name := vol.Name + ".img"
		if vol.Block {
			name = vol.Name
		}
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasSuffix(l, "hotplug-disks/"+name) {
				held[vol.Name] = statFD(t, fd)
			}
		}
		if _, ok := held[vol.Name]; !ok {
			t.Fatalf("QEMU %d holds no descriptor on %s", pid, name)
		}
	}
	return held
}

// fileID is a descriptor and the file it reaches.
type fileID struct {
	fd       string
	dev, ino uint64
}

func statFD(t *testing.T, fd string) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return fileID{fd: fd, dev: st.Dev, ino: st.Ino}
}

// assertStillHeld fails unless each descriptor is still open on the same
// file: a detached mount renames the link, not what it reaches.
func assertStillHeld(t *testing.T, held map[string]fileID) {
	t.Helper()
	for name, was := range held {
		if now := statFD(t, was.fd); now != was {
			t.Fatalf("%s: QEMU's %s now reaches %+v, was %+v", name, was.fd, now, was)
		}
	}
}
