// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// handlerRecords are virt-handler's records of the node's VMIs, judged by
// kubevirt's rule (kubevirt.RecordedTargets), by the launcher they speak
// for. The agent leaves what they name to virt-handler, so the orphan
// search calls it left-to-virt-handler, not orphan: removing it by hand
// would make virt-handler's Unmount fail at every later sync.
type handlerRecords map[types.UID]kubevirt.RecordedTargets

// leaves reports whether the record of launcher's VMI leaves the entry
// name (a target file "v.img" or a block node "v") to virt-handler.
func (h handlerRecords) leaves(launcher types.UID, name string) bool {
	r, ok := h[launcher]
	return ok && r.Leaves(launcher, name)
}

// readHandlerRecords reads the record of each VMI and keeps it for the
// launchers the agent applies it to: those whose pod is listed (the
// agent's plan, leftToHandler), the abandoned target of a failed
// migration too. A record that cannot be read is a warning; its targets
// stay orphans.
func (in *inspector) readHandlerRecords(cl *apiView, vmis []*kubevirt.VMI, warn func(string)) handlerRecords {
	out := handlerRecords{}
	if in.opts.HandlerStateDir == "" {
		return out
	}
	for _, vmi := range vmis {
		rec, err := in.handlerRecord(vmi.UID)
		if err != nil {
			warn(fmt.Sprintf("virt-handler's record of VMI %s/%s not read: %v", vmi.Namespace, vmi.Name, err))
			continue
		}
		if rec.Stuck != "" {
			warn(stuckRecord(vmi, rec.Stuck))
		}
		for l := range rec.Volumes {
			if _, listed := cl.pods[l]; listed {
				out[l] = rec
			}
		}
	}
	return out
}

// stuckRecord is the warning for a record that names a target that is
// gone, or cannot be decoded: virt-handler's Unmount returns there before
// it rewrites the record, which it keeps in memory, so only the VMI
// leaving the node resets it. A failed migration leaves such a record on
// its target node once the kubelet removed the abandoned launcher's pod
// (TestKnown17882MigrationAgain in test/peer/kubevirt).
func stuckRecord(vmi *kubevirt.VMI, at string) string {
	return fmt.Sprintf("virt-handler's record of VMI %s/%s names a target that is gone, or cannot be read (%s): while the VMI runs on this node, "+
		"virt-handler's Unmount fails there at every sync (a SyncFailed Warning, Synchronized=False) until the VMI leaves the node "+
		"(kubevirt#16532, #17882); hpmount removes the VMI's hotplug volumes itself meanwhile", vmi.Namespace, vmi.Name, at)
}

// handlerRecord reads and judges the VMI's record in the host mount
// namespace, as the agent's engine does: no record is an empty one, and
// one that cannot be decoded leaves nothing to virt-handler, whose own
// Unmount fails on it too.
func (in *inspector) handlerRecord(vmi types.UID) (kubevirt.RecordedTargets, error) {
	if err := isolation.ValidName("vmi uid", string(vmi), isolation.MaxNameLen); err != nil {
		return kubevirt.RecordedTargets{}, err
	}
	rec, err := isolation.Call(in.ns, func() (kubevirt.RecordedTargets, error) {
		raw, err := isolation.ReadFileBeneath(in.opts.HandlerStateDir, string(vmi), kubevirt.MaxHandlerRecord+1)
		if errors.Is(err, fs.ErrNotExist) {
			return kubevirt.RecordedTargets{}, nil
		}
		if err != nil {
			return kubevirt.RecordedTargets{}, err
		}
		parsed, err := kubevirt.ParseHandlerRecord(bytes.NewReader(raw))
		if err != nil {
			return kubevirt.RecordedTargets{Stuck: err.Error()}, nil
		}
		return parsed.Judge(func(l types.UID) (map[string]bool, error) { return kubelet.TargetNames(in.root, string(l)) })
	})
	return rec, lookingAt(fmt.Sprintf("read virt-handler's record of VMI %s", vmi), err)
}
