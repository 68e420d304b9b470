// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"google.golang.org/grpc/codes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestRegistration asks the registration socket what the kubelet's plugin
// watcher asks, and finds every call, the registration's answer included,
// in the call log.
func TestRegistration(t *testing.T) {
	testutil.RequiresRoot(t)
	k := startPlugin(t, "")
	reg := registerapi.NewRegistrationClient(dial(t, k.plugin.RegistrationSocket))
	info, err := reg.GetInfo(callCtx(t), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != registerapi.CSIPlugin || info.GetName() != DriverName || info.GetEndpoint() != k.plugin.Socket ||
		len(info.GetSupportedVersions()) == 0 {
		t.Fatalf("GetInfo = %v; want a CSIPlugin %s at %s", info, DriverName, k.plugin.Socket)
	}
	for _, s := range []*registerapi.RegistrationStatus{
		{PluginRegistered: false, Error: "driver name taken"},
		{PluginRegistered: true},
	} {
		if _, err := reg.NotifyRegistrationStatus(callCtx(t), s); err != nil {
			t.Fatal(err)
		}
	}
	calls, err := ReadCallLog(k.cfg.CallLog)
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{
		{Method: "GetInfo"},
		{Method: "NotifyRegistrationStatus", Error: "kubelet refused registration: driver name taken"},
		{Method: "NotifyRegistrationStatus"},
	}
	if len(calls) != len(want) {
		t.Fatalf("call log %+v, want %+v", calls, want)
	}
	for i, c := range calls {
		if c.Time.IsZero() {
			t.Errorf("call %d has no time", i)
		}
		c.Time = want[i].Time
		if c != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, c, want[i])
		}
	}
}

// TestCallLogOfAVolume: the kubelet's calls for one volume, recorded with
// the fields a real-node scenario asks about.
func TestCallLogOfAVolume(t *testing.T) {
	testutil.RequiresRoot(t)
	k := startPlugin(t, "")
	v := newVol(t, k, AccessFilesystem, "ext4", 32<<20)
	for _, step := range []func(*testing.T) error{
		func(t *testing.T) error { return v.stage(t, v.staging) }, v.publish, v.unpublish, v.unstage,
	} {
		if err := step(t); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, "publish after unstage", v.publish(t), codes.NotFound)
	calls, err := ReadCallLog(k.cfg.CallLog)
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{
		{Method: "NodeStageVolume", VolumeID: v.id, StagingTargetPath: v.staging, Access: AccessFilesystem, FSType: "ext4"},
		{Method: "NodePublishVolume", VolumeID: v.id, StagingTargetPath: v.staging, TargetPath: v.target, Access: AccessFilesystem, FSType: "ext4"},
		{Method: "NodeUnpublishVolume", VolumeID: v.id, TargetPath: v.target},
		{Method: "NodeUnstageVolume", VolumeID: v.id, StagingTargetPath: v.staging},
		{Method: "NodePublishVolume", VolumeID: v.id, StagingTargetPath: v.staging, TargetPath: v.target, Access: AccessFilesystem, FSType: "ext4",
			Error: `rpc error: code = NotFound desc = volume "` + v.id + `" is not staged on this node`},
	}
	if len(calls) != len(want) {
		t.Fatalf("call log %+v, want %+v", calls, want)
	}
	for i, c := range calls {
		c.Time = want[i].Time
		if c != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, c, want[i])
		}
	}
}
