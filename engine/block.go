// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
	"github.com/hpmount/hpmount/podcgroup"
)

// Block volumes. blockdev works on a launcher's hotplug-disks descriptor and
// opens no kubelet path; the engine opens the directory for it through
// mount.InLauncherDir, the launcher-directory rule file binds obey too,
// judged against the batch's mount table the engine already holds. So the
// rule has one owner (mount, which owns the mount table) and blockdev grows
// no mountinfo knowledge. Whatever is mounted on a node's name is never
// hpmount's: the engine removes that mount alone (mount.Uncover) before
// blockdev makes, checks or removes the node, and blockdev refuses to work
// through a mount that appears meanwhile.

// inHotplugDisks runs fn in the host namespace on the launcher's
// hotplug-disks, opened through the launcher-directory rule. fn checks
// live before each change it makes (Uncover, and before each call of
// blockdev that makes, chowns, labels or removes a node): a call given up
// past its deadline changes nothing more.
func inHotplugDisks[T any](h hands, t *mountinfo.Table, launcher types.UID, fn func(live *isolation.Live, dir *os.File) (T, error)) (T, error) {
	return mount.InLauncherDirLive(h.attacher, t, hotplugDisks(launcher), fn)
}

// blockNodes lists the launcher's block nodes; a missing hotplug-disks has
// none.
func (e *Engine) blockNodes(t *mountinfo.Table, launcher types.UID) ([]blockdev.Node, error) {
	return listNodes(e.lookerOf(launcher).attacher, e.nodes, t, hotplugDisks(launcher))
}

// uncover removes what is mounted on the launcher's entry name and says
// whether there was anything.
func (e *Engine) uncover(h hands, t *mountinfo.Table, launcher types.UID, name string) (bool, error) {
	n, err := inHotplugDisks(h, t, launcher, func(live *isolation.Live, dir *os.File) (int, error) {
		return mount.Uncover(live, t, dir, name)
	})
	return n > 0, err
}

// nodeChange is what blockdev.Ensure or Remove did, carried out of the
// host namespace: the result, the device the node had, and whether a
// mount on the node's name was removed first.
type nodeChange struct {
	r         outcome.Result
	dev       blockdev.Device
	uncovered bool
}

func (e *Engine) attachBlock(h hands, t *mountinfo.Table, v hotplug.DesiredVolume) (outcome.Result, error) {
	if v.Source.AttachmentPodUID == "" || v.Source.PVName == "" {
		return e.keepBlock(h, t, v, fmt.Errorf("block volume %q: %w: no attachment pod publishes it", v.Name, kubelet.ErrNotPublished))
	}
	p, err := h.nodes.PublishedDevice(string(v.Source.AttachmentPodUID), v.Source.PVName)
	if errors.Is(err, kubelet.ErrNotPublished) {
		return e.keepBlock(h, t, v, err)
	}
	if err != nil {
		return outcome.Unchanged, err
	}
	// The rule is read first, which grants nothing: a node whose rule is
	// in place, as on every resync of a healthy volume, is then checked in
	// one call on the namespace's thread, not two. Those calls were most
	// of what a resync wave asked of that thread.
	compute := computeOf(v)
	allowed, err := e.rules.Allowed(compute, p.Device)
	if err != nil {
		return outcome.Unchanged, err
	}
	var uncovered bool
	if !allowed {
		// The launcher's directory is judged, and a mount on the node's
		// name removed, before anything is granted; the rule goes in
		// before the node appears, so the launcher never sees a node it
		// cannot open.
		if uncovered, err = e.uncover(h, t, v.LauncherUID, v.Name); err != nil {
			return outcome.Unchanged, err
		}
		if err := e.rules.Allow(compute, p.Device); err != nil {
			return outcome.Unchanged, err
		}
	}
	did, err := e.ensureNode(h, t, v, p, allowed)
	if err != nil {
		return outcome.Unchanged, err
	}
	e.ruleWatch.watch(e.rules, compute)
	if did.r == outcome.Replaced && did.dev != p.Device {
		if err := e.denyUnlessUsed(t, v.LauncherUID, did.dev); err != nil {
			return outcome.Replaced, err
		}
	}
	switch {
	case did.r == outcome.Unchanged && (uncovered || did.uncovered):
		return outcome.Replaced, nil
	case did.r == outcome.Unchanged && !allowed:
		// Node in place but its rule was lost, e.g. the runtime rewrote the
		// cgroup's device program.
		return outcome.Created, nil
	}
	return did.r, nil
}

