// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"time"

	"github.com/hpmount/hpmount/kubevirt"
)

// Event reasons of live migrations and of the launcher choice.
const (
	EventLauncherChosen         = "LauncherChosen"
	EventMigrationTargetReady   = "MigrationTargetReady"
	EventMigrationTargetCleaned = "MigrationTargetCleaned"
	EventMigrationTargetLeft    = "MigrationTargetLeft"
	EventMigrationSourceCleaned = "MigrationSourceCleaned"
)

// Why the agent watches a second set of VMIs.
//
// A VMI is labelled kubevirt.io/nodeName with its source node until the
// handoff of a live migration completes; the target node learns about it
// only from kubevirt.io/migrationTargetNodeName, which virt-controller sets
// at the handoff, when the target launcher is ready. virt-handler watches
// both labels for the same reason. The target informer is scoped and
// trimmed exactly like the node's own, and reconcile reads a VMI from
// whichever cache holds it (lookupVMI). A pod change finds a target VMI
// through its launcher's owner reference; anything else a target VMI
// waits for is picked up by the VMI's own changes and by the resync of
// the keys the agent remembers.

// migrationState is what the agent remembers of a VMI's migration.
type migrationState struct {
	kubevirt.Migration
	// handoff is when this agent first saw the handoff to this node.
	handoff time.Time
	// ready and cleaned: the migration's Event was sent (cleaned:
	// MigrationTargetCleaned or MigrationTargetLeft).
	ready, cleaned bool
}
