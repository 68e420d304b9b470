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
// chown, cgroup write or API write; sizes come from the read-only
// mount.Grower.Measure. Render(w, report, format) prints it.
//
// diag owns no rule of its own: which launcher and attachment pod belong to
// a VMI, and which volumes are refused and why, come from the kubevirt
// package, the same calls the agent makes, so diag's refused verdict and its
// refusalReason match the agent's HotplugRefused Event and
// hpmount_refusals_total{reason} (test/parity holds them together). It never
// imports the agent.
//
// The mount table is read once per run, with `findmnt --json --list
// --nofsroot` (FindmntArgs) or from <host-proc>/<host-pid>/mountinfo
// (mountinfo.ReadTable); ParseFindmnt turns findmnt's JSON into
// []mountinfo.Info so both feed the same mountinfo.Table and the same logic.
//
// # Verdicts
//
// Each volume gets the first verdict that applies, in this order, and every
// verdict but ok has a one-line hint:
//
//   - refused: the agent will not touch the volume: the volume name is not
//     one plain file name; the launcher pod does not belong to the VMI; the
//     attachment pod is not controlled by the launcher; disk.img is a
//     symlink, device, FIFO or socket, has more than one hard link or is a
//     mount of its own; the target <vol>.img is not a regular file (or the
//     block target not a block device). Hint: fix what the detail names;
//     hpmount never touches it.
//   - stuck: a look at the volume got no answer within the call timeout
//     (see Deadlines) and was abandoned: its storage hangs (a hard-mounted
//     NFS server gone, a hung FUSE daemon). Hint: check dmesg for hung
//     tasks and the storage backend.
//   - dead-source: inspecting the volume failed with an error that means
//     its filesystem is gone (EIO, ESTALE, ENOTCONN, EHOSTDOWN, ENXIO,
//     ENODEV: shut down after an error, its device or storage server gone).
//     Hint: check the kernel log and the storage backend; no remount
//     repairs it: unplug the volume or restart the VM once storage is back.
//   - error: the volume could not be inspected (permissions, I/O). Hint:
//     run diag with the agent's privileges (kubectl exec into the agent pod).
//   - propagation-broken: propagation.CheckShared fails for
//     <kubelet-root>/pods, so mounts never reach launchers. Hint: `mount
//     --make-rshared <mount point>` on the host, made persistent as the
//     detail (the propagation error) says, then recreate launcher pods.
//   - not-mounted: nothing at the target. Hints by cause: no running
//     launcher on this node (check the VMI and its pods); no attachment pod
//     yet (wait for virt-controller); the kubelet does not publish the
//     volume (describe the attachment pod); else the agent has not attached
//     it (check that it runs, its logs and the VMI's events).
//   - stale-source: the mounted disk.img was deleted, its device is gone
//     (e.g. a lazily detached loop), or it is another file than the one the
//     attachment pod publishes; for a block volume, the node's device no
//     longer exists. Hint: the agent replaces it on its next reconcile, or
//     `umount <target>` (block: `rm <target>`).
//   - stacked: more than one mount on <vol>.img. Hint: "unmount all but
//     one: `umount <target>` N-1 times, the agent will remount".
//   - not-propagated: the bind is in place on the host, but a process of
//     the launcher that mounts hotplug-disks (at
//     kubevirt.HotplugDisksMountPath) sees something else under the
//     target's name (propagation.LauncherView.Check, as the agent asks it).
//     Hint: restart the launcher pod (migrate the VM); mounting again does
//     not help.
//   - stale-open: the launcher's QEMU (a process of the pod whose command
//     starts with "qemu", propagation.LauncherView.Held) holds under the
//     target's name a device other than the one published now (block), or
//     another file than the bound disk.img (filesystem). Hint: the guest
//     writes to a disk that is gone; unplug and plug again, or restart
//     the VM; hpmount never acts on QEMU.
//   - wrong-device: the block node's major:minor is not the device the
//     kubelet published for the attachment pod. Hint: the agent replaces it,
//     or `rm <target>` and let it recreate the node.
//   - not-allowed: the launcher's device cgroup (DeviceRules.Allowed for the
//     launcher pod UID) does not allow the block node's device. Hint: check
//     the agent's --cgroup-root/--cgroup-mode and logs.
//   - needs-fs-expand: the block device under the file bind is larger than
//     the filesystem's own size (ext superblock, xfs geometry) by more than
//     mount.GrowSlackBytes: the volume was expanded after its attachment pod
//     was replaced. Hint: "the filesystem is smaller than its device: run the
//     agent with --grow-filesystems, or `xfs_growfs <target>`" (ext4:
//     resize2fs on the device).
//   - expand-pending: a filesystem volume whose claim (persistentVolumeClaimInfo
//     in VMI status) requests more than its capacity while its device has
//     not grown past the capacity (within mount.GrowSlackBytes of the
//     request) and its filesystem is not behind the device: the expansion
//     never reached the volume, so nothing on the node can grow. Hint: the
//     storage side has not grown it (`kubectl describe pvc`); on Harvester
//     the PVC webhook admits expansion of a hotplugged filesystem-mode PVC
//     only while its VM is stopped.
//   - not-open: QEMU runs but holds nothing under the target's name
//     (expected until KubeVirt attaches the disk; also what a file bind
//     detached under QEMU's descriptor looks like: the detail then lists
//     QEMU's files on detached mounts, which diag, with no memory of the
//     former bind, does not tie to the volume; the agent does and reports
//     stale-open). Without a QEMU process
//     the volume's qemu field says "no QEMU found" and the verdict is not
//     changed.
//   - ok: mounted once, from the published disk.img (or, when the
//     attachment pod no longer publishes it, from a live source), or a block
//     node of the published device that the cgroup allows.
//
// Orphans get the verdict orphan: a mounted <x>.img or a block node in the
// hotplug-disks directory of a pod under <kubelet-root>/pods that no VMI on
// this node has in spec.volumes. Hint: the agent removes it when it
// reconciles the launcher's VMI; if the VMI is gone, `umount <target> && rm
// <target>` (block: `rm <target>`).
// Orphans get the verdict left-to-virt-handler instead where virt-handler's
// record of the VMI (Options.HandlerStateDir) names them, judged by
// kubevirt.RecordedTargets, the rule the agent's plan applies: virt-handler
// removes them itself, the agent leaves them, and they are no problem.
// Hint: do not remove them by hand, or virt-handler's Unmount fails at
// every sync. Without the right to list VMIs of all namespaces only
// launchers of the listed VMIs are searched (a warning says so); with VMI
// names given, only their launchers.
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
