// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/test/csiplugin"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

const mib = 1 << 20

// TestHotplugOnRealNode runs issue #12's scenarios 1 to 4 in order on one
// VMI: the seed case, the block volume under runc's own device rules, the
// replacement of the attachment pod, and a resize after it.
func TestHotplugOnRealNode(t *testing.T) {
	e := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	e.agent(t, ctx)
	v := e.newVM(t, ctx, "hotplug", "vm1")
	fs := v.addVolume(t, ctx, "fs", "xfs", 320*mib)
	blk := v.addVolume(t, ctx, "blk", "", 64*mib)

	if !t.Run("seed", func(t *testing.T) {
		began := time.Now()
		v.attach(t, ctx, []simnode.Volume{fs, blk}, []simnode.Volume{fs, blk})
		v.apply(t, ctx)
		for _, vol := range []simnode.Volume{fs, blk} {
			v.waitReadWrite(t, ctx, vol, "seed-"+vol.Name)
		}
		t.Logf("both volumes read and written by the launcher container %v after the attachment pod was created", time.Since(began).Round(time.Millisecond))
	}) {
		return
	}
	t.Run("block-rules-survive-runc-update", func(t *testing.T) { v.runcUpdate(t, ctx, blk) })
	var fs2 simnode.Volume
	if !t.Run("replacement", func(t *testing.T) {
		fs2 = v.addVolume(t, ctx, "fs2", "xfs", 320*mib)
		old := v.pods[fs.Name]
		next := v.attach(t, ctx, []simnode.Volume{fs, blk, fs2}, []simnode.Volume{fs2})
		v.pods[fs.Name], v.pods[blk.Name] = next, next
		v.apply(t, ctx)
		if err := e.kube.CoreV1().Pods(v.ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, vol := range []simnode.Volume{fs, blk} {
			v.waitCall(t, ctx, "NodeUnpublishVolume", vol, string(old.UID))
			v.waitCall(t, ctx, "NodeUnstageVolume", vol, "")
		}
		v.waitReadWrite(t, ctx, fs2, "new-fs2")
		if got := v.read(t, ctx, fs, len("seed-fs")); got != "seed-fs" {
			t.Errorf("after the replacement the launcher reads %q from %s, want %q", got, fs.Name, "seed-fs")
		}
		// Nothing holds a block volume's device once the kubelet unstaged
		// it: the plugin detached the loop device, and hpmount's node names
		// a device with no backing (reads return nothing). Observed, not
		// asserted: it is the driver's unstage, not hpmount's doing.
		t.Logf("after the replacement the launcher reads %q from the unstaged block volume", v.read(t, ctx, blk, len("seed-blk")))
	}) {
		return
	}
	t.Run("resize-after-replacement", func(t *testing.T) { v.resize(t, ctx, fs, fs2) })
}

// waitReadWrite waits until the launcher container can write pattern at
// the start of the volume's target and read it back.
func (v *vm) waitReadWrite(t *testing.T, ctx context.Context, vol simnode.Volume, pattern string) {
	t.Helper()
	script := fmt.Sprintf(`printf %%s %q | dd of=%s conv=notrunc,fsync 2>/dev/null && dd if=%s bs=%d count=1 2>/dev/null`,
		pattern, target(vol), target(vol), len(pattern))
	var last string
	err := harness.Eventually(ctx, "launcher reads and writes "+vol.Name, harness.WaitTimeout, func() error {
		out, err := v.exec(ctx, script)
		last = out
		if err != nil {
			return err
		}
		if out != pattern {
			return fmt.Errorf("read %q back, want %q", out, pattern)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v (last output %q)\nagent:\n%s", err, last, tail(v.e.agentLog(ctx), 30))
	}
}

// read returns the first n bytes of the volume as the launcher reads them.
func (v *vm) read(t *testing.T, ctx context.Context, vol simnode.Volume, n int) string {
	t.Helper()
	out, err := v.exec(ctx, fmt.Sprintf("dd if=%s bs=%d count=1 2>/dev/null", target(vol), n))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitCall waits until the CSI plugin logged method for the volume, with a
// target path containing podUID when it is not empty.
func (v *vm) waitCall(t *testing.T, ctx context.Context, method string, vol simnode.Volume, podUID string) {
	t.Helper()
	err := harness.Eventually(ctx, method+" of "+vol.Name, 2*time.Minute, func() error {
		calls, err := v.e.node.Calls()
		if err != nil {
			return err
		}
		if slices.ContainsFunc(calls, func(c csiplugin.Call) bool {
			return c.Method == method && c.VolumeID == vol.PV && c.Error == "" && strings.Contains(c.TargetPath, podUID)
		}) {
			return nil
		}
		return fmt.Errorf("no %s of %s yet", method, vol.PV)
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, v.e.node.Logs(20))
	}
}

// runcUpdate runs `runc update` on the launcher's compute container, which
// rewrites its device cgroup from runc's own config, and checks the
// container opens the hotplugged block node again (at once, or after the
// agent's next resync repaired the rule).
func (v *vm) runcUpdate(t *testing.T, ctx context.Context, blk simnode.Volume) {
	pod, err := v.e.kube.CoreV1().Pods(v.ns).Get(ctx, v.launcher.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	root := filepath.Join(v.e.node.Dir, "containerd", "runc", "k8s.io")
	cg := filepath.Join("/sys/fs/cgroup/devices", v.e.node.CgroupRoot, "kubepods", "besteffort", "pod"+string(pod.UID), id, "devices.list")
	before := readFile(t, cg)
	out, err := exec.CommandContext(ctx, "runc", "--root", root, "update", "--pids-limit", "1000", id).CombinedOutput()
	if err != nil {
		t.Fatalf("runc update %s: %v: %s", id, err, out)
	}
	after := readFile(t, cg)
	t.Logf("compute's devices.list: %d rules before runc update, %d after", len(strings.Fields(before))/3, len(strings.Fields(after))/3)
	if _, err := v.exec(ctx, "dd if="+target(blk)+" of=/dev/null bs=512 count=1 2>&1"); err != nil {
		t.Logf("right after runc update the container cannot read the block node (%v); waiting for the resync", err)
	} else {
		t.Log("the rule survived runc update")
	}
	v.waitReadWrite(t, ctx, blk, "after-runc-update")
}

// resize grows the replaced volume fs and the still-published fs2 by the
// storage's side (backing file and loop capacity), writes the PV and claim
// as the resize controller does, and checks that the kubelet expands only
// fs2 while hpmount grows fs, seen by df in the launcher container.
func (v *vm) resize(t *testing.T, ctx context.Context, fs, fs2 simnode.Volume) {
	const grown = 480 * mib
	sizeBefore := v.dfKiB(t, ctx, fs)
	for _, vol := range []simnode.Volume{fs, fs2} {
		if err := csiplugin.GrowBackingFile(v.backing(vol), grown); err != nil {
			t.Fatal(err)
		}
		v.requestExpansion(t, ctx, vol, grown)
	}
	for i := range v.vols {
		if v.vols[i].Name == fs.Name || v.vols[i].Name == fs2.Name {
			v.vols[i].Capacity = simnode.Mi(grown / mib)
		}
	}
	v.apply(t, ctx)
	v.waitCall(t, ctx, "NodeExpandVolume", fs2, "")
	err := harness.Eventually(ctx, "fs grown in the launcher", 2*time.Minute, func() error {
		if now := v.dfKiB(t, ctx, fs); now <= sizeBefore+(grown-320*mib)/1024/2 {
			return fmt.Errorf("df says %d KiB, was %d", now, sizeBefore)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nagent:\n%s", err, tail(v.e.agentLog(ctx), 30))
	}
	calls, err := v.e.node.Calls()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if c.Method == "NodeExpandVolume" && c.VolumeID == fs.PV {
			t.Errorf("the kubelet called NodeExpandVolume for the replaced volume %s: %+v", fs.PV, c)
		}
	}
	t.Logf("launcher's df of %s: %d KiB before, %d KiB after", target(fs), sizeBefore, v.dfKiB(t, ctx, fs))
}

// requestExpansion writes what the external resizer would: the PV's new
// capacity and the claim's status asking the node to finish
// (allocatedResources, allocatedResourceStatuses NodeResizePending).
func (v *vm) requestExpansion(t *testing.T, ctx context.Context, vol simnode.Volume, size int64) {
	t.Helper()
	q := *resource.NewQuantity(size, resource.BinarySI)
	pv, err := v.e.kube.CoreV1().PersistentVolumes().Get(ctx, vol.PV, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[corev1.ResourceStorage] = q
	if _, err := v.e.kube.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The claim's request stays: the PersistentVolumeClaimResize admission
	// plugin refuses a larger request on a claim without a resizable
	// StorageClass, and the kubelet reads only the status and the PV.
	v.setClaimStatus(t, ctx, vol, func(st *corev1.PersistentVolumeClaimStatus) {
		st.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: q}
		st.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
			corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending,
		}
	})
}

// dfKiB is the size of the filesystem holding the volume's target, as df
// in the launcher container reports it.
func (v *vm) dfKiB(t *testing.T, ctx context.Context, vol simnode.Volume) int64 {
	t.Helper()
	out, err := v.exec(ctx, "df -k "+target(vol)+" | tail -n 1")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("df output %q", out)
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("df output %q: %v", out, err)
	}
	return n
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %q: %v", path, err)
	}
	return string(out)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
