package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/test/simnode"
	"golang.org/x/sys/unix"
)

// vm is one VMI with its launcher, as virt-controller and the kubelet keep
// them: the test changes it and calls apply, the agent follows.
type vm struct {
	e        *env
	ns, name string
	uid      types.UID
	launcher *corev1.Pod
	l        *simnode.Launcher
	vols     []simnode.Volume
	disks    map[string]*simnode.Disk
	attach   map[string]types.UID
	// launcherNode overrides where status.activePods places the launcher.
	launcherNode string
}

func (e *env) newVM(ns, name string) *vm {
	e.t.Helper()
	if err := e.ctrl.EnsureNamespace(e.ctx, ns); err != nil {
		e.t.Fatal(err)
	}
	shell, err := e.ctrl.CreateVMIShell(e.ctx, ns, name, nodeName)
	if err != nil {
		e.t.Fatal(err)
	}
	v := &vm{e: e, ns: ns, name: name, uid: shell.GetUID(), disks: map[string]*simnode.Disk{}, attach: map[string]types.UID{}}
	v.launcher, err = e.ctrl.CreateLauncherPod(e.ctx, ns, name, v.uid, nodeName)
	if err != nil {
		e.t.Fatal(err)
	}
	v.l, err = e.node.StartLauncher(string(v.launcher.UID))
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// addVolume makes the disk and claim of a new hotplug volume; fstype ""
// makes a block volume.
func (v *vm) addVolume(name, fstype string, size int64) simnode.Volume {
	v.e.t.Helper()
	vol := simnode.Volume{Name: name, Claim: v.name + "-" + name, PV: "pvc-" + strings.ReplaceAll(string(v.uid), "-", "")[:8] + "-" + name,
		Block: fstype == "", Capacity: simnode.Mi(size >> 20)}
	d, err := v.e.node.NewDisk(v.name+"-"+name, fstype, size)
	if err != nil {
		v.e.t.Fatal(err)
	}
	if err := v.e.ctrl.CreatePVC(v.e.ctx, v.ns, vol); err != nil {
		v.e.t.Fatal(err)
	}
	v.disks[name] = d
	v.vols = append(v.vols, vol)
	return vol
}

// newAttachmentPod creates an hp-volume pod carrying vols and publishes
// them for it, as the kubelet does.
func (v *vm) newAttachmentPod(vols ...simnode.Volume) *corev1.Pod {
	v.e.t.Helper()
	pod, err := v.e.ctrl.CreateAttachmentPod(v.e.ctx, v.launcher, vols)
	if err != nil {
		v.e.t.Fatal(err)
	}
	for _, vol := range vols {
		v.publish(pod.UID, vol)
		v.attach[vol.Name] = pod.UID
	}
	return pod
}

func (v *vm) publish(pod types.UID, vol simnode.Volume) {
	v.e.t.Helper()
	d := v.disks[vol.Name]
	var err error
	if vol.Block {
		err = v.e.node.PublishBlock(string(pod), vol.PV, d)
	} else {
		err = v.e.node.PublishFilesystem(string(pod), vol.PV, d, 32<<20)
	}
	if err != nil {
		v.e.t.Fatal(err)
	}
}

// replaceAttachmentPod is what KubeVirt does when the set of hotplug volumes
// changes: a new pod carries only vols, the old one is deleted and the
// kubelet unpublishes everything it had.
func (v *vm) replaceAttachmentPod(old *corev1.Pod, oldVols []simnode.Volume, vols ...simnode.Volume) *corev1.Pod {
	v.e.t.Helper()
	pod := v.newAttachmentPod(vols...)
	for _, vol := range oldVols {
		var err error
		if vol.Block {
			err = v.e.node.UnpublishBlock(string(old.UID), vol.PV)
		} else {
			err = v.e.node.UnpublishFilesystem(string(old.UID), vol.PV)
		}
		if err != nil {
			v.e.t.Fatal(err)
		}
		v.attach[vol.Name] = pod.UID
	}
	if err := v.e.kube.CoreV1().Pods(v.ns).Delete(v.e.ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		v.e.t.Fatal(err)
	}
	return pod
}

func (v *vm) removeVolume(name string) {
	for i, vol := range v.vols {
		if vol.Name == name {
			v.vols = append(v.vols[:i], v.vols[i+1:]...)
			break
		}
	}
	delete(v.attach, name)
}

func (v *vm) setCapacity(name string, size int64) {
	for i := range v.vols {
		if v.vols[i].Name == name {
			v.vols[i].Capacity = simnode.Mi(size >> 20)
			v.vols[i].Requests = ""
		}
	}
}

// setRequest raises only the claim's request, as a user expanding a PVC
// does: with no pod publishing it, status.capacity stays behind.
func (v *vm) setRequest(name string, size int64) {
	for i := range v.vols {
		if v.vols[i].Name == name {
			v.vols[i].Requests = simnode.Mi(size >> 20)
		}
	}
}

// apply writes the VMI's spec and status as virt-controller would.
func (v *vm) apply() {
	v.e.t.Helper()
	_, err := v.e.ctrl.ApplyVMI(v.e.ctx, simnode.VMISpec{Namespace: v.ns, Name: v.name, Node: nodeName,
		Launcher: v.launcher.UID, LauncherNode: v.launcherNode, Attachment: v.attach, Volumes: v.vols})
	if err != nil {
		v.e.t.Fatal(err)
	}
}

// target is the host path of a volume's entry in hotplug-disks.
func (v *vm) target(vol simnode.Volume) string {
	if vol.Block {
		return v.l.Path(vol.Name)
	}
	return v.l.Path(vol.Name + ".img")
}

// waitMounted waits until the filesystem volume's target carries exactly
// one mount of disk.img and returns its mount id.
func (v *vm) waitMounted(vol simnode.Volume) int {
	v.e.t.Helper()
	var id int
	v.e.eventually("mount on "+vol.Name, 60e9, func() error {
		top, n := v.e.table().Top(v.target(vol))
		if top == nil {
			return fmt.Errorf("not mounted")
		}
		if n != 1 || top.Root != "/disk.img" {
			return fmt.Errorf("%d mounts, top root %q", n, top.Root)
		}
		id = top.ID
		return nil
	})
	return id
}

func (v *vm) waitGone(vol simnode.Volume) {
	v.e.t.Helper()
	v.e.eventually(vol.Name+" gone", 60e9, func() error {
		if top, _ := v.e.table().Top(v.target(vol)); top != nil {
			return fmt.Errorf("still mounted")
		}
		if _, err := os.Lstat(v.target(vol)); err == nil {
			return fmt.Errorf("%s still exists", v.target(vol))
		}
		return nil
	})
}

func (v *vm) waitNode(vol simnode.Volume) {
	v.e.t.Helper()
	v.e.eventually("block node "+vol.Name, 60e9, func() error {
		fi, err := os.Lstat(v.target(vol))
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeDevice == 0 {
			return fmt.Errorf("not a device: %v", fi.Mode())
		}
		return nil
	})
}

// roundTripFile writes a pattern through the launcher's view and reads it
// back from the volume's own filesystem.
func (v *vm) roundTripFile(t *testing.T, vol simnode.Volume, pattern string) {
	t.Helper()
	if _, err := v.l.Exec(fmt.Sprintf("printf %%s %q | dd of=%s bs=1M seek=1 conv=notrunc status=none && sync", pattern, v.target(vol))); err != nil {
		t.Fatal(err)
	}
	got, err := readAt(v.disks[vol.Name], 1<<20, len(pattern))
	if err != nil {
		t.Fatal(err)
	}
	if got != pattern {
		t.Fatalf("volume %s holds %q, want %q", vol.Name, got, pattern)
	}
}

// roundTripBlock writes through the launcher's node (opening it needs the
// device-cgroup rule) and reads the device directly.
func (v *vm) roundTripBlock(t *testing.T, vol simnode.Volume, pattern string) {
	t.Helper()
	if _, err := v.l.Exec(fmt.Sprintf("printf %%s %q | dd of=%s conv=notrunc status=none", pattern, v.target(vol))); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(pattern))
	f, err := os.Open(v.disks[vol.Name].Device)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if string(b) != pattern {
		t.Fatalf("device of %s holds %q, want %q", vol.Name, b, pattern)
	}
}

// readAt reads disk.img on the volume's filesystem through a private mount
// of its device: independent of both the attachment pod and the launcher.
func readAt(d *simnode.Disk, off int64, n int) (string, error) {
	dir, err := os.MkdirTemp("", "hpmount-check-")
	if err != nil {
		return "", err
	}
	defer os.Remove(dir)
	// A second mount of the device shares the superblock that the
	// launcher's bind keeps alive, so this reads what the guest wrote.
	if err := unix.Mount(d.Device, dir, d.FSType, 0, ""); err != nil {
		return "", fmt.Errorf("mount %s on %q: %w", d.Device, dir, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	f, err := os.Open(filepath.Join(dir, "disk.img"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		return "", err
	}
	return string(b), nil
}
