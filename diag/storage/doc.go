// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package storage is diag's reading of the storage side of a volume: what
// attaches its PV to the node, below the kubelet. That is the
// storage.k8s.io VolumeAttachment the attach/detach controller and the CSI
// external-attacher keep, and, when Longhorn is installed, its Volume and
// its ticket-based VolumeAttachment (longhorn.io/v1beta2, read through the
// dynamic client by the fields diag needs; the Longhorn Go modules are not
// used).
//
// Collect reads them once per run, one list per kind; View.Of gives one
// PV's Side as seen from a node, with its Problem judged in one sentence
// (a stuck detach, an attach to another node, an attach error, a ticket
// that waits), and Advice and Summary say where to look and what was seen.
//
// It only reads, and none of it is required: a kind that is absent or
// forbidden is said once in Sources and the run goes on. It refuses
// everything on the node (mounts, files, the agent's rules) and every
// verdict: diag decides whether a storage problem explains a volume's
// verdict.
package storage
