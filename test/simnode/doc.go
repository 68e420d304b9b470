// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package simnode simulates the node side of a KubeVirt cluster for the
// end-to-end tests and the demo: a kubelet root with the layout the kubelet
// and a CSI driver leave (filesystem volumes mounted at the CSI publish path
// of attachment pods, block volumes bind-mounted at the CSI block publish
// path and linked from volumeDevices), launchers' hotplug-disks directories,
// launcher processes in slave mount namespaces inside their own device
// cgroup, and real ext4/xfs filesystems on loop devices.
//
// Everything happens in the caller's mount namespace, which must be a
// private one (see ReexecInPrivateNamespace): it plays the host.
package simnode
