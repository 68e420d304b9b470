// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubevirt is hpmount's model of the KubeVirt objects it reads and
// the ownership rules it applies to them, shared by the agent and diag so
// that both judge a volume the same way:
//
//   - the few fields of a VirtualMachineInstance that are read (VMI,
//     decoded from unstructured, never panicking), its labels and phases,
//     and the volume modes;
//   - finding the VMI's virt-launcher pod on a node and checking it
//     (FindLauncher, CheckLauncher), checking that an attachment pod
//     belongs to that launcher (CheckAttachmentPod), and telling whether a
//     pod has terminated (PodTerminated);
//   - judging each hotplug volume (HotplugVolumes): refused, pending, or
//     attachable from a verified attachment pod;
//   - Place, which applies all of the above to a VMI on a node in one
//     call, so that the agent's decide and diag cannot take the steps in
//     a different order;
//   - Refusal and its reason codes, which are the reason label of
//     hpmount_refusals_total and of diag's refused verdict;
//   - virt-handler's record of the targets it made for a VMI, decoded
//     from a reader (ParseHandlerRecord); the node engine reads the file.
//
// The files follow one reconcile's path, so that it enters each only a
// few times: vmi.go is the object model (VMI, its status, DecodeVMI);
// launcher.go holds Place, chooses and checks the launcher, with the node's
// part in a migration it reads (MigrationOf, ForLauncher); volumes.go judges the
// hotplug volumes, with the spec and status accessors, the attachment pod
// check and the compute container; owners.go holds Refusal, its reasons
// and CheckVolumeName, and PodLookup.
//
// The kubevirt.io Go modules are not used: the fields are defined here and
// checked against KubeVirt's sources (see ARCHITECTURE.md).
//
// It refuses I/O: it never calls the API, never reads the node, and never
// builds a kubelet path; callers hand it objects from their caches or
// lists.
package kubevirt
