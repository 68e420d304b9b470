// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package hotplug is the contract between the control loop (package
// agent), the node engine (package engine) and what diag shares with them:
// a hotplug volume as the VMI wants it (DesiredVolume) and as the node
// holds it (ObservedVolume), where the kubelet published it (Source), a
// read of the mount table (Snapshot), a growth check's result
// (GrowResult), the errors the engine translates at its boundary
// (ErrStuck, ErrBusy, ErrNotPropagated), the Engine interface itself and
// its optional watchers (MountWatcher, RuleWatcher, with MountChange).
//
// It also holds the table of volume kinds (Kinds, KindOf): for each mode,
// its target's name, whether its target is a bind, whether and how it
// grows, whether it has a device rule, whether QEMU opens it, its name in
// diag's table and the metric label value it adds. The agent, the engine,
// diag and metrics ask a volume's Kind, never its mode; the engine's half
// (how a kind is attached, detached, listed and grown) is package engine's,
// diag's half (what it checks) package diag's.
//
// It owns the words, not the behaviour: it is a leaf that imports only
// kubevirt, outcome and, for the target names, kubelet, so that the engine
// implements the contract without importing the control loop, and the
// control loop drives any engine (the real one, or a test's fake) without
// knowing the node.
package hotplug
