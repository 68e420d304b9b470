// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"context"
	"errors"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errNoLoop: the backing file is attached to no loop device.
var errNoLoop = errors.New("no loop device")

// nodeServer is the Node service. It checks requests and the volume
// records here; what it does to the node is in node_linux.go.
type nodeServer struct {
	csi.UnimplementedNodeServer
	nodeID string
	state  *stateDir
	// mu runs one volume operation at a time: the kubelet calls for
	// different volumes at once, and two stages of one backing file must
	// not both attach it.
	mu sync.Mutex
}

func (n *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.nodeID}, nil
}

func (n *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (n *nodeServer) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	v, err := volumeOf(req)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old, ok, err := n.state.load(v.ID)
	if err != nil {
		return nil, grpcError(err)
	}
	if ok && (old.StagingPath != v.StagingPath || old.BackingFile != v.BackingFile || old.Access != v.Access || old.FSType != v.FSType) {
		return nil, status.Errorf(codes.AlreadyExists, "volume %q is staged at %q from %q as %s %s already",
			v.ID, old.StagingPath, old.BackingFile, old.Access, old.FSType)
	}
	if err := stage(&v); err != nil {
		return nil, grpcError(err)
	}
	if err := n.state.save(v); err != nil {
		return nil, grpcError(err)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// volumeOf checks a stage request and makes the volume it describes.
func volumeOf(req *csi.NodeStageVolumeRequest) (volume, error) {
	v := volume{ID: req.GetVolumeId(), StagingPath: req.GetStagingTargetPath(), BackingFile: req.GetVolumeContext()[AttrBackingFile]}
	var fsType string
	v.Access, fsType = accessOf(req.GetVolumeCapability())
	switch {
	case v.ID == "":
		return v, status.Error(codes.InvalidArgument, "no volume id")
	case v.StagingPath == "":
		return v, status.Errorf(codes.InvalidArgument, "volume %q: no staging target path", v.ID)
	case v.Access == "":
		return v, status.Errorf(codes.InvalidArgument, "volume %q: no block or mount capability", v.ID)
	case !filepath.IsAbs(v.BackingFile) || filepath.Clean(v.BackingFile) != v.BackingFile:
		return v, status.Errorf(codes.InvalidArgument, "volume %q: volume attribute %s=%q is not a clean absolute path", v.ID, AttrBackingFile, v.BackingFile)
	}
	if v.Access == AccessBlock {
		return v, nil
	}
	v.FSType = fsType
	if v.FSType == "" {
		v.FSType = req.GetVolumeContext()[AttrFSType]
	}
	if v.FSType == "" {
		v.FSType = "ext4"
	}
	if v.FSType != "ext4" && v.FSType != "xfs" {
		return v, status.Errorf(codes.InvalidArgument, "volume %q: filesystem type %q: want ext4 or xfs", v.ID, v.FSType)
	}
	return v, nil
}

func (n *nodeServer) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" || staging == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q at %q: both a volume id and a staging target path are needed", id, staging)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok, err := n.state.load(id)
	if err != nil {
		return nil, grpcError(err)
	}
	if err := unmountAll(staging); err != nil {
		return nil, grpcError(err)
	}
	// A volume staged elsewhere (or not at all) keeps its device: this
	// call only had to leave staging unmounted.
	if !ok || v.StagingPath != staging {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if err := detachLoops(v.BackingFile); err != nil {
		return nil, grpcError(err)
	}
	if err := n.state.remove(id); err != nil {
		return nil, grpcError(err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (n *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	access, _ := accessOf(req.GetVolumeCapability())
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	case req.GetTargetPath() == "" || req.GetStagingTargetPath() == "":
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: both a staging and a target path are needed", req.GetVolumeId())
	case access == "":
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: no block or mount capability", req.GetVolumeId())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	v, err := n.staged(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if v.StagingPath != req.GetStagingTargetPath() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is staged at %q, not %q", v.ID, v.StagingPath, req.GetStagingTargetPath())
	}
	if v.Access != access {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q was staged as %s, not %s", v.ID, v.Access, access)
	}
	if err := publish(v, req.GetTargetPath(), req.GetReadonly()); err != nil {
		return nil, grpcError(err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q at %q: both a volume id and a target path are needed", req.GetVolumeId(), req.GetTargetPath())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := unpublish(req.GetTargetPath()); err != nil {
		return nil, grpcError(err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (n *nodeServer) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q at %q: both a volume id and a volume path are needed", req.GetVolumeId(), req.GetVolumePath())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	v, err := n.staged(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	size, err := expand(v, req.GetVolumePath(), req.GetCapacityRange().GetRequiredBytes())
	if err != nil {
		return nil, grpcError(err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// staged returns the record of a staged volume, NotFound for any other.
func (n *nodeServer) staged(id string) (volume, error) {
	v, ok, err := n.state.load(id)
	if err != nil {
		return v, grpcError(err)
	}
	if !ok {
		return v, status.Errorf(codes.NotFound, "volume %q is not staged on this node", id)
	}
	return v, nil
}

// grpcError keeps a status error's code and makes any other error
// Internal, with its whole text.
func grpcError(err error) error {
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// outOfRange is NodeExpandVolume's answer when the device is smaller
// than the size asked for: the backend (GrowBackingFile) has not grown it.
func outOfRange(dev string, size, required int64) error {
	return status.Errorf(codes.OutOfRange, "%s holds %d bytes, %d required: grow the backing file first", dev, size, required)
}
