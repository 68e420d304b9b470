// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import (
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/sandbox"
)

// PublishHanging publishes a sandbox.HangingFS (storage that stops
// answering once told to) as pv's filesystem for the pod, as NodePublish
// of a FUSE-backed volume would; Node.Close aborts it and unmounts it.
func (n *Node) PublishHanging(podUID, pv string) (*sandbox.HangingFS, error) {
	dir := n.CSIMountDir(podUID, pv)
	fs, err := sandbox.MountHangingFS(dir)
	if err != nil {
		return nil, err
	}
	n.defer_(func() {
		fs.Abort()
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	return fs, nil
}
