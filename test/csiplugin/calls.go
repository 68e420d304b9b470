// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Access kinds a Call records.
const (
	AccessFilesystem = "fs"
	AccessBlock      = "block"
)

// Call is one gRPC call the plugin served, one JSON line of the call log.
// Fields the request does not carry are empty.
type Call struct {
	Time time.Time `json:"time"`
	// Method is the bare method name: "NodeStageVolume", "GetInfo", ….
	Method            string `json:"method"`
	VolumeID          string `json:"volume_id,omitempty"`
	StagingTargetPath string `json:"staging_target_path,omitempty"`
	TargetPath        string `json:"target_path,omitempty"`
	// VolumePath is NodeExpandVolume's and NodeGetVolumeStats' path.
	VolumePath string `json:"volume_path,omitempty"`
	// Access is AccessFilesystem or AccessBlock, from the volume capability.
	Access string `json:"access,omitempty"`
	FSType string `json:"fs_type,omitempty"`
	// RequiredBytes is NodeExpandVolume's capacity_range.required_bytes.
	RequiredBytes int64 `json:"required_bytes,omitempty"`
	// Error is the call's error; for NotifyRegistrationStatus, the
	// kubelet's reason for refusing the plugin.
	Error string `json:"error,omitempty"`
}

// ReadCalls parses a call log.
func ReadCalls(r io.Reader) ([]Call, error) {
	var calls []Call
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("call log line %d: %w", n, err)
		}
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read call log: %w", err)
	}
	return calls, nil
}

// ReadCallLog parses the call log at path; a log not yet written is empty.
func ReadCallLog(file string) ([]Call, error) {
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open call log %q: %w", file, err)
	}
	defer f.Close()
	calls, err := ReadCalls(f)
	if err != nil {
		return nil, fmt.Errorf("call log %q: %w", file, err)
	}
	return calls, nil
}

// callLog appends Calls to a file, one write per line so that lines of
// concurrent calls never interleave.
type callLog struct {
	mu sync.Mutex
	f  *os.File
}

func openCallLog(file string) (*callLog, error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open call log %q: %w", file, err)
	}
	return &callLog{f: f}, nil
}

func (l *callLog) append(c Call) error {
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.f.Write(append(line, '\n'))
	return err
}

func (l *callLog) Close() error { return l.f.Close() }

// interceptor records every unary call after it ran. A call that cannot
// be recorded fails: a test reading the log must not miss a call the
// kubelet saw succeed.
func (l *callLog) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	c := callOf(req)
	c.Time = time.Now().UTC()
	c.Method = path.Base(info.FullMethod)
	if err != nil {
		c.Error = err.Error()
	}
	if logErr := l.append(c); logErr != nil && err == nil {
		return nil, fmt.Errorf("record %s in the call log: %w", c.Method, logErr)
	}
	return resp, err
}

// callOf fills a Call from whatever fields the request has; every CSI
// request type has generated getters, so one set of interfaces covers
// them all.
func callOf(req any) Call {
	var c Call
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		c.VolumeID = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetStagingTargetPath() string }); ok {
		c.StagingTargetPath = r.GetStagingTargetPath()
	}
	if r, ok := req.(interface{ GetTargetPath() string }); ok {
		c.TargetPath = r.GetTargetPath()
	}
	if r, ok := req.(interface{ GetVolumePath() string }); ok {
		c.VolumePath = r.GetVolumePath()
	}
	if r, ok := req.(interface {
		GetVolumeCapability() *csi.VolumeCapability
	}); ok {
		c.Access, c.FSType = accessOf(r.GetVolumeCapability())
	}
	if r, ok := req.(interface{ GetCapacityRange() *csi.CapacityRange }); ok {
		c.RequiredBytes = r.GetCapacityRange().GetRequiredBytes()
	}
	if r, ok := req.(*registerapi.RegistrationStatus); ok && !r.GetPluginRegistered() {
		c.Error = "kubelet refused registration: " + r.GetError()
	}
	return c
}

// accessOf names a capability's access kind and its filesystem type.
func accessOf(vc *csi.VolumeCapability) (access, fsType string) {
	switch {
	case vc.GetBlock() != nil:
		return AccessBlock, ""
	case vc.GetMount() != nil:
		return AccessFilesystem, vc.GetMount().GetFsType()
	}
	return "", ""
}
