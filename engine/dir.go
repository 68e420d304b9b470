// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// CreateDiskImagesFlag is the agent's flag that lets the engine create a
// missing disk.img; a refused attach names it.
const CreateDiskImagesFlag = "--create-disk-images"

// attachDir binds the published PVC's root onto its target
// hotplug-disks/name(v.Name), a directory.
func (e *Engine) attachDir(h hands, t *mountinfo.Table, v hotplug.DesiredVolume, src string, name func(string) string) (outcome.Result, error) {
	file, err := targetName(v.Name, name)
	if err != nil {
		return outcome.Unchanged, refusal(err)
	}
	r, err := h.attacher.AttachDir(t, src, hotplugDisks(v.LauncherUID), file)
	if err != nil || !r.Changed() {
		return r, refusal(err)
	}
	return r, e.confirmSeenAt(h.ns, v.LauncherUID, v.Name, file, entryKey{})
}

// attachFile binds disk.img onto its target hotplug-disks/name(v.Name),
// first creating it if it is missing and the engine may
// (Config.CreateDiskImages). A created image makes the result Created.
func (e *Engine) attachFile(h hands, t *mountinfo.Table, v hotplug.DesiredVolume, src string, name func(string) string) (outcome.Result, error) {
	file, err := targetName(v.Name, name)
	if err != nil {
		return outcome.Unchanged, refusal(err)
	}
	r, err := h.attacher.Attach(t, src, hotplugDisks(v.LauncherUID), file)
	if errors.Is(err, mount.ErrNoDiskImage) {
		if !e.createImages {
			return r, fmt.Errorf("the PVC holds no disk.img (a volume never imported?) in %q: start the agent with %s to create it: %w",
				e.root.Abs(src), CreateDiskImagesFlag, err)
		}
		size, created, cerr := h.attacher.CreateDiskImage(src, v.CapacityBytes, v.FilesystemOverhead)
		if cerr != nil {
			return outcome.Unchanged, refusal(cerr)
		}
		r, err = h.attacher.Attach(t, src, hotplugDisks(v.LauncherUID), file)
		if err == nil && created && size > 0 {
			r = outcome.Created
		}
	}
	if err != nil || !r.Changed() {
		return r, refusal(err)
	}
	return r, e.confirmSeen(h.ns, v.LauncherUID, v.Name, entryKey{})
}
