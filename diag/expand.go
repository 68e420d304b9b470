// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"

	"github.com/hpmount/hpmount/grow"
	"github.com/hpmount/hpmount/kubevirt"
)

// notGrownWhy explains a claim that asks for more than it has while its
// device has not grown: an expansion that never reached the volume, so
// nothing on the node can grow. It is "" when the claim is not behind, when
// the device is not measured, or when the filesystem is merely behind its
// device (needs-fs-expand: the node's part, which the agent does).
//
// The margin is grow.SlackBytes, the agent's own: a device within it
// of the request is what the storage rounded the request to.
func notGrownWhy(st *kubevirt.VolumeStatus, device int64, fsBehind bool) string {
	if st == nil || st.PersistentVolumeClaimInfo == nil || device <= 0 || fsBehind {
		return ""
	}
	info := st.PersistentVolumeClaimInfo
	requested, capacity := info.Requests.StorageBytes(), info.Capacity.StorageBytes()
	if requested <= capacity || device+grow.SlackBytes >= requested {
		return ""
	}
	return fmt.Sprintf("the claim requests %s but its capacity is %s and its device is %s: the expansion has not reached the volume, so there is nothing the node can grow",
		human(requested), human(capacity), human(device))
}

// expandPendingHint names the likely causes, Harvester's resize gate first:
// its PVC webhook refuses online expansion of a hotplugged filesystem-mode
// claim while its VM is not stopped (README "Expansion on Harvester").
const expandPendingHint = "the storage side has not grown the volume: `kubectl describe pvc` for a resize that is pending " +
	"or failed (ExternalExpanding, VolumeResizeFailed); on Harvester, its PVC webhook admits expansion of a " +
	"hotplugged filesystem-mode PVC only while every VM using it is stopped: stop the VM, let the expansion finish, " +
	"start the VM (README, Expansion on Harvester)"
