// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

// runImage runs the image's entrypoint with args in rootfs under runc (the
// runtime the real node's containerd uses), as the image's user, with its
// environment, read-only, in namespaces of its own, and returns what it
// printed.
func runImage(t *testing.T, rootfs string, cfg ImageConfig, args ...string) string {
	t.Helper()
	testutil.RequiresRoot(t)
	bundle := filepath.Dir(rootfs)
	spec := runtimeSpec(append(append([]string(nil), cfg.Entrypoint...), args...), cfg.Env)
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	id := fmt.Sprintf("hpmount-release-test-%d", os.Getpid())
	cmd := exec.Command("runc", "--root", state, "run", "--bundle", bundle, id)
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() { _ = exec.Command("runc", "--root", state, "delete", "--force", id).Run() })
	if err != nil {
		t.Fatalf("runc run %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runtimeSpec is an OCI runtime configuration (runtime-spec 1.0) for one
// command: root, no new privileges, a read-only root, /proc and a /dev.
func runtimeSpec(args, env []string) map[string]any {
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false, "user": map[string]int{"uid": 0, "gid": 0},
			"args": args, "env": env, "cwd": "/", "noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "hpmount-release-test",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "mode=755", "size=1m"}},
		},
		"linux": map[string]any{
			"namespaces": []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}},
		},
	}
}
