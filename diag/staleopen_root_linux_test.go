// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/test/simnode"
)

// playQEMU starts, in the launcher's mount namespace and pod cgroup, a
// process named qemu-kvm that mounts hotplug-disks where KubeVirt's compute
// container does and holds the given entries open, as QEMU holds its disks.
// l is started before any device rule is granted: starting a launcher
// resets its cgroup's rules.
func (e *env) playQEMU(l *simnode.Launcher, m *vm, names ...string) {
	e.t.Helper()
	bin := filepath.Join(e.t.TempDir(), "qemu-kvm")
	sleep, err := os.ReadFile("/bin/sleep")
	e.must(err)
	e.must(os.WriteFile(bin, sleep, 0o755))
	var opens []string
	for i, n := range names {
		opens = append(opens, fmt.Sprintf("%d<%s/%s", i+3, kubevirt.HotplugDisksMountPath, n))
	}
	out, err := l.Exec("mount -t tmpfs qemu-run /run && mkdir -p " + kubevirt.HotplugDisksMountPath +
		" && mount --rbind " + e.node.Path(m.targetDir) + " " + kubevirt.HotplugDisksMountPath +
		" && { sh -c 'exec " + strings.Join(opens, " ") + "; exec " + bin + " infinity' </dev/null >/dev/null 2>&1 & echo $!; }")
	e.must(err)
	pid, err := strconv.Atoi(out)
	e.must(err)
	e.t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
}

// TestStaleOpen plays harvester#11208: after a storage re-attach the volume
// is published on a new device and hpmount's bind (or node) follows it,
// while QEMU still holds the old one. diag tells no QEMU, a held volume, a
// volume QEMU has not opened, and both kinds of stale-open.
func TestStaleOpen(t *testing.T) {
	e := newEnv(t)
	e.must(e.ctl.EnsureNamespace(e.ctx, "default"))
	m := e.addVM("qemu", fsVol("fsq"), blockVol("blkq"), fsVol("idleq"))
	qemu, err := e.node.StartLauncher(string(m.launcher))
	e.must(err)
	e.attachFS(m, "fsq", "pv-fsq", e.disk("fsq-a", "ext4", 32<<20), true)
	e.attachFS(m, "idleq", "pv-idleq", e.disk("idleq", "ext4", 32<<20), true)
	r1 := e.disk("blkq-1", "", 16<<20)
	e.must(e.node.PublishBlock(string(m.attach), "pv-blkq", r1))
	e.mknod(m, "blkq", r1, true)
	o := e.opts()
	o.VMIs = []string{"qemu"}

	_, vols := e.run(o)
	for _, n := range []string{"fsq", "blkq"} {
		if v := vols[n]; v.Verdict != OK || v.QEMU != "no QEMU found" {
			t.Errorf("before QEMU runs, %s: verdict %q qemu %q (%s)", n, v.Verdict, v.QEMU, v.Detail)
		}
	}

	e.playQEMU(qemu, m, "fsq.img", "blkq")
	_, vols = e.run(o)
	for n, want := range map[string]Verdict{"fsq": OK, "blkq": OK, "idleq": NotOpen} {
		if v := vols[n]; v.Verdict != want {
			t.Errorf("QEMU holding fsq and blkq, %s: verdict %q want %q qemu %q (%s)", n, v.Verdict, want, v.QEMU, v.Detail)
		}
	}

	// Re-publish both on new devices while QEMU holds the old ones.
	target := e.node.Path(m.targetDir, "fsq.img")
	e.must(unix.Unmount(target, unix.MNT_DETACH))
	e.must(e.node.UnpublishFilesystem(string(m.attach), "pv-fsq"))
	rel := e.attachFS(m, "fsq", "pv-fsq", e.disk("fsq-b", "ext4", 32<<20), false)
	_, err = (&mount.Attacher{KubeletRoot: e.node.KubeletRoot}).Attach(e.table(), rel, m.targetDir, kubelet.TargetName("fsq"))
	e.must(err)
	r2 := e.disk("blkq-2", "", 16<<20)
	e.must(e.node.UnpublishBlock(string(m.attach), "pv-blkq"))
	e.must(e.node.PublishBlock(string(m.attach), "pv-blkq", r2))
	e.mknod(m, "blkq", r2, true)

	// The block node was recreated on the new device: QEMU's descriptor
	// still names it (deleted) and holds the old device: stale-open. The
	// file bind was lazily detached under QEMU's descriptor, which then
	// reads "/": QEMU does not hold the current disk.img, and only the
	// agent, which saw the former bind, can tie that descriptor to fsq
	// (engine.TestObserveStaleOpenFile). diag says not-open, naming the
	// descriptor on a detached mount without claiming it is fsq's.
	_, vols = e.run(o)
	if v := vols["blkq"]; v.Verdict != StaleOpen || v.QEMU != string(StaleOpen) || !strings.Contains(v.Hint, "QEMU") || !strings.Contains(v.Detail, "holds") {
		t.Errorf("after re-publishing, blkq: verdict %q qemu %q hint %q detail %q", v.Verdict, v.QEMU, v.Hint, v.Detail)
	}
	if v := vols["fsq"]; v.Verdict != NotOpen || !strings.Contains(v.QEMUDetail, "fd 3 (") || !strings.Contains(v.QEMUDetail, "detached mounts") {
		t.Errorf("after re-publishing, fsq: verdict %q qemu %q detail %q", v.Verdict, v.QEMU, v.QEMUDetail)
	}
}
