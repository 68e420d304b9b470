// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubelet"
)

// HandlerStateDir is where virt-handler's hotplug mounter keeps, per VMI
// UID, the record of the targets it made on its node
// (pkg/virt-handler/hotplug-disk, mountStateDir).
const HandlerStateDir = "/var/run/kubevirt-private/hotplug-volume-mount-state"

// MaxHandlerRecord bounds how much of one record is read: a record holds
// one short entry per target virt-handler made for the VMI, so a larger
// file is not one virt-handler wrote.
const MaxHandlerRecord = 1 << 20

// HandlerRecord is virt-handler's record of one VMI's hotplug targets on
// its node, written when it binds a target (not when it finds one bound).
// virt-handler removes a recorded target itself once its volume has left
// the VMI's spec, or the VMI is gone; hpmount leaves such a target to it.
type HandlerRecord struct {
	// Targets are the targets' paths as virt-handler wrote them, in its
	// own view of the kubelet's pods directory.
	Targets []string
}

// handlerRecordJSON is the file as virt-handler writes it
// (vmiMountTargetRecord); other fields are ignored.
type handlerRecordJSON struct {
	Entries []struct {
		TargetFile string `json:"targetFile"`
	} `json:"mountTargetEntries"`
}

// ParseHandlerRecord decodes one record. A record that is not such a JSON
// object, or is larger than MaxHandlerRecord, is an error: virt-handler's
// own Unmount fails on it as well, so nothing it names is left to it.
func ParseHandlerRecord(r io.Reader) (HandlerRecord, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxHandlerRecord+1))
	if err != nil {
		return HandlerRecord{}, fmt.Errorf("read virt-handler's record: %w", err)
	}
	if len(b) > MaxHandlerRecord {
		return HandlerRecord{}, fmt.Errorf("virt-handler's record is larger than %d bytes", MaxHandlerRecord)
	}
	var j handlerRecordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return HandlerRecord{}, fmt.Errorf("decode virt-handler's record: %w", err)
	}
	var rec HandlerRecord
	for _, e := range j.Entries {
		if e.TargetFile == "" {
			return HandlerRecord{}, errors.New("decode virt-handler's record: an entry names no target")
		}
		rec.Targets = append(rec.Targets, e.TargetFile)
	}
	return rec, nil
}

// RecordedTargets is a record judged against the launchers' hotplug-disks
// listings: the targets that are virt-handler's to remove. The agent
// leaves them to it and diag says so; both judge through this one rule.
type RecordedTargets struct {
	// Volumes are the recorded targets, by launcher, by the name of the
	// volume whose target they can be (a file target "v.img" counts for
	// the volumes "v" and "v.img").
	Volumes map[types.UID]map[string]bool
	// Stuck names a recorded target that is gone (or says why the record
	// cannot be read), "" if none. virt-handler's Unmount opens the
	// recorded targets in turn and returns at one that is gone, before
	// it rewrites its record, so it fails there at every sync and never
	// removes the targets after it (kubevirt#16532): nothing is left to
	// it then.
	Stuck string
}

// Judge maps each recorded target onto the launcher and volume names it
// can be, and finds a recorded target that is gone from its launcher's
// listing (listed returns the entry names of a launcher's hotplug-disks,
// empty once it is gone). Paths are matched by their last components
// (kubelet.HotplugTargetOf): virt-handler spells them in its own view of
// the pods directory. A path that is no hotplug target is skipped:
// nothing hpmount would touch.
func (r HandlerRecord) Judge(listed func(launcher types.UID) (map[string]bool, error)) (RecordedTargets, error) {
	out := RecordedTargets{Volumes: map[types.UID]map[string]bool{}}
	names := map[types.UID]map[string]bool{}
	for _, p := range r.Targets {
		uid, name, ok := kubelet.HotplugTargetOf(p)
		if !ok {
			continue
		}
		l := types.UID(uid)
		if names[l] == nil {
			n, err := listed(l)
			if err != nil {
				return RecordedTargets{}, err
			}
			names[l] = n
		}
		if !names[l][name] && out.Stuck == "" {
			out.Stuck = p
		}
		if out.Volumes[l] == nil {
			out.Volumes[l] = map[string]bool{}
		}
		out.Volumes[l][name] = true
		if v, ok := kubelet.FileTargetVolume(name); ok {
			out.Volumes[l][v] = true
		}
	}
	return out, nil
}

// Leaves reports whether the launcher's volume is virt-handler's to
// remove: its record names the target and it can still act on its
// record. hpmount removing such a target first makes virt-handler's
// Unmount fail on it at every later sync; and virt-handler's Mount, which
// walks volumeStatus, would bind it again while the volume is listed
// there.
func (r RecordedTargets) Leaves(launcher types.UID, volume string) bool {
	return r.Stuck == "" && r.Volumes[launcher][volume]
}

// Names reports whether the record names a target in launcher. After a
// failed migration virt-handler keeps its record of the abandoned target
// launcher (kubevirt#17882): once the kubelet has removed that pod's
// directory, each target it names is gone, and virt-handler's Unmount
// fails there at every sync should the VMI come back to the node.
func (r RecordedTargets) Names(launcher types.UID) bool {
	return len(r.Volumes[launcher]) > 0
}
