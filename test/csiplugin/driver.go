// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"fmt"
	"path/filepath"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DriverName is the CSI driver name PVs name in spec.csi.driver.
const DriverName = "csi.hpmount.test"

// Version is the plugin's vendor version (GetPluginInfo).
const Version = "0.1.0"

// Volume attributes a PV's spec.csi.volumeAttributes carries.
const (
	// AttrBackingFile is the absolute path of the file the volume lives in.
	AttrBackingFile = "backingFile"
	// AttrFSType is "ext4" or "xfs" for a filesystem volume; ignored for a
	// block volume. The PV's spec.csi.fsType, when set, wins.
	AttrFSType = "fsType"
)

// RegistrationSocketName is the plugin-registration socket in the kubelet's
// plugins_registry directory.
const RegistrationSocketName = DriverName + "-reg.sock"

// CSISocketName is the CSI socket in the kubelet plugin directory.
const CSISocketName = "csi.sock"

// Config is what the plugin process is started with; cmd/hpmount-test-csi
// maps one flag to each field.
type Config struct {
	// Endpoint is the CSI socket, "unix:///abs/path/csi.sock"
	// (--endpoint). Empty: CSISocketName in KubeletPluginDir.
	Endpoint string
	// KubeletPluginDir is where the CSI socket goes, normally
	// <kubelet root>/plugins/csi.hpmount.test (--kubelet-plugin-dir).
	KubeletPluginDir string
	// RegistrationDir is the kubelet's plugins_registry directory
	// (--registration-dir); empty serves no registration socket.
	RegistrationDir string
	// NodeID is what NodeGetInfo answers: the node's name (--node-id).
	NodeID string
	// StateDir keeps one record per staged volume (--state-dir).
	StateDir string
	// CallLog is the JSON-lines file every call is appended to
	// (--call-log).
	CallLog string
}

// SocketPath is the CSI socket's path from Endpoint or KubeletPluginDir.
func (c Config) SocketPath() (string, error) {
	if c.Endpoint == "" {
		if c.KubeletPluginDir == "" {
			return "", fmt.Errorf("neither an endpoint nor a kubelet plugin directory")
		}
		return filepath.Join(c.KubeletPluginDir, CSISocketName), nil
	}
	path, ok := strings.CutPrefix(c.Endpoint, "unix://")
	if !ok || !filepath.IsAbs(path) {
		return "", fmt.Errorf("endpoint %q: want unix:///absolute/path", c.Endpoint)
	}
	return filepath.Clean(path), nil
}

func (c Config) validate() error {
	if _, err := c.SocketPath(); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{
		{"node id", c.NodeID}, {"state directory", c.StateDir}, {"call log", c.CallLog},
	} {
		if f.value == "" {
			return fmt.Errorf("plugin config: no %s", f.name)
		}
	}
	return nil
}

// CSIDriver is the storage.k8s.io/v1 object the kubelet reads for this
// driver: no attach (no VolumeAttachment, no external-attacher), no pod
// information in publish requests, persistent volumes only.
func CSIDriver() *storagev1.CSIDriver {
	no := false
	return &storagev1.CSIDriver{
		TypeMeta:   metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "CSIDriver"},
		ObjectMeta: metav1.ObjectMeta{Name: DriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       &no,
			PodInfoOnMount:       &no,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}
}
