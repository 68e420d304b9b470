// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package diag is the library behind `hpmount diag`: a read-only, findmnt-
// style explanation of every hotplug volume of the VMIs on one node, from
// the VMI status down to the kernel's mount table.
//
// Run(ctx, Options, Clients) lists the node's VMIs (label
// kubevirt.io/nodeName), their launcher and attachment pods, and for each
// hotpluggable volume looks at the node as the agent would, in the host
// mount namespace (<host-proc>/<host-pid>/ns/mnt), beneath the kubelet root
// resolved there (kubelet.ResolveRoot, as the agent's engine resolves it),
// never following a symlink and never changing anything: no mount, mknod,
// chown, cgroup write or API write. It looks through the engine's
// read-only view (engine.NewView: the engine's attacher, block nodes and
// grower, made by the engine's constructor), so that the published image's
// sameness, each target's kind and the directories the agent may use are
// judged by the engine's own rules, and sizes by its read-only Measure.
// Render(w, report, format) prints it.
//
// diag owns no rule of its own: which launcher and attachment pod belong to
// a VMI, and which volumes are refused and why, come from the kubevirt
// package, the same calls the agent makes, so diag's refused verdict and its
// refusalReason match the agent's HotplugRefused Event and
// hpmount_refusals_total{reason} (test/parity holds them together). It never
// imports the agent. What a volume's target is named and which checks it
// gets come from its kind (hotplug.KindOf); diag's half of the kinds table
// (inspections, inspect.go) says which inspection each kind gets.
//
// The mount table is read once per run, with `findmnt --json --list
// --nofsroot` (FindmntArgs) or from <host-proc>/<host-pid>/mountinfo
// (mountinfo.ReadTable); ParseFindmnt turns findmnt's JSON into
// []mountinfo.Info so both feed the same mountinfo.Table and the same logic.
//
// # Verdicts
//
// Each volume gets the first verdict that applies, in the order of
// Verdicts (report.go), and every verdict but ok has a one-line hint.
// Orphans, the mounts and block nodes in a launcher's hotplug-disks that
// no VMI on the node has in spec.volumes, get orphan, or left-to-virt-
// handler where virt-handler's record of their VMI names them, judged by
// kubevirt.RecordedTargets as the agent's plan judges them. What each
// verdict means and what to do is written once, in docs/diag.md;
// vocabulary_test.go holds that table to the code.
//
// # Deadlines
//
// Every look at the node has a deadline, Options.CallTimeout (`--call-timeout`,
// default 5s): each call in the host mount namespace (the namespace's own
// timeout: the kubelet root, sources, targets, the launcher's view, sizes),
// each read of /proc (what QEMU holds: its descriptors are followed to
// their files), sysfs and the device cgroups, and the findmnt run (killed
// at it). A look past it is abandoned: its volume is judged stuck, the
// volume's remaining looks are not made, and the next volume is looked at
// on a fresh thread; a launcher directory whose listing got stuck, or the
// pods directory, is a warning in the orphan search. A mount table or
// kubelet root that does not answer means diag cannot run (exit 2). An
// abandoned call cannot be called back: its thread stays blocked in the
// kernel until the filesystem answers. diag is a command that exits after
// printing its report, which ends such a thread in a killable wait (NFS,
// FUSE); one in an uninterruptible wait holds the process's exit, not the
// report, until the filesystem answers. Only reads are made, and a frozen
// filesystem blocks writes only, so a frozen volume is judged as usual.
//
// # The storage side
//
// For each volume whose PV is known, diag also shows what attaches that PV
// to the node (package diag/storage), read with one list per kind and only
// read:
//
//   - the storage.k8s.io VolumeAttachment of the PV on this node (attached,
//     attachError, detachError, being deleted) and those on other nodes;
//   - when longhorn.io/v1beta2 serves volumes and volumeattachments (asked
//     of discovery first), the Longhorn Volume of the PV (by
//     status.kubernetesStatus.pvName, else by name): status.state,
//     robustness, currentNodeID, currentMigrationNodeID; and its Longhorn
//     VolumeAttachment's spec.attachmentTickets (id, type: who asked, such
//     as csi-attacher, snapshot-controller, backup-controller,
//     longhorn-upgrader; nodeID) with status.attachmentTicketStatuses
//     (satisfied only for the ticket's own generation, as
//     longhorn-manager's IsAttachmentTicketSatisfied; the Satisfied
//     condition's reason and message).
//
// storage.problem names, in one sentence, a Longhorn volume attached to
// another node (not its migration target; an rwx volume that is not
// migratable is a share manager's and is not judged), the tickets that hold
// it there and this node's ticket that waits (a detach stuck behind another
// ticket), a faulted volume, a VolumeAttachment's attach or detach error, a
// detach from another node that has not finished, or the PV attached to
// another node and not here. It adds no verdict: the node side decides the
// verdict, and when it is not-mounted, dead-source, stale-source,
// stale-open, wrong-device or error, the problem leads the hint ("the
// storage side explains it: ..."), since it is the cause to fix first. An
// ok volume keeps ok; its storage line still shows the problem.
//
// All of it is optional: when the Longhorn CRDs are absent, or RBAC
// forbids these reads (they are granted by the separate ClusterRole of
// deploy/storage-view), report.storage says so in one note and the run
// goes on.
//
// # Last attach
//
// Each volume's last attach the agent timed, phase by phase, is read back
// from the Events on its VMI (two field-selected lists per run, which
// need list on events): the phases up to mounted and the total from the
// agent's VolumeMounted Event, whose message ends with them, and
// launcher-ready from virt-handler's VolumeReady Event after it, in whole
// seconds (Event times have no finer grain). An expired or missing Event
// leaves it out; Events that cannot be listed are a warning.
//
// # Exit codes
//
// ExitCode(report, err): 0 every volume ok and no orphan, 1 problems found
// (Report.Problems > 0), 2 could not run (Run returned a *CannotRunError:
// bad options, API unreachable, mount table unreadable, VMI not on node).
//
// # Schema (JSON and YAML, apiVersion hpmount.io/diag/v1)
//
// Field names are lowerCamel; sizes are bytes, 0 or absent when unknown.
//
//	apiVersion: hpmount.io/diag/v1
//	node, kubeletRoot, mountSource ("findmnt"|"mountinfo")
//	propagation: {path, shared, mountPoint, mode, error}
//	volumes: - namespace, vmi, volume, claim, pvName, mode (Filesystem|Block),
//	           phase, reason,
//	           launcherPod: {name, uid}, attachmentPod: {name, uid, publishes},
//	           expectedSource, target,
//	           mount: {id, source, fsRoot, target, fsType, majMin, propagation, stacked},
//	           device: {node, published, cgroupAllowed}        (Block only)
//	           sizes: {pvcCapacity, blockDevice, filesystem, filesystemStatfs, diskImage},
//	           verdict, hint, detail,
//	           storage: {volumeAttachment: {name, attacher, node, attached, deleting,
//	                                        attachError, detachError},
//	                     elsewhere: [same, other nodes],
//	                     longhorn: {namespace, name, accessMode, migratable, state, robustness,
//	                                currentNode, currentMigrationNode,
//	                                tickets: [{id, type, node, satisfied, message}]},
//	                     problem}                              (absent when unknown)
//	           lastAttach: {mounted, totalSeconds,
//	                        phases: [{phase, seconds, approximate}]}  (absent when unknown)
//	orphans: - launcherPodUID, launcherPod, name, kind (mount|block-node),
//	           target, mount, device, verdict (orphan|left-to-virt-handler), hint
//	problems: N
//	storage: {volumeAttachments, longhorn ("read"|"absent"|"forbidden"|"error"), note}
//	warnings: [...]
//
// The table format fits 120 columns (NAMESPACE/VMI, VOLUME, MODE, PHASE,
// VERDICT, SOURCE[FSROOT] truncated in the middle, SIZE = PVC capacity) with
// the hints below it; wide adds TARGET, MAJ:MIN, PROPAGATION, STACKED,
// ATTACH-POD, DEVICE/FS/IMG sizes, LAST-ATTACH and HINT and is not
// width-limited. Below
// the grid, "storage: <note>" when a storage source was not read, and one
// "storage <ns>/<vmi> <volume>: ..." line per volume with a storage side
// (VolumeAttachment, Longhorn state/robustness and node, tickets as
// type@node satisfied|waiting, then PROBLEM: ...).
package diag
