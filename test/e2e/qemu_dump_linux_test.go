// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hpmount/hpmount/test/qemu"
)

// TestQEMUMemoryDump is issue 21's scenario 8: QEMU, as the launcher's,
// writes a memory dump (dump-guest-memory, which opens the file itself as
// uid 107 in the launcher's mount namespace) into the memory-dump volume
// the agent bound as a directory, and the dump lands in the PVC.
func TestQEMUMemoryDump(t *testing.T) {
	e := newEnv(t)
	v := e.newVM("tenant-q", "qemu-d")
	// applyShaped makes the volume named "dump" a memoryDump volume.
	dump := v.addVolume("dump", "ext4", 64<<20)
	hp := v.newAttachmentPod(dump)
	e.must(os.Remove(filepath.Join(e.node.CSIMountDir(string(hp.UID), dump.PV), "disk.img")))
	e.applyShaped(v)
	target := v.L.Path(dump.Name)
	e.eventually("directory bind of dump", 30*time.Second, func() error { return dirBound(target) })

	q, err := qemu.Start(e.ctx, qemu.Options{MountNamespaceOf: v.L.Pid, UID: 107, GID: 107,
		Cgroups: []string{v.L.Cgroup}, MemoryMiB: 16, RootPorts: 1})
	e.must(err)
	t.Cleanup(q.Kill)
	file := filepath.Join(v.L.ContainerPath(dump.Name), "vm.memory.dump")
	if err := q.DumpGuestMemory(e.ctx, file); err != nil {
		t.Fatalf("dump-guest-memory into %s: %v", file, err)
	}
	got := readOnDevice(t, v.Disks[dump.Name], "vm.memory.dump")
	if len(got) < 16<<20 || !strings.HasPrefix(got, "\x7fELF") {
		t.Fatalf("the PVC holds %d bytes starting %q, want QEMU's ELF dump of 16 MiB", len(got), got[:min(len(got), 4)])
	}
}
