package main

import (
	"github.com/hpmount/hpmount/agent"
)

// growPrivateDir holds the agent's temporary mounts of a filesystem being
// grown; /run is a tmpfs on the host, so a crash leaves nothing across
// reboots.
const growPrivateDir = "/run/hpmount/grow"

// newEngine builds the node engine (mount and blockdev packages) for cfg.
func newEngine(cfg agent.Config) (agent.Engine, error) {
	return agent.NewNodeEngine(agent.NodeEngineConfig{
		MountNamespace: cfg.HostMountNamespace(),
		MountInfo:      cfg.HostMountInfo(),
		KubeletRoot:    cfg.KubeletRoot,
		CgroupRoot:     cfg.CgroupRoot,
		CgroupMode:     string(cfg.CgroupMode),
		SysRoot:        "/sys",
		DevRoot:        "/dev",
		PrivateDir:     growPrivateDir,
		UID:            cfg.QEMUUID,
		GID:            cfg.QEMUGID,
		Grow:           agent.GrowPolicy{Filesystems: cfg.GrowFilesystems, DiskImages: cfg.ExpandDiskImages},
	})
}
