// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/grow"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/mountinfo"
)

// growMemo remembers, per target, the last growth check that found nothing
// to do, with what would change its answer: the mount on the target, the
// size of its device, and the claim's capacity. A resync of a node whose
// volumes did not change then costs one sysfs read per volume instead of a
// full check (open the target and the device, statfs, read the
// superblock).
type growMemo struct {
	mu   sync.Mutex
	last map[growKey]grown
}

type growKey struct {
	launcher types.UID
	name     string
}

type grown struct {
	mountID     int
	deviceBytes int64
	capacity    int64
	overhead    float64
	result      hotplug.GrowResult
}

// recall returns the remembered result when nothing it depends on changed.
func (m *growMemo) recall(k growKey, now grown) (hotplug.GrowResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.last[k]
	if !ok || g.mountID != now.mountID || g.deviceBytes != now.deviceBytes || g.capacity != now.capacity || g.overhead != now.overhead {
		return hotplug.GrowResult{}, false
	}
	return g.result, true
}

func (m *growMemo) remember(k growKey, g grown) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.last = map[growKey]grown{}
	}
	m.last[k] = g
}

func (m *growMemo) forget(k growKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.last, k)
}

// quickGrow answers a growth check from the memo when the mount on the
// target and its device's size are what they were at the last check that
// found nothing to grow; file is the volume's target in hotplug-disks. The
// mount comes from the batch's mount table and the size from sysfs: no
// file of the volume is opened.
func (e *Engine) quickGrow(t *mountinfo.Table, v hotplug.DesiredVolume, file string) (hotplug.GrowResult, grown, bool) {
	now := grown{capacity: v.CapacityBytes, overhead: v.FilesystemOverhead}
	if e.grow.DiskImages {
		return hotplug.GrowResult{}, now, false // the image's target moves with the free space
	}
	target := e.root.Abs(kubelet.HotplugDisksDir(string(v.LauncherUID)) + "/" + file)
	top, depth := t.Top(target)
	if top == nil || depth != 1 {
		return hotplug.GrowResult{}, now, false
	}
	size, err := blockdev.DeviceSize(e.sysRoot, top.Major, top.Minor)
	if err != nil {
		return hotplug.GrowResult{}, now, false
	}
	now.mountID, now.deviceBytes = top.ID, size
	r, ok := e.memo.recall(growKey{v.LauncherUID, v.Name}, now)
	return r, now, ok
}

// Grow checks and grows a filesystem volume online; for a block volume it
// reports the device size.
func (e *Engine) Grow(ctx context.Context, s hotplug.Snapshot, v hotplug.DesiredVolume) (hotplug.GrowResult, error) {
	// On growth's own threads, one per check (storage.go): a growth never
	// waits for an attach or detach, nor for another volume's growth.
	return onStorage(e, e.growth, growKey{v.LauncherUID, v.Name}, "growth", func(h hands) (hotplug.GrowResult, error) {
		return e.growOn(h, s, v)
	})
}

func (e *Engine) growOn(h hands, s hotplug.Snapshot, v hotplug.DesiredVolume) (hotplug.GrowResult, error) {
	k, err := kindOf(v.Mode)
	if err != nil {
		return hotplug.GrowResult{}, fmt.Errorf("grow %q: %w", v.Name, err)
	}
	t, err := e.tableFor(h.ns, s, v.LauncherUID)
	if err != nil {
		return hotplug.GrowResult{}, err
	}
	return k.grow(e, h, t, v)
}

