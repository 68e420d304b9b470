// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"time"
)

// Why a VMI missing from the caches is confirmed before anything is
// detached.
//
// The agent reads a VMI from two informers (the node's own and the
// migration target's, migration.go), and KubeVirt ends a migration in
// separate updates: kubevirt.io/nodeName moves to the target, later
// kubevirt.io/migrationTargetNodeName goes. The two informers deliver
// those in either order, so on the target node a VMI can be in neither
// cache for a moment while its VM runs in the launcher the agent just
// filled. The same holds for any informer that lags its peer. Absence from
// a cache is therefore never a reason to detach on its own: the agent asks
// the API server once (a GET without resourceVersion, a quorum read) and
// detaches only on a confirmed end.

// goneRecheck is how soon a VMI whose absence was not confirmed is looked
// at again, if no informer event brings it back first.
const goneRecheck = 2 * time.Second

// Results of confirming that a VMI left this node, reported to
// Observer.GoneCheck.
const (
	// GoneConfirmed: the API server has no such VMI.
	GoneConfirmed = "gone"
	// GoneReplaced: the name now holds another VMI (another UID).
	GoneReplaced = "replaced"
	// GoneElsewhere: the VMI names neither this node nor this node as its
	// migration target, and its status does not put its VM here.
	GoneElsewhere = "elsewhere"
	// GoneStillHere: the VMI still names this node, by a label, by
	// status.nodeName, or as the target of a completed migration; a cache
	// lags.
	GoneStillHere = "still-here"
	// GoneUnknown: the API server could not be asked.
	GoneUnknown = "unknown"
)

// GoneChecks lists every result of a confirmation.
var GoneChecks = []string{GoneConfirmed, GoneReplaced, GoneElsewhere, GoneStillHere, GoneUnknown}
