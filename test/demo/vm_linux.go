package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/test/simnode"
	"golang.org/x/sys/unix"
)

// vm is the VMI with its launcher, as virt-controller and the kubelet keep
// them: a step changes it and calls apply, the agent follows.
type vm struct {
	d        *demo
	uid      types.UID
	launcher *corev1.Pod
	l        *simnode.Launcher
	vols     []simnode.Volume
	disks    map[string]*simnode.Disk
	attach   map[string]string // volume name -> attachment pod UID
}

// addVolume makes the loop device, filesystem and claim of a new hotplug
// volume; fstype "" makes a block volume.
func (v *vm) addVolume(name, fstype string, size int64) (simnode.Volume, error) {
	vol := simnode.Volume{Name: name, Claim: name + "-pvc", PV: "pvc-" + string(v.uid)[:8] + "-" + name,
		Block: fstype == "", Capacity: simnode.Mi(size >> 20)}
	d, err := v.d.node.NewDisk(vmName+"-"+name, fstype, size)
	if err != nil {
		return vol, fmt.Errorf("disk of %s: %w", name, err)
	}
	if err := v.d.ctrl.CreatePVC(v.d.ctx, vmNamespace, vol); err != nil {
		return vol, fmt.Errorf("claim of %s: %w", name, err)
	}
	v.disks[name] = d
	v.vols = append(v.vols, vol)
	kind := fstype
	if kind == "" {
		kind = "raw block"
	}
	item("volume %-6s %s, %d MiB on %s, claim %s, mode %s", name, kind, size>>20, d.Device, vol.Claim, mode(vol))
	return vol, nil
}

func mode(vol simnode.Volume) string {
	if vol.Block {
		return "Block"
	}
	return "Filesystem"
}

func (v *vm) vol(name string) simnode.Volume {
	for _, vol := range v.vols {
		if vol.Name == name {
			return vol
		}
	}
	return simnode.Volume{Name: name}
}

// newAttachmentPod creates an hp-volume pod carrying vols and publishes them
// for it, as the kubelet and the CSI driver do.
func (v *vm) newAttachmentPod(vols ...simnode.Volume) (*corev1.Pod, error) {
	pod, err := v.d.ctrl.CreateAttachmentPod(v.d.ctx, v.launcher, vols)
	if err != nil {
		return nil, fmt.Errorf("create attachment pod: %w", err)
	}
	var names []string
	for _, vol := range vols {
		if err := v.publish(string(pod.UID), vol); err != nil {
			return nil, err
		}
		v.attach[vol.Name] = string(pod.UID)
		names = append(names, vol.Name)
	}
	item("attachment pod %s created; kubelet published %s for it", pod.Name, strings.Join(names, ", "))
	return pod, nil
}

func (v *vm) publish(pod string, vol simnode.Volume) error {
	d := v.disks[vol.Name]
	var err error
	if vol.Block {
		err = v.d.node.PublishBlock(pod, vol.PV, d)
	} else {
		err = v.d.node.PublishFilesystem(pod, vol.PV, d, 32<<20)
	}
	if err != nil {
		return fmt.Errorf("publish %s for pod %s: %w", vol.Name, pod, err)
	}
	return nil
}

func (v *vm) unpublish(pod string, vol simnode.Volume) error {
	var err error
	if vol.Block {
		err = v.d.node.UnpublishBlock(pod, vol.PV)
	} else {
		err = v.d.node.UnpublishFilesystem(pod, vol.PV)
	}
	if err != nil {
		return fmt.Errorf("unpublish %s from pod %s: %w", vol.Name, pod, err)
	}
	return nil
}

func (v *vm) deletePod(pod *corev1.Pod) error {
	if err := v.d.kube.CoreV1().Pods(vmNamespace).Delete(v.d.ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
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
		}
	}
}

// apply writes the VMI's spec and status as virt-controller would.
func (v *vm) apply() error {
	att := map[string]types.UID{}
	for k, uid := range v.attach {
		att[k] = types.UID(uid)
	}
	_, err := v.d.ctrl.ApplyVMI(v.d.ctx, simnode.VMISpec{Namespace: vmNamespace, Name: vmName, Node: nodeName,
		Launcher: v.launcher.UID, Attachment: att, Volumes: v.vols})
	if err != nil {
		return fmt.Errorf("update vmi: %w", err)
	}
	var names []string
	for _, vol := range v.vols {
		names = append(names, vol.Name+"("+vol.Capacity+")")
	}
	item("VMI %s/%s updated: hotplug volumes %s", vmNamespace, vmName, strings.Join(names, " "))
	return nil
}

