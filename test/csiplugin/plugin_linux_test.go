// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hpmount/hpmount/internal/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// kubelet is a test's side of a running plugin: a gRPC client as the
// kubelet is one, and the plugin's files.
type kubelet struct {
	csi.NodeClient
	csi.IdentityClient
	plugin *Plugin
	cfg    Config
}

// startPlugin serves a plugin in-process on sockets in a new temporary
// directory (dir, if not empty, is reused: a restarted plugin keeps its
// state) and stops it when t ends.
func startPlugin(t *testing.T, dir string) *kubelet {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := Config{
		KubeletPluginDir: filepath.Join(dir, "plugins", DriverName),
		RegistrationDir:  filepath.Join(dir, "plugins_registry"),
		NodeID:           "node-1",
		StateDir:         filepath.Join(dir, "state"),
		CallLog:          filepath.Join(dir, "calls.jsonl"),
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	conn := dial(t, p.Socket)
	return &kubelet{NodeClient: csi.NewNodeClient(conn), IdentityClient: csi.NewIdentityClient(conn), plugin: p, cfg: cfg}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails t unless err carries code.
func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, code)
	}
}

func capability(access, fsType string) *csi.VolumeCapability {
	mode := &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
	if access == AccessBlock {
		return &csi.VolumeCapability{AccessMode: mode, AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	}
	return &csi.VolumeCapability{AccessMode: mode, AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}}}
}

// backingFile makes a sparse file of size bytes.
func backingFile(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "backing.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIdentityAndNodeInfo(t *testing.T) {
	k := startPlugin(t, "")
	ctx := callCtx(t)
	info, err := k.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != DriverName {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	probe, err := k.Probe(ctx, &csi.ProbeRequest{})
	if err != nil || !probe.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v", probe, err)
	}
	if _, err := k.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{}); err != nil {
		t.Fatal(err)
	}
	node, err := k.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || node.GetNodeId() != "node-1" {
		t.Fatalf("NodeGetInfo = %v, %v", node, err)
	}
	caps, err := k.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[csi.NodeServiceCapability_RPC_Type]bool{}
	for _, c := range caps.GetCapabilities() {
		got[c.GetRpc().GetType()] = true
	}
	for _, want := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	} {
		if !got[want] {
			t.Errorf("NodeGetCapabilities lacks %v: %v", want, caps)
		}
	}
}

// TestRequestErrors: what the spec says a plugin answers to requests it
// cannot serve, and that cleaning up what is not there succeeds.
func TestRequestErrors(t *testing.T) {
	testutil.RequiresRoot(t) // unmounting what is not mounted still needs CAP_SYS_ADMIN
	k := startPlugin(t, "")
	dir := t.TempDir()
	fs := capability(AccessFilesystem, "")
	attrs := map[string]string{AttrBackingFile: filepath.Join(dir, "backing.img")}
	stage := func(id string, vc *csi.VolumeCapability, attrs map[string]string) error {
		_, err := k.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{
			VolumeId: id, StagingTargetPath: filepath.Join(dir, "staging"), VolumeCapability: vc, VolumeContext: attrs,
		})
		return err
	}
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"stage without a volume id", func() error { return stage("", fs, attrs) }, codes.InvalidArgument},
		{"stage without a capability", func() error { return stage("v", nil, attrs) }, codes.InvalidArgument},
		{"stage without a backing file", func() error { return stage("v", fs, nil) }, codes.InvalidArgument},
		{"stage a relative backing file", func() error {
			return stage("v", fs, map[string]string{AttrBackingFile: "backing.img"})
		}, codes.InvalidArgument},
		{"stage btrfs", func() error { return stage("v", capability(AccessFilesystem, "btrfs"), attrs) }, codes.InvalidArgument},
		{"stage a missing backing file", func() error { return stage("v", fs, attrs) }, codes.NotFound},
		{"publish an unstaged volume", func() error {
			_, err := k.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{
				VolumeId: "v", StagingTargetPath: filepath.Join(dir, "staging"), TargetPath: filepath.Join(dir, "target"), VolumeCapability: fs,
			})
			return err
		}, codes.NotFound},
		{"publish without a target", func() error {
			_, err := k.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: dir, VolumeCapability: fs})
			return err
		}, codes.InvalidArgument},
		{"expand an unstaged volume", func() error {
			_, err := k.NodeExpandVolume(callCtx(t), &csi.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: dir})
			return err
		}, codes.NotFound},
		{"expand without a volume path", func() error {
			_, err := k.NodeExpandVolume(callCtx(t), &csi.NodeExpandVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument},
		{"unpublish a path never published", func() error {
			_, err := k.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: filepath.Join(dir, "nothing")})
			return err
		}, codes.OK},
		{"unstage a volume never staged", func() error {
			_, err := k.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: filepath.Join(dir, "nothing")})
			return err
		}, codes.OK},
		{"unstage without a volume id", func() error {
			_, err := k.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{StagingTargetPath: dir})
			return err
		}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.name, tc.call(), tc.want) })
	}
}
