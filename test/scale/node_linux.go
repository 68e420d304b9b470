// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/test/simnode"
)

const (
	nodeName  = "scale-node"
	vmNS      = "scale"
	volMiB    = 64 // apparent size of each disk.img and claim
	fsPerDisk = 128
)

// vm is one VMI of the scale node with its launcher and attachment pod.
type vm struct {
	name     string
	uid      types.UID
	launcher types.UID
	attach   types.UID
	vols     []simnode.Volume
	l        *simnode.Launcher
}

// spec is what the simulated virt-controller writes for v.
func (v *vm) spec() simnode.VMISpec {
	s := simnode.VMISpec{Namespace: vmNS, Name: v.name, Node: nodeName, Launcher: v.launcher,
		Attachment: map[string]types.UID{}, Volumes: v.vols}
	for _, vol := range v.vols {
		s.Attachment[vol.Name] = v.attach
	}
	return s
}

// target is where the agent puts vol in v's launcher.
func (e *env) target(v *vm, vol simnode.Volume) string {
	name := vol.Name
	if !vol.Block {
		name += ".img"
	}
	return filepath.Join(e.node.HotplugDisksDir(string(v.launcher)), name)
}

// backing holds the shared filesystems and raw devices the volumes live
// on: a node's thousand volumes on a handful of loop devices.
type backing struct {
	fsDirs []string // mount points of ext4 filesystems
	blocks []*simnode.Disk
	next   int
}

func (e *env) makeBacking(fsVols, blockVols int) error {
	for range (fsVols + fsPerDisk - 1) / fsPerDisk {
		if err := e.addFilesystem(); err != nil {
			return err
		}
	}
	for i := range min(blockVols, 16) {
		d, err := e.node.NewDisk(fmt.Sprintf("blk%d", i), "", 32<<20)
		if err != nil {
			return err
		}
		e.back.blocks = append(e.back.blocks, d)
	}
	return nil
}

// addFilesystem makes one more shared filesystem for volumes to live on.
func (e *env) addFilesystem() error {
	i := len(e.back.fsDirs)
	d, err := e.node.NewDisk(fmt.Sprintf("fs%d", i), "ext4", 2<<30)
	if err != nil {
		return err
	}
	dir := filepath.Join(e.dir, "backing", fmt.Sprintf("fs%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(d.Device, dir, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s on %q: %w", d.Device, dir, err)
	}
	e.back.fsDirs = append(e.back.fsDirs, dir)
	return nil
}

// publish does what NodeStage/NodePublish do for vol of the attachment
// pod: a filesystem volume is a directory of a shared filesystem, bound
// onto the pod's CSI mount dir, with a sparse disk.img; a block volume
// binds one of the raw devices.
func (e *env) publish(attach types.UID, vol simnode.Volume) error {
	if vol.Block {
		d := e.back.blocks[e.back.next%len(e.back.blocks)]
		e.back.next++
		return e.node.PublishBlock(string(attach), vol.PV, d)
	}
	src := filepath.Join(e.back.fsDirs[e.back.next%len(e.back.fsDirs)], vol.PV)
	e.back.next++
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	img, err := os.OpenFile(filepath.Join(src, "disk.img"), os.O_CREATE|os.O_WRONLY, 0o660)
	if err != nil {
		return err
	}
	err = img.Truncate(volMiB << 20)
	img.Close()
	if err != nil {
		return err
	}
	dst := e.node.CSIMountDir(string(attach), vol.PV)
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %q on %q: %w", src, dst, err)
	}
	return nil
}

// volumesOf names the hotplug volumes of VMI i: every blockEvery-th one is
// a block volume.
func volumesOf(i, n, blockEvery int) []simnode.Volume {
	var out []simnode.Volume
	for j := range n {
		name := fmt.Sprintf("vm%03d-d%d", i, j)
		out = append(out, simnode.Volume{Name: name, Claim: "claim-" + name, PV: "pv-" + name,
			Block: blockEvery > 0 && (i*n+j)%blockEvery == blockEvery-1, Capacity: fmt.Sprintf("%dMi", volMiB)})
	}
	return out
}

// addVMs creates VMIs [from, to) with their pods, claims, launchers and
// published volumes, concurrently: a real node fills up over time, the
// harness does not have all day.
func (e *env) addVMs(ctx context.Context, from, to int) error {
	sem := make(chan struct{}, 8)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, err := e.addVM(ctx, i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if err == nil {
				e.vms = append(e.vms, v)
			}
		})
	}
	wg.Wait()
	return firstErr
}

func (e *env) addVM(ctx context.Context, i int) (*vm, error) {
	v := &vm{name: fmt.Sprintf("vm%03d", i), vols: volumesOf(i, e.opts.volumes, e.opts.blockEvery)}
	shell, err := e.ctrl.CreateVMIShell(ctx, vmNS, v.name, nodeName)
	if err != nil {
		return nil, fmt.Errorf("create vmi %s: %w", v.name, err)
	}
	v.uid = shell.GetUID()
	launcher, err := e.ctrl.CreateLauncherPod(ctx, vmNS, v.name, v.uid, nodeName)
	if err != nil {
		return nil, err
	}
	v.launcher = launcher.UID
	e.mountMu.Lock()
	v.l, err = e.node.StartLauncher(string(v.launcher))
	e.mountMu.Unlock()
	if err != nil {
		return nil, err
	}
	attach, err := e.ctrl.CreateAttachmentPod(ctx, launcher, v.vols)
	if err != nil {
		return nil, err
	}
	v.attach = attach.UID
	for _, vol := range v.vols {
		if err := e.ctrl.CreatePVC(ctx, vmNS, vol); err != nil {
			return nil, err
		}
		e.mountMu.Lock()
		err := e.publish(v.attach, vol)
		e.mountMu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if _, err := e.ctrl.ApplyVMI(ctx, v.spec()); err != nil {
		return nil, fmt.Errorf("apply vmi %s: %w", v.name, err)
	}
	return v, nil
}

// padMountTable adds private bind mounts until the mount table has about
// want entries, as a node full of pods, projected volumes and overlays has.
func (e *env) padMountTable(want int) (int, error) {
	have, err := countLines("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	dir := filepath.Join(e.dir, "padding")
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return 0, err
	}
	if err := unix.Mount("padding", dir, "tmpfs", 0, "size=64m"); err != nil {
		return 0, fmt.Errorf("mount padding tmpfs: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return 0, err
	}
	for i := 0; have < want; i++ {
		p := filepath.Join(dir, fmt.Sprintf("m%05d", i))
		if err := os.Mkdir(p, 0o755); err != nil {
			return 0, err
		}
		if err := unix.Mount(filepath.Join(dir, "src"), p, "", unix.MS_BIND, ""); err != nil {
			return 0, fmt.Errorf("pad mount table: %w", err)
		}
		have++
	}
	return have, nil
}

func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n"), nil
}

// clearTargets removes what the agent made, so that the next fresh-attach
// run starts from a node where everything is published and nothing is in
// the launchers: what the agent finds when it is installed.
func (e *env) clearTargets() error {
	for _, v := range e.vms {
		for _, vol := range v.vols {
			t := e.target(v, vol)
			if !vol.Block {
				for unix.Unmount(t, unix.MNT_DETACH) == nil {
				}
			}
			if err := os.Remove(t); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}

func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}
