// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hpmount/hpmount/test/cluster"
)

// containerdConfig is containerd 1.6's config (version 2) for the node:
// every directory under dir, the CRI plugin with the local pause image,
// runc under cgroupfs with its state under dir, and the CNI conf and bin
// dirs.
//   - restrict_oom_score_adj: this machine's root lacks CAP_SYS_RESOURCE,
//     and runc setting a lower oom_score_adj fails with "can't get final
//     child's PID from pipe: EOF".
//   - netns_mounts_under_state_dir: pod network namespaces are pinned
//     under dir, not in /run/netns.
//   - opt path: the opt plugin would create /opt/containerd.
func containerdConfig(dir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socketPath(dir),
		filepath.Join(dir, "opt"), PauseImage, filepath.Join(dir, "runc"), cniBinDir, filepath.Join(dir, "net.d"))
}

func socketPath(containerdDir string) string {
	return filepath.Join(containerdDir, "containerd.sock")
}

// startContainerd writes the config under dir, starts containerd and waits
// for its socket to accept connections.
func startContainerd(ctx context.Context, dir string) (*cluster.Child, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("containerd dir %q: %w", dir, err)
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(containerdConfig(dir)), 0o644); err != nil {
		return nil, fmt.Errorf("write %q: %w", config, err)
	}
	child, err := cluster.StartChild("containerd", "containerd",
		[]string{"--config", config, "--log-level", "info"}, filepath.Join(dir, "containerd.log"))
	if err != nil {
		return nil, err
	}
	if err := waitSocket(ctx, child, socketPath(dir)); err != nil {
		_ = child.Stop()
		return nil, err
	}
	return child, nil
}

// waitSocket polls until a unix socket accepts a connection.
func waitSocket(ctx context.Context, child *cluster.Child, path string) error {
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-child.Done():
			return child.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("wait for socket %q: %w\n%s", path, ctx.Err(), child.Tail(30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