// growFile checks the filesystem volume v, bound onto its target
// name(v.Name), and grows what the policy allows.
func (e *Engine) growFile(h hands, t *mountinfo.Table, v hotplug.DesiredVolume, name func(string) string) (hotplug.GrowResult, error) {
	quick, now, ok := e.quickGrow(t, v, name(v.Name))
	if ok {
		return quick, nil
	}
	growFS := e.grow.Filesystems
	if growFS {
		published, err := e.published(h, v)
		if err != nil {
			return hotplug.GrowResult{}, err
		}
		growFS = !published
	}
	file, err := targetName(v.Name, name)
	if err != nil {
		return hotplug.GrowResult{}, fmt.Errorf("grow %q: %w", name(v.Name), err)
	}
	r, err := h.grower.Grow(t, hotplugDisks(v.LauncherUID), file, grow.Options{
		GrowFilesystem:     growFS,
		ExpandDiskImage:    e.grow.DiskImages,
		CapacityBytes:      v.CapacityBytes,
		FilesystemOverhead: v.FilesystemOverhead,
	})
	res := hotplug.GrowResult{
		DeviceBytes:      r.DeviceBytes,
		FilesystemBefore: r.FilesystemBefore,
		FilesystemAfter:  r.FilesystemAfter,
		DiskImageBefore:  r.DiskImageBefore,
		DiskImageAfter:   r.DiskImageAfter,
		FilesystemType:   r.FSType,
		Grown:            r.Grown,
		ImageGrown:       r.ImageGrown,
		SlackBytes:       grow.SlackBytes,
	}
	if err == nil && !r.NeedsGrowth && now.mountID != 0 && now.deviceBytes == r.DeviceBytes {
		// Nothing was due: the same answer holds until the mount, the
		// device size or the claim changes.
		now.result = hotplug.GrowResult{DeviceBytes: res.DeviceBytes, FilesystemBefore: res.FilesystemAfter,
			FilesystemAfter: res.FilesystemAfter, DiskImageBefore: res.DiskImageAfter, DiskImageAfter: res.DiskImageAfter,
			FilesystemType: res.FilesystemType, SlackBytes: res.SlackBytes}
		e.memo.remember(growKey{v.LauncherUID, v.Name}, now)
	}
	return res, stuck(busy(err))
}

// findPublished is kubelet.FindPublished; tests replace it to make the
// check fail or hang.
var findPublished = kubelet.FindPublished

// published reports whether the attachment pod still publishes the
// volume: then the kubelet's NodeExpandVolume grows its filesystem, and a
// second resizer would only race it. Only kubelet.ErrNotPublished says it
// does not. A check that failed or is stuck tells nothing, and reading it
// as "not published" let growth race the kubelet: growth waits instead,
// with an error wrapping hotplug.ErrStuck or hotplug.ErrBusy, so that it is
// tried again. The check runs on the growth's own runner, so that a hung
// kubelet tree holds that growth, not attaches.
func (e *Engine) published(h hands, v hotplug.DesiredVolume) (bool, error) {
	if v.Source.AttachmentPodUID == "" || v.Source.PVName == "" {
		return false, nil
	}
	err := h.ns.Do(func() error {
		_, err := findPublished(e.root, string(v.Source.AttachmentPodUID), v.Source.PVName)
		return err
	})
	unknown := fmt.Sprintf("grow volume %q: whether the attachment pod %s still publishes it (then the kubelet grows it) is unknown",
		v.Name, v.Source.AttachmentPodUID)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, kubelet.ErrNotPublished):
		return false, nil
	case errors.Is(err, isolation.ErrStuck):
		return false, fmt.Errorf("%s: %w", unknown, stuck(err))
	}
	return false, fmt.Errorf("%s: %w: %w", unknown, hotplug.ErrBusy, err)
}

// stuck marks a call abandoned past its deadline for the agent.
func stuck(err error) error {
	if errors.Is(err, isolation.ErrStuck) {
		return fmt.Errorf("%w: %w", hotplug.ErrStuck, err)
	}
	return err
}

// busy marks a resize that lost a race with another resizer.
func busy(err error) error {
	if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("%w: %w", hotplug.ErrBusy, err)
	}
	return err
}

func (e *Engine) blockSize(t *mountinfo.Table, launcher types.UID, name string) (hotplug.GrowResult, error) {
	nodes, err := e.blockNodes(t, launcher)
	if err != nil {
		return hotplug.GrowResult{}, err
	}
	for _, n := range nodes {
		if n.Name == name && !n.Covered {
			size, err := blockdev.DeviceSize(e.sysRoot, n.Device.Major, n.Device.Minor)
			return hotplug.GrowResult{DeviceBytes: size, SlackBytes: grow.SlackBytes}, err
		}
	}
	return hotplug.GrowResult{}, fmt.Errorf("block node %q not found in %q", name, hotplugDisks(launcher))
}