// ensureNode makes the launcher's node for p, removing first, when uncover
// is set, whatever is mounted on its name.
func (e *Engine) ensureNode(h hands, t *mountinfo.Table, v hotplug.DesiredVolume, p blockdev.Published, uncover bool) (nodeChange, error) {
	return inHotplugDisks(h, t, v.LauncherUID, func(live *isolation.Live, dir *os.File) (nodeChange, error) {
		var c nodeChange
		if uncover {
			n, err := mount.Uncover(live, t, dir, v.Name)
			if err != nil {
				return c, err
			}
			c.uncovered = n > 0
		}
		if err := live.Check(); err != nil {
			return c, err
		}
		var err error
		c.r, c.dev, err = h.nodes.Ensure(dir, v.Name, p)
		return c, err
	})
}

// computeOf is the container a block volume's device is allowed to: the
// launcher's compute container, where QEMU runs. While the pod status names
// none, or its cgroup is not there (not started yet; restarted, and the
// status still names the old one), the rule calls fail and the agent
// reports and retries: nothing is ever granted to the whole pod instead.
func computeOf(v hotplug.DesiredVolume) blockdev.Container {
	return blockdev.Container{PodUID: string(v.LauncherUID), ID: v.ComputeContainerID}
}

// keepBlock re-checks the rule of a block node whose volume the attachment
// pod no longer publishes (it was replaced when another volume was
// hotplugged). The rule can still be lost afterwards: a runc update from
// the CPU manager, a daemon-reload or a container restart rewrites the
// launcher's device rules, and QEMU's next open gets EPERM. The rule is
// granted again only for a node confirmed to still name the disk it was
// made for; a node that is not there stays not published.
func (e *Engine) keepBlock(h hands, t *mountinfo.Table, v hotplug.DesiredVolume, notPublished error) (outcome.Result, error) {
	dev, err := inHotplugDisks(h, t, v.LauncherUID, func(live *isolation.Live, dir *os.File) (blockdev.Device, error) {
		if _, err := mount.Uncover(live, t, dir, v.Name); err != nil {
			return blockdev.Device{}, err
		}
		if err := live.Check(); err != nil {
			return blockdev.Device{}, err
		}
		return h.nodes.Recheck(dir, v.Name)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return outcome.Unchanged, notPublished
	}
	if err != nil {
		return outcome.Unchanged, err
	}
	compute := computeOf(v)
	allowed, err := e.rules.Allowed(compute, dev)
	if err != nil {
		return outcome.Unchanged, err
	}
	r := outcome.Unchanged
	if !allowed {
		if err := e.rules.Allow(compute, dev); err != nil {
			return outcome.Unchanged, err
		}
		r = outcome.Created
	}
	e.ruleWatch.watch(e.rules, compute)
	return r, nil
}

// detachBlock removes what is mounted on the launcher's node name, then the
// node, then the rule of its device unless another node still uses it.
func (e *Engine) detachBlock(h hands, t *mountinfo.Table, launcher types.UID, name string) (outcome.Result, error) {
	did, err := inHotplugDisks(h, t, launcher, func(live *isolation.Live, dir *os.File) (nodeChange, error) {
		if _, err := mount.Uncover(live, t, dir, name); err != nil {
			return nodeChange{}, err
		}
		if err := live.Check(); err != nil {
			return nodeChange{}, err
		}
		r, dev, err := h.nodes.Remove(dir, name)
		return nodeChange{r: r, dev: dev}, err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return outcome.Unchanged, nil
	}
	if err != nil || did.r != outcome.Removed {
		return outcome.Unchanged, err
	}
	return outcome.Removed, e.denyUnlessUsed(t, launcher, did.dev)
}

// denyUnlessUsed drops the launcher's rule for dev unless another of its
// nodes still points at dev. A launcher whose cgroup is gone needs nothing.
func (e *Engine) denyUnlessUsed(t *mountinfo.Table, launcher types.UID, dev blockdev.Device) error {
	nodes, err := e.blockNodes(t, launcher)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Device == dev {
			return nil
		}
	}
	err = e.rules.Deny(string(launcher), dev)
	if errors.Is(err, podcgroup.ErrNotFound) {
		return nil
	}
	return err
}