// target is the host path of a volume's entry in hotplug-disks.
func (v *vm) target(vol simnode.Volume) string {
	if vol.Block {
		return v.l.Path(vol.Name)
	}
	return v.l.Path(vol.Name + ".img")
}

func hostTable() (*mount.Table, error) {
	return mount.ReadTable("/proc/self/mountinfo")
}

// mountID is the id of the single disk.img bind on a filesystem volume's
// target, or an error saying what is there instead.
func (v *vm) mountID(vol simnode.Volume) (int, error) {
	t, err := hostTable()
	if err != nil {
		return 0, err
	}
	top, n := t.Top(v.target(vol))
	switch {
	case top == nil:
		return 0, fmt.Errorf("%s not mounted", vol.Name)
	case n != 1 || top.Root != "/disk.img":
		return 0, fmt.Errorf("%s: %d mounts stacked, top root %q", vol.Name, n, top.Root)
	}
	return top.ID, nil
}

func (v *vm) waitMounted(vol simnode.Volume) (int, error) {
	var id int
	err := v.d.eventually("bind mount of "+vol.Name, waitTimeout, func() (err error) {
		id, err = v.mountID(vol)
		return err
	})
	return id, err
}

func (v *vm) waitNode(vol simnode.Volume) error {
	return v.d.eventually("block node "+vol.Name, waitTimeout, func() error {
		fi, err := os.Lstat(v.target(vol))
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeDevice == 0 {
			return fmt.Errorf("%s is not a device: %v", vol.Name, fi.Mode())
		}
		return nil
	})
}

// waitGone waits until a volume's target is neither mounted nor present.
func (v *vm) waitGone(vol simnode.Volume) error {
	return v.d.eventually(vol.Name+" removed", waitTimeout, func() error {
		t, err := hostTable()
		if err != nil {
			return err
		}
		if top, _ := t.Top(v.target(vol)); top != nil {
			return fmt.Errorf("%s still mounted", vol.Name)
		}
		if _, err := os.Lstat(v.target(vol)); err == nil {
			return fmt.Errorf("%s still exists", v.target(vol))
		}
		return nil
	})
}

// writeThroughLauncher writes pattern at off into the volume's entry, from
// inside the launcher's mount namespace and device cgroup.
func (v *vm) writeThroughLauncher(vol simnode.Volume, off int64, pattern string) error {
	script := fmt.Sprintf("printf %%s %q | dd of=%s bs=1 seek=%d conv=notrunc status=none && sync", pattern, v.target(vol), off)
	if out, err := v.l.Exec(script); err != nil {
		return fmt.Errorf("write %s through the launcher: %w %s", vol.Name, err, out)
	}
	return nil
}

// readFile reads n bytes at off of path.
func readFile(path string, off int64, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		return "", fmt.Errorf("read %q: %w", path, err)
	}
	return string(b), nil
}

// readOnFilesystem reads disk.img on the volume's own filesystem through a
// private mount of its device, independent of the attachment pod and of the
// launcher: a second mount shares the superblock the launcher's bind keeps
// alive, so it sees what the guest wrote.
func readOnFilesystem(d *simnode.Disk, off int64, n int) (string, error) {
	dir, err := os.MkdirTemp("", "hpmount-demo-check-")
	if err != nil {
		return "", err
	}
	defer os.Remove(dir)
	if err := unix.Mount(d.Device, dir, d.FSType, 0, ""); err != nil {
		return "", fmt.Errorf("mount %s on %q: %w", d.Device, dir, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	return readFile(filepath.Join(dir, "disk.img"), off, n)
}

// roundTrip writes a pattern through the launcher and checks it on the
// volume's source: disk.img read via a mount of the device, or the raw
// block device.
func (v *vm) roundTrip(vol simnode.Volume, pattern string) error {
	off := int64(1 << 20)
	if vol.Block {
		off = 4096
	}
	if err := v.writeThroughLauncher(vol, off, pattern); err != nil {
		return err
	}
	d := v.disks[vol.Name]
	var got, where string
	var err error
	if vol.Block {
		got, err = readFile(d.Device, off, len(pattern))
		where = d.Device
	} else {
		got, err = readOnFilesystem(d, off, len(pattern))
		where = "disk.img on " + d.Device
	}
	if err != nil {
		return err
	}
	if got != pattern {
		return fmt.Errorf("volume %s: %s holds %q at %d, want %q", vol.Name, where, got, off, pattern)
	}
	ok("%s: wrote %q through the launcher at offset %d, read it back from %s", vol.Name, pattern, off, where)
	return nil
}
