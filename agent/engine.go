// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import "github.com/hpmount/hpmount/hotplug"

// The control loop's names for the engine's contract, which package
// hotplug owns; the agent reads as before, and the engine implements the
// contract without importing the agent.
type (
	Source         = hotplug.Source
	DesiredVolume  = hotplug.DesiredVolume
	ObservedVolume = hotplug.ObservedVolume
	GrowResult     = hotplug.GrowResult
	Snapshot       = hotplug.Snapshot
	Engine         = hotplug.Engine
	HandlerRecord  = hotplug.HandlerRecord
	MountChange    = hotplug.MountChange
	MountWatcher   = hotplug.MountWatcher
	RuleWatcher    = hotplug.RuleWatcher
)

// The engine's errors, hotplug's.
var (
	ErrBusy          = hotplug.ErrBusy
	ErrNotPropagated = hotplug.ErrNotPropagated
	ErrStuck         = hotplug.ErrStuck
)
