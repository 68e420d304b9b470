// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package agent is the control loop of hpmount: it watches the
// VirtualMachineInstances scheduled to this node and the pods on this node,
// computes for every VMI the hotplug volumes its virt-launcher pod should
// see, compares that with what the node Engine observes, and applies the
// difference through the Engine. It reports through Events on the VMI,
// optionally the VMI's status.volumeStatus, structured logs and an Observer
// hook for metrics.
//
// The agent owns the Kubernetes side only: it never builds kubelet paths,
// never touches the mount table, device nodes or cgroups itself; all of that
// is the Engine's (package hotplug holds the contract, engine.go names it;
// the real engine is package engine). Its import graph says so: no mount,
// blockdev or engine (test/deps). Which pods and
// volumes belong to a VMI, and the refusal reasons, are package kubevirt's.
//
// One reconcile of one VMI reads as its phases, each in its own file, called
// in order from reconcile.go:
//   - world (world.go): the VMI or its absence, read from the caches, with
//     what the agent remembers of it, whether the pass is a resync, and
//     when the change it reconciles arrived;
//   - decide (decide.go, pure): the launcher, the node's part in a
//     migration, the launchers to empty (gone, terminated, abandoned by a
//     failed migration) or to hold (a source handing over), and the
//     volumes' intents. A VMI gone from the caches is a world in which its
//     remembered launchers want nothing;
//   - observe (observe.go): the API server's word on a gone VMI (gone.go
//     says why it is asked), one mount-table snapshot, Engine.Observe of
//     each launcher involved;
//   - plan (plan.go, pure): detaches, then attaches and verifies, then
//     growth checks, per launcher;
//   - apply (apply.go): the only caller of the Engine's changing methods;
//     growth checks go to the growth runner (growth.go);
//   - summarize (summarize*.go, pure): every Event, metric, log, status
//     update and requeue of the pass, and the state to remember;
//   - report (report.go): the only sender of Events and metrics for a VMI,
//     the only writer of its remembered state; volumeStatus goes to the
//     status writer (status.go).
//
// The orphan sweep (orphans.go) belongs to no VMI and runs in a loop and
// queue of its own. An Engine that is also a MountWatcher (mountevents.go)
// wakes the VMI of a launcher whose mounts someone changed, so a foreign
// unmount or stack is repaired at once; the resync stays the safety net.
//
// Its informers wait out an unreachable API server through one gate
// (gate.go) instead of client-go's backoff, and are released over a
// spread that grows with the outage, so that the nodes of a cluster do
// not all list at once when the server comes back.
//
// Rules it enforces:
//   - a volume is attached only from an attachment pod that is verified to
//     belong to this VMI's launcher on this node; any mismatch is refused
//     with a Warning Event, and existing healthy mounts are kept;
//   - a volume is detached only on a confirmed fact from a synced informer
//     cache: the VMI is gone, the volume left spec.volumes, or the launcher
//     pod is gone from this node. A failed or slow API call never detaches;
//   - on shutdown every mount stays where it is.
package agent
