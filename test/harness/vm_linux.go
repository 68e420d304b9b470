// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/test/simnode"
)

// WaitTimeout bounds every wait for the agent; a healthy run needs a
// fraction of it.
const WaitTimeout = 60 * time.Second

// VM is one VMI with its launcher, as virt-controller and the kubelet keep
// them: a caller changes it and calls Apply, the agent follows.
type VM struct {
	Ctrl     *simnode.Controller
	Node     *simnode.Node
	NS, Name string
	UID      types.UID
	Launcher *corev1.Pod
	L        *simnode.Launcher
	Vols     []simnode.Volume
	Disks    map[string]*simnode.Disk
	Attach   map[string]types.UID // volume name → attachment pod UID
	// LauncherNode overrides where status.activePods places the launcher.
	LauncherNode string
	// ActivePods, when set, is status.activePods instead of the launcher
	// alone (several launchers claiming the VMI).
	ActivePods map[types.UID]string
	// Migration is the VM's live migration, nil before any
	// (migration_linux.go).
	Migration *Migration
}

// NewVM creates the namespace, the VMI, its launcher pod and the
// launcher's process: what virt-controller and the kubelet do before any
// hotplug.
func NewVM(ctx context.Context, ctrl *simnode.Controller, node *simnode.Node, ns, name string) (*VM, error) {
	if err := ctrl.EnsureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	shell, err := ctrl.CreateVMIShell(ctx, ns, name, node.Name)
	if err != nil {
		return nil, fmt.Errorf("create vmi %s/%s: %w", ns, name, err)
	}
	v := &VM{Ctrl: ctrl, Node: node, NS: ns, Name: name, UID: shell.GetUID(),
		Disks: map[string]*simnode.Disk{}, Attach: map[string]types.UID{}}
	if v.Launcher, err = ctrl.CreateLauncherPod(ctx, ns, name, v.UID, node.Name); err != nil {
		return nil, fmt.Errorf("create launcher pod: %w", err)
	}
	if v.L, err = node.StartLauncher(string(v.Launcher.UID)); err != nil {
		return nil, fmt.Errorf("start launcher: %w", err)
	}
	return v, nil
}

// AddVolume makes the disk and claim of a new hotplug volume; fstype ""
// makes a block volume.
func (v *VM) AddVolume(ctx context.Context, name, fstype string, size int64) (simnode.Volume, error) {
	vol := simnode.Volume{Name: name, Claim: v.Name + "-" + name,
		PV: "pvc-" + strings.ReplaceAll(string(v.UID), "-", "")[:8] + "-" + name, Block: fstype == "", Capacity: simnode.Mi(size >> 20)}
	d, err := v.Node.NewDisk(v.Name+"-"+name, fstype, size)
	if err != nil {
		return vol, fmt.Errorf("disk of %s: %w", name, err)
	}
	if err := v.Ctrl.CreatePVC(ctx, v.NS, vol); err != nil {
		return vol, fmt.Errorf("claim of %s: %w", name, err)
	}
	v.Disks[name] = d
	v.Vols = append(v.Vols, vol)
	return vol, nil
}

// Vol returns the volume of that name.
func (v *VM) Vol(name string) simnode.Volume {
	for _, vol := range v.Vols {
		if vol.Name == name {
			return vol
		}
	}
	return simnode.Volume{Name: name}
}

// NewAttachmentPod creates an hp-volume pod carrying vols and publishes
// them for it, as the kubelet and the CSI driver do.
func (v *VM) NewAttachmentPod(ctx context.Context, vols ...simnode.Volume) (*corev1.Pod, error) {
	pod, err := v.Ctrl.CreateAttachmentPod(ctx, v.Launcher, vols)
	if err != nil {
		return nil, fmt.Errorf("create attachment pod: %w", err)
	}
	for _, vol := range vols {
		if err := v.Publish(pod.UID, vol); err != nil {
			return nil, err
		}
		v.Attach[vol.Name] = pod.UID
	}
	return pod, nil
}

