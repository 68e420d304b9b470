// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/test/harness"
)

// TestQEMUStaleOpen is issue 21's scenario 5 (harvester#11208): storage
// re-attaches a block volume on a new device under a running QEMU. The
// agent moves the launcher's node to the new device; QEMU's descriptor
// still reaches the old one, which QEMU's own writes show; the agent
// reports stale-open from QEMU's real descriptors and diag names QEMU's
// pid and the file.
func TestQEMUStaleOpen(t *testing.T) {
	e := newEnv(t)
	v := e.newVM("tenant-q", "qemu-c")
	raw := v.addVolume("raw", "", 32<<20)
	v.newAttachmentPod(raw)
	v.apply()
	v.waitNode(raw)
	q := v.startQEMU()
	v.plug(t, q, raw, "rp1")
	v.qemuRoundTrip(t, q, raw, 0x5a, 1<<20)
	old := v.Disks[raw.Name]

	e.step("5 re-attach on a new device: QEMU still writes to the old one", func(t *testing.T) {
		moved, err := e.node.NewDisk(v.Name+"-raw-reattached", "", 32<<20)
		e.must(err)
		pod := string(v.Attach[raw.Name])
		e.must(e.node.UnpublishBlock(pod, raw.PV))
		e.must(e.node.PublishBlock(pod, raw.PV, moved))
		v.Disks[raw.Name] = moved
		_, minor, err := moved.Rdev()
		e.must(err)
		e.eventually("node follows the new device", 30*time.Second, func() error {
			var st unix.Stat_t
			if err := unix.Stat(v.Target(raw), &st); err != nil {
				return err
			}
			if unix.Minor(st.Rdev) != minor {
				return fmt.Errorf("node is %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
			}
			return nil
		})
		if err := q.WritePattern(e.ctx, disk(raw), 0x6e, 2<<20, 1<<20); err != nil {
			t.Fatal(err)
		}
		want := string(bytes.Repeat([]byte{0x6e}, 1<<20))
		if got, where, err := harness.ReadSource(old, true, 2<<20, 1<<20); err != nil || got != want {
			t.Fatalf("QEMU's write is not on the old device %s (%v)", where, err)
		}
		if got, where, err := harness.ReadSource(moved, true, 2<<20, 1<<20); err != nil || got == want {
			t.Fatalf("QEMU's write reached the new device %s (%v)", where, err)
		}
	})

	e.step("5 the agent and diag report stale-open naming QEMU", func(t *testing.T) {
		e.waitEvent(v.NS, v.Name, "VolumeStaleOpen", raw.Name)
		rep := e.runDiag(t)
		for _, vol := range rep.Volumes {
			if vol.VMI != v.Name || vol.Volume != raw.Name {
				continue
			}
			t.Logf("diag: %s %s: %s", vol.Verdict, vol.QEMU, vol.QEMUDetail)
			if vol.Verdict != diag.StaleOpen || !strings.Contains(vol.QEMUDetail, strconv.Itoa(q.Pid)) ||
				!strings.Contains(vol.QEMUDetail, raw.Name) {
				t.Fatalf("diag says %s (%s: %s), want %s naming qemu pid %d and %s",
					vol.Verdict, vol.QEMU, vol.QEMUDetail, diag.StaleOpen, q.Pid, raw.Name)
			}
			return
		}
		t.Fatalf("diag has no %s/%s", v.Name, raw.Name)
	})
}
