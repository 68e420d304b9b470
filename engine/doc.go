// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package engine is the real engine behind hotplug.Engine, the interface the
// agent drives: everything the agent asks of the node, done in the host's mount
// namespace by the packages that own each part.
//
//   - What is mounted, found one of two ways chosen at New (snapshot.go):
//     on Linux ≥ 6.8, each call reads its own launcher's hotplug-disks with
//     statmount(2) and listmount(2) (mountinfo.ReadBeneath), so a change
//     costs a few syscalls instead of a read of the node's whole table
//     (what Observe read serves the batch's later calls about the launcher
//     until one changes it);
//     where the kernel cannot (mountinfo.ErrNoStatmount) or
//     Config.WholeTable says so, the host's mountinfo is read once per
//     batch and shared by every call of a reconcile. A launcher whose
//     hotplug-disks is a mount of its own is judged from the whole table
//     either way (read at most once per batch): mount's rule for it needs
//     every mount of the node. Both give mount and blockdev the same
//     table entries (TestObservationPathsAgree).
//   - Filesystem volumes through mount (bind of disk.img, observe, detach,
//     growth, and creating a missing disk.img when Config.CreateDiskImages
//     allows); directory volumes (memory-dump, utility) through mount's
//     directory binds; block volumes through blockdev (node, device-cgroup rule,
//     device size), on the launcher's hotplug-disks opened through mount's
//     launcher-directory rule (mount.InLauncherDir, against the batch's
//     table) and with any mount on the node's name removed first
//     (mount.Uncover): one owner of the rule, and blockdev needs no mount
//     table; every kubelet path through kubelet, with the kubelet
//     root resolved once, in the host namespace, at New.
//   - The agent's readiness gate (CheckPropagation) on that same root.
//   - virt-handler's record of a VMI's targets (HandlerRecord, handler.go),
//     read in the host's namespace and never written: which targets, by
//     launcher and volume, and whether one it names is gone.
//   - Mount changes as they happen (WatchMounts, agent.MountWatcher),
//     through mountwatch on the host namespace and that same root, when
//     Config.MountEvents allows and the kernel has mount notifications;
//     the agent's resync is the path otherwise.
//   - Whether the storage under each healthy bind still answers, asked on
//     every Observe off the namespace's thread, and the probes it gave up
//     on (answers.go).
//   - Which thread in the host namespace runs what: every call that can
//     wait on a volume's storage (attach, detach, growth) on a runner of
//     its own from a small pool, a volume whose call was given up on not
//     asked again until that call returns, and at most heldLimit threads
//     held at once (storage.go); Observe reads on lookers of its own, a
//     launcher always on the same one (look.go), in one call for the
//     launcher's listing and one per volume for the checks not remembered
//     (listing.go); one serial thread for the rest (the launcher listing,
//     virt-handler's record, the readiness gate's reads).
//
// How each kind of volume is listed, attached, detached and grown is its
// entry in the engine's half of the kinds table (kinds.go), keyed by the
// kinds of hotplug.Kinds: the engine asks the table, never the mode.
//
// View (view.go) is the engine's read-only view for diag: the same parts
// (attacher, block nodes, grower), made by the same constructor as the
// engine's, with only their looks exposed.
//
// It translates engine errors at its own boundary, so that the agent
// imports none of mount, blockdev or isolation: tenant content the node
// refuses becomes a *kubevirt.Refusal (unsafe-content), a volume the
// kubelet does not publish wraps kubelet.ErrNotPublished, and growth
// reports the slack by which a claim may sit below its device.
//
// Liveness fails only when a restart would help: a thread that could not
// be started in the host namespace, or an attach or detach stuck past the
// limit in a thread a signal reaches. A thread in uninterruptible sleep (a
// frozen filesystem) keeps the process from exiting until its wait ends,
// so a restart would only take the agent down until the storage thaws;
// and growth, on its own runner, is never a reason to restart.
//
// It refuses to decide anything: which volumes belong where, when to
// detach and what to report are the agent's.
package engine
