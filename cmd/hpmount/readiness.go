package main

import (
	"context"
	"path/filepath"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/propagation"
)

// propagationGate keeps the agent unready while the kubelet's pods
// directory is not on a shared mount in the host namespace: mounts made
// there would never reach the launchers' HostToContainer views.
func propagationGate(cfg agent.Config) func(context.Context) error {
	return func(context.Context) error {
		t, err := mount.ReadTable(cfg.HostMountInfo())
		if err != nil {
			return err
		}
		root, err := filepath.EvalSymlinks(cfg.KubeletRoot)
		if err != nil {
			root = cfg.KubeletRoot
		}
		return propagation.CheckShared(t, filepath.Join(root, "pods"))
	}
}
