// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// TestDirectoryVolumesAndMissingDiskImage runs the real agent against one
// VMI with a memory-dump volume, a utility volume and a filesystem-mode PVC
// without disk.img: the first two are bound as directories the launcher
// writes into; the third fails with an Event naming what is missing and
// the flag until the agent is restarted with --create-disk-images, which
// creates the image the launcher then reads and writes.
func TestDirectoryVolumesAndMissingDiskImage(t *testing.T) {
	e := newEnv(t)
	v := e.newVM("tenant-d", "vmd")
	dump := v.addVolume("dump", "ext4", 64<<20)
	backup := v.addVolume("backup", "ext4", 64<<20)
	fresh := v.addVolume("fresh", "ext4", 64<<20)
	hp := v.newAttachmentPod(dump, backup, fresh)
	// Directory volumes never hold a disk.img; the fresh PVC was never
	// imported.
	for _, vol := range []simnodeVolume{dump, backup, fresh} {
		e.must(os.Remove(filepath.Join(e.node.CSIMountDir(string(hp.UID), vol.PV), "disk.img")))
	}
	e.applyShaped(v)

	e.step("memory-dump and utility volumes are directories the launcher writes into", func(t *testing.T) {
		for _, vol := range []simnodeVolume{dump, backup} {
			target := v.L.Path(vol.Name)
			e.eventually("directory bind of "+vol.Name, 30*time.Second, func() error { return dirBound(target) })
			content := "written-by-launcher-" + vol.Name
			if out, err := v.L.Exec(fmt.Sprintf("printf %%s %q > %q/out && sync", content, target)); err != nil {
				t.Fatalf("launcher write into %s: %v %s", vol.Name, err, out)
			}
			if got := readOnDevice(t, v.Disks[vol.Name], "out"); got != content {
				t.Fatalf("%s's PVC holds %q, want what the launcher wrote", vol.Name, got)
			}
			e.waitEvent(v.NS, v.Name, "VolumeMounted", "Volume "+vol.Name+" ")
		}
	})

	e.step("a PVC without disk.img fails naming what is missing and the flag", func(t *testing.T) {
		ev := e.waitEvent(v.NS, v.Name, "HotplugFailed", "--create-disk-images")
		if !strings.Contains(ev.Message, "fresh") || !strings.Contains(ev.Message, "no disk.img") {
			t.Fatalf("event %q does not name the volume and the missing disk.img", ev.Message)
		}
		if _, err := os.Lstat(filepath.Join(e.node.CSIMountDir(string(hp.UID), fresh.PV), "disk.img")); err == nil {
			t.Fatal("disk.img created without --create-disk-images")
		}
	})

	e.step("with --create-disk-images the image is created and the launcher uses it", func(t *testing.T) {
		e.must(e.agent.Cmd.Process.Signal(unix.SIGKILL))
		<-e.agent.Done()
		e.agentArgs = append(e.agentArgs, "--create-disk-images")
		e.startAgent()
		v.waitMounted(fresh)
		img := filepath.Join(e.node.CSIMountDir(string(hp.UID), fresh.PV), "disk.img")
		var st unix.Stat_t
		var sfs unix.Statfs_t
		e.must(unix.Lstat(img, &st))
		e.must(unix.Statfs(filepath.Dir(img), &sfs))
		want, err := mount.DiskImageSize(64<<20, 0.055, int64(sfs.Bavail)*sfs.Bsize, 0)
		e.must(err)
		switch {
		case st.Uid != 107 || st.Gid != 107:
			t.Fatalf("created disk.img owned by %d:%d, want 107:107", st.Uid, st.Gid)
		case st.Blocks*512 >= 1<<20:
			t.Fatalf("created disk.img allocates %d bytes, want a sparse file", st.Blocks*512)
		case st.Size%(1<<20) != 0 || st.Size < want-(1<<20) || st.Size > want:
			t.Fatalf("created disk.img is %d bytes, want %d by KubeVirt's rule", st.Size, want)
		}
		v.roundTrip(t, fresh, "read-through-created-image")
		e.waitEvent(v.NS, v.Name, "VolumeMounted", "Volume fresh has been mounted in virt-launcher pod (created)")
		// The directory volumes were adopted, not remounted.
		for _, vol := range []simnodeVolume{dump, backup} {
			e.must(dirBound(v.L.Path(vol.Name)))
		}
	})

	e.step("diag shows the directory volumes as ok, in mode dir", func(t *testing.T) {
		rep := e.diagAllOK(t)
		seen := 0
		for _, dv := range rep.Volumes {
			if dv.Volume != "dump" && dv.Volume != "backup" {
				continue
			}
			seen++
			if dv.Mode != "Directory" || dv.Verdict != diag.OK || dv.Target != v.L.Path(dv.Volume) || dv.Mount == nil || dv.Mount.FSRoot != "/" {
				t.Fatalf("diag %s: mode %s verdict %s target %s mount %+v (%s), want an ok Directory bind of the PVC's root", dv.Volume, dv.Mode, dv.Verdict, dv.Target, dv.Mount, dv.Detail)
			}
		}
		var table strings.Builder
		e.must(diag.Render(&table, rep, diag.FormatTable))
		if seen != 2 || !strings.Contains(table.String(), " dir ") {
			t.Fatalf("diag listed %d directory volumes; table:\n%s", seen, table.String())
		}
	})

	e.step("a utility volume that leaves the spec is unmounted and its directory removed", func(t *testing.T) {
		v.RemoveVolume("backup")
		e.applyShaped(v)
		e.eventually("backup directory gone", 30*time.Second, func() error {
			if _, err := os.Lstat(v.L.Path("backup")); err == nil {
				return fmt.Errorf("%s still exists", v.L.Path("backup"))
			}
			return nil
		})
		e.must(dirBound(v.L.Path("dump")))
		if got := readOnDevice(t, v.Disks["backup"], "out"); got != "written-by-launcher-backup" {
			t.Fatalf("backup's PVC lost the launcher's file: %q", got)
		}
	})
}