// Publish is NodeStage and NodePublish of vol for pod.
func (v *VM) Publish(pod types.UID, vol simnode.Volume) error {
	d := v.Disks[vol.Name]
	var err error
	if vol.Block {
		err = v.Node.PublishBlock(string(pod), vol.PV, d)
	} else {
		err = v.Node.PublishFilesystem(string(pod), vol.PV, d, 32<<20)
	}
	if err != nil {
		return fmt.Errorf("publish %s for pod %s: %w", vol.Name, pod, err)
	}
	return nil
}

// Unpublish is NodeUnpublish and NodeUnstage of vol from pod.
func (v *VM) Unpublish(pod types.UID, vol simnode.Volume) error {
	var err error
	if vol.Block {
		err = v.Node.UnpublishBlock(string(pod), vol.PV)
	} else {
		err = v.Node.UnpublishFilesystem(string(pod), vol.PV)
	}
	if err != nil {
		return fmt.Errorf("unpublish %s from pod %s: %w", vol.Name, pod, err)
	}
	return nil
}

// ReplaceAttachmentPod is what KubeVirt does when the set of hotplug
// volumes changes: a new pod carries only vols, the old one is deleted and
// the kubelet unpublishes everything it had.
func (v *VM) ReplaceAttachmentPod(ctx context.Context, old *corev1.Pod, oldVols []simnode.Volume, vols ...simnode.Volume) (*corev1.Pod, error) {
	pod, err := v.NewAttachmentPod(ctx, vols...)
	if err != nil {
		return nil, err
	}
	for _, vol := range oldVols {
		if err := v.Unpublish(old.UID, vol); err != nil {
			return nil, err
		}
		v.Attach[vol.Name] = pod.UID
	}
	if err := v.DeletePod(ctx, old); err != nil {
		return nil, err
	}
	return pod, nil
}

// DeletePod deletes one of the VM's pods.
func (v *VM) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	if err := v.Ctrl.Kube.CoreV1().Pods(v.NS).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

// RemoveVolume takes a volume out of the spec (Apply writes it).
func (v *VM) RemoveVolume(name string) {
	for i, vol := range v.Vols {
		if vol.Name == name {
			v.Vols = append(v.Vols[:i], v.Vols[i+1:]...)
			break
		}
	}
	delete(v.Attach, name)
}

// SetCapacity sets a claim's capacity, as after NodeExpandVolume.
func (v *VM) SetCapacity(name string, size int64) {
	for i := range v.Vols {
		if v.Vols[i].Name == name {
			v.Vols[i].Capacity = simnode.Mi(size >> 20)
			v.Vols[i].Requests = ""
		}
	}
}

// SetRequest raises only the claim's request, as a user expanding a PVC
// does: with no pod publishing it, status.capacity stays behind.
func (v *VM) SetRequest(name string, size int64) {
	for i := range v.Vols {
		if v.Vols[i].Name == name {
			v.Vols[i].Requests = simnode.Mi(size >> 20)
		}
	}
}

// Apply writes the VMI's spec and status as virt-controller would.
func (v *VM) Apply(ctx context.Context) error {
	spec := simnode.VMISpec{Namespace: v.NS, Name: v.Name, Node: v.Node.Name,
		Launcher: v.Launcher.UID, LauncherNode: v.LauncherNode, Attachment: v.Attach, Volumes: v.Vols, ActivePods: v.ActivePods}
	v.Migration.render(&spec)
	_, err := v.Ctrl.ApplyVMI(ctx, spec)
	if err != nil {
		return fmt.Errorf("update vmi %s/%s: %w", v.NS, v.Name, err)
	}
	return nil
}

// Target is the host path of a volume's entry in hotplug-disks.
func (v *VM) Target(vol simnode.Volume) string {
	if vol.Block {
		return v.L.Path(vol.Name)
	}
	return v.L.Path(vol.Name + ".img")
}

// HostTable reads the simulated host's mount table.
func HostTable() (*mountinfo.Table, error) { return mountinfo.ReadTable("/proc/self/mountinfo") }

