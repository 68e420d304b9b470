// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hpmount/hpmount/internal/testutil"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestBinaryRegisters builds cmd/hpmount-test-csi, starts it with the
// flags the real node passes, and asks its sockets what the kubelet asks
// first; SIGTERM stops it and removes the registration socket.
func TestBinaryRegisters(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "hpmount-test-csi")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/hpmount-test-csi").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pluginDir := filepath.Join(dir, "plugins", DriverName)
	regSocket := filepath.Join(dir, "plugins_registry", RegistrationSocketName)
	cmd := exec.Command(bin,
		"--endpoint", "unix://"+filepath.Join(pluginDir, CSISocketName),
		"--kubelet-plugin-dir", pluginDir,
		"--registration-dir", filepath.Dir(regSocket),
		"--node-id", "node-1",
		"--state-dir", filepath.Join(dir, "state"),
		"--call-log", filepath.Join(dir, "calls.jsonl"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitForSocket(t, regSocket)

	info, err := registerapi.NewRegistrationClient(dial(t, regSocket)).GetInfo(callCtx(t), &registerapi.InfoRequest{})
	if err != nil || info.GetName() != DriverName {
		t.Fatalf("GetInfo = %v, %v", info, err)
	}
	node, err := csi.NewNodeClient(dial(t, info.GetEndpoint())).NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
	if err != nil || node.GetNodeId() != "node-1" {
		t.Fatalf("NodeGetInfo at %q = %v, %v", info.GetEndpoint(), node, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("plugin exit on SIGTERM: %v", err)
	}
	if _, err := os.Lstat(regSocket); !os.IsNotExist(err) {
		t.Fatalf("registration socket after stop: %v, want it removed", err)
	}
}

func waitForSocket(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, err := os.Lstat(path); err == nil && st.Mode().Type() == os.ModeSocket {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket at %q after 10 s", path)
		}
	}
}