// applyShaped writes the VM as simnode renders it, with "dump" turned into
// a memory-dump volume and "backup" into a utility volume, as KubeVirt
// shapes them.
func (e *env) applyShaped(v *vm) {
	e.t.Helper()
	want := simnode.VMISpec{Namespace: v.NS, Name: v.Name, Node: v.Node.Name, Launcher: v.Launcher.UID,
		Attachment: v.Attach, Volumes: v.Vols}.Object()
	spec := want.Object["spec"].(map[string]any)
	var volumes, utility []any
	for _, x := range spec["volumes"].([]any) {
		sv := x.(map[string]any)
		switch sv["name"] {
		case "dump":
			sv["memoryDump"], sv["persistentVolumeClaim"] = sv["persistentVolumeClaim"], nil
			delete(sv, "persistentVolumeClaim")
		case "backup":
			pvc := sv["persistentVolumeClaim"].(map[string]any)
			utility = append(utility, map[string]any{"name": "backup", "claimName": pvc["claimName"], "type": "Backup"})
			continue
		}
		volumes = append(volumes, sv)
	}
	spec["volumes"], spec["utilityVolumes"] = volumes, utility
	statuses, _, _ := unstructured.NestedSlice(want.Object, "status", "volumeStatus")
	for _, x := range statuses {
		if st := x.(map[string]any); st["name"] == "dump" {
			st["memoryDumpVolume"] = map[string]any{"claimName": v.Vol("dump").Claim}
		}
	}
	e.must(unstructured.SetNestedSlice(want.Object, statuses, "status", "volumeStatus"))
	res := e.dyn.Resource(vmiResource).Namespace(v.NS)
	cur, err := res.Get(e.ctx, v.Name, getOpts)
	e.must(err)
	cur.Object["spec"], cur.Object["status"] = want.Object["spec"], want.Object["status"]
	_, err = res.Update(e.ctx, cur, metav1.UpdateOptions{})
	e.must(err)
}

// dirBound says whether exactly one mount, of a filesystem's root, is on
// the directory target.
func dirBound(target string) error {
	t, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	stack := t.At(target)
	if len(stack) != 1 || stack[0].Root != "/" {
		return fmt.Errorf("%d mounts on %q, want one bind of a PVC's root", len(stack), target)
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil || st.Uid != 107 {
		return fmt.Errorf("%q owned by %d (%v), want 107", target, st.Uid, err)
	}
	return nil
}

// readOnDevice reads a file of the PVC through a mount of its own device,
// independent of both pods.
func readOnDevice(t *testing.T, d *simnode.Disk, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount(d.Device, dir, d.FSType, 0, ""); err != nil {
		t.Fatalf("mount %s: %v", d.Device, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// diagAllOK runs `hpmount diag` on the simulated node and wants exit 0:
// every volume ok.
func (e *env) diagAllOK(t *testing.T) *diag.Report {
	t.Helper()
	bin, err := harness.Binary()
	e.must(err)
	cmd := exec.CommandContext(e.ctx, bin, "diag", "--all", "-o", "json", "--mount-source", "mountinfo",
		"--kubeconfig", e.kubeconfig, "--node-name", e.node.Name, "--kubelet-root", e.node.KubeletRoot,
		"--host-proc", "/proc", "--host-pid", strconv.Itoa(os.Getpid()),
		"--cgroup-root", e.node.CgroupRoot, "--cgroup-mode", "v1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("diag: %v, want exit 0\n%s", err, out)
	}
	var rep diag.Report
	e.must(json.Unmarshal(out, &rep))
	return &rep
}
