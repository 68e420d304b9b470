// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/csiplugin"
)

// CallLog is the path of the CSI plugin's call log.
func (n *Node) CallLog() string { return filepath.Join(n.Dir, "csi", "calls.jsonl") }

// Calls reads the CSI plugin's call log.
func (n *Node) Calls() ([]csiplugin.Call, error) { return csiplugin.ReadCallLog(n.CallLog()) }

// startCSI builds the test CSI plugin (the build cache makes a warm build
// quick), starts it where the kubelet looks for plugins, creates its
// CSIDriver object and waits until the kubelet has registered it in the
// node's CSINode.
func (n *Node) startCSI(ctx context.Context) error {
	dir := filepath.Join(n.Dir, "csi")
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
		return err
	}
	bin := filepath.Join(dir, "hpmount-test-csi")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/hpmount/hpmount/test/csiplugin/cmd/hpmount-test-csi")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the CSI plugin: %w\n%s", err, out)
	}
	pluginDir := filepath.Join(n.KubeletRoot, "plugins", csiplugin.DriverName)
	var err error
	n.csi, err = cluster.StartChild("hpmount-test-csi", bin, []string{
		"--kubelet-plugin-dir=" + pluginDir,
		"--registration-dir=" + filepath.Join(n.KubeletRoot, "plugins_registry"),
		"--node-id=" + n.Name,
		"--state-dir=" + filepath.Join(dir, "state"),
		"--call-log=" + n.CallLog(),
	}, filepath.Join(dir, "plugin.log"))
	if err != nil {
		return err
	}
	_, err = n.Kube.StorageV1().CSIDrivers().Create(ctx, csiplugin.CSIDriver(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CSIDriver %s: %w", csiplugin.DriverName, err)
	}
	return n.waitCSINode(ctx)
}

// waitCSINode waits until the kubelet lists the driver in the CSINode.
func (n *Node) waitCSINode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		csiNode, err := n.Kube.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil && slices.ContainsFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == csiplugin.DriverName }) {
			return nil
		}
		select {
		case <-n.csi.Done():
			return n.csi.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("kubelet did not register %s: %w\n%s", csiplugin.DriverName, ctx.Err(), n.csi.Tail(20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