// MountID is the id of the single disk.img bind on a filesystem volume's
// target, or an error saying what is there instead.
func (v *VM) MountID(vol simnode.Volume) (int, error) {
	t, err := HostTable()
	if err != nil {
		return 0, err
	}
	top, n := t.Top(v.Target(vol))
	switch {
	case top == nil:
		return 0, fmt.Errorf("%s not mounted", vol.Name)
	case n != 1 || top.Root != "/disk.img":
		return 0, fmt.Errorf("%s: %d mounts stacked, top root %q", vol.Name, n, top.Root)
	}
	return top.ID, nil
}

// WaitMounted waits for exactly one bind of disk.img on the target and
// returns its mount id.
func (v *VM) WaitMounted(ctx context.Context, vol simnode.Volume) (int, error) {
	var id int
	err := Eventually(ctx, "bind mount of "+vol.Name, WaitTimeout, func() (err error) {
		id, err = v.MountID(vol)
		return err
	})
	return id, err
}

// WaitNode waits for a block device node at the target.
func (v *VM) WaitNode(ctx context.Context, vol simnode.Volume) error {
	return Eventually(ctx, "block node "+vol.Name, WaitTimeout, func() error {
		fi, err := os.Lstat(v.Target(vol))
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeDevice == 0 {
			return fmt.Errorf("%s is not a device: %v", vol.Name, fi.Mode())
		}
		return nil
	})
}

// WaitGone waits until a volume's target is neither mounted nor present.
func (v *VM) WaitGone(ctx context.Context, vol simnode.Volume) error {
	return Eventually(ctx, vol.Name+" removed", WaitTimeout, func() error {
		t, err := HostTable()
		if err != nil {
			return err
		}
		if top, _ := t.Top(v.Target(vol)); top != nil {
			return fmt.Errorf("%s still mounted", vol.Name)
		}
		if _, err := os.Lstat(v.Target(vol)); err == nil {
			return fmt.Errorf("%s still exists", v.Target(vol))
		}
		return nil
	})
}

// RoundTrip writes a pattern through the launcher (its mount namespace and
// device cgroup, at the path QEMU opens) and reads it back from the
// volume's source: disk.img via a mount of the device, or the raw block
// device. It returns where it read.
func (v *VM) RoundTrip(vol simnode.Volume, pattern string) (string, error) {
	off := int64(1 << 20)
	if vol.Block {
		off = 4096
	}
	at := v.L.ContainerPath(filepath.Base(v.Target(vol)))
	script := fmt.Sprintf("printf %%s %q | dd of=%s bs=1 seek=%d conv=notrunc status=none && sync", pattern, at, off)
	if out, err := v.L.Exec(script); err != nil {
		return "", fmt.Errorf("write %s through the launcher: %w %s", vol.Name, err, out)
	}
	d := v.Disks[vol.Name]
	got, where, err := ReadSource(d, vol.Block, off, len(pattern))
	if err != nil {
		return "", err
	}
	if got != pattern {
		return "", fmt.Errorf("volume %s: %s holds %q at %d, want %q", vol.Name, where, got, off, pattern)
	}
	return where, nil
}

// ReadSource reads n bytes at off of a volume's source, independent of
// both the attachment pod and the launcher: the raw device of a block
// volume, or disk.img through a second mount of the device, which shares
// the superblock the launcher's bind keeps alive.
func ReadSource(d *simnode.Disk, block bool, off int64, n int) (got, where string, err error) {
	if block {
		got, err = readFile(d.Device, off, n)
		return got, d.Device, err
	}
	dir, err := os.MkdirTemp("", "hpmount-check-")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(dir)
	if err := unix.Mount(d.Device, dir, d.FSType, 0, ""); err != nil {
		return "", "", fmt.Errorf("mount %s on %q: %w", d.Device, dir, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	got, err = readFile(filepath.Join(dir, "disk.img"), off, n)
	return got, "disk.img on " + d.Device, err
}

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
