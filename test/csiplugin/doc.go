// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package csiplugin is a small CSI node plugin written for the real-node
// tests (issue #12): driver csi.hpmount.test, backed by loop devices over
// files the test creates. The kubelet under test stages, publishes,
// unpublishes, unstages and expands its volumes exactly as it would a
// production driver's, and every call is recorded, so a test can say which
// calls the real kubelet made.
//
// It owns:
//   - the Identity and Node services over a unix socket (NodeStageVolume
//     attaches the volume's backingFile to a loop device with the loop
//     ioctls, makes an ext4 or xfs filesystem on a blank device and mounts
//     it at the staging path; NodePublishVolume bind-mounts the staging
//     mount, or for a block volume the loop device node onto the publish
//     file it creates; NodeExpandVolume refreshes the loop capacity and
//     grows the filesystem with xfs_growfs or resize2fs), every call
//     idempotent as the CSI spec asks;
//   - the kubelet plugin-registration server on
//     <registration dir>/csi.hpmount.test-reg.sock;
//   - the record of staged volumes in the state directory (volume id → loop
//     device), so that a restarted plugin finds its devices;
//   - the call log (one JSON line per gRPC call, Call, ReadCalls) and the
//     CSIDriver object the real-node package creates (CSIDriver);
//   - GrowBackingFile, the storage backend's side of a resize.
//
// It refuses to be a storage system: there is no controller service,
// volumes are static PVs naming a backing file the test made, and nothing
// here provisions, snapshots or deletes data. It never stacks a second mount
// on a path and never attaches one backing file to two loop devices.
//
// cmd/hpmount-test-csi runs it as its own process with the flags the real
// node passes (see Config).
package csiplugin
