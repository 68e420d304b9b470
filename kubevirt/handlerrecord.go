// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
