// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// vm is the harness's VM for one test: its calls fail the running step.
type vm struct {
	*harness.VM
	e *env
}

func (e *env) newVM(ns, name string) *vm {
	e.t.Helper()
	v, err := harness.NewVM(e.ctx, e.ctrl, e.node, ns, name)
	e.must(err)
	return &vm{VM: v, e: e}
}

// addVolume makes the disk and claim of a new hotplug volume; fstype ""
// makes a block volume.
func (v *vm) addVolume(name, fstype string, size int64) simnode.Volume {
	v.e.t.Helper()
	vol, err := v.AddVolume(v.e.ctx, name, fstype, size)
	v.e.must(err)
	return vol
}

func (v *vm) newAttachmentPod(vols ...simnode.Volume) *corev1.Pod {
	v.e.t.Helper()
	pod, err := v.NewAttachmentPod(v.e.ctx, vols...)
	v.e.must(err)
	return pod
}

func (v *vm) publish(pod types.UID, vol simnode.Volume) {
	v.e.t.Helper()
	v.e.must(v.Publish(pod, vol))
}

func (v *vm) replaceAttachmentPod(old *corev1.Pod, oldVols []simnode.Volume, vols ...simnode.Volume) *corev1.Pod {
	v.e.t.Helper()
	pod, err := v.ReplaceAttachmentPod(v.e.ctx, old, oldVols, vols...)
	v.e.must(err)
	return pod
}

func (v *vm) apply() {
	v.e.t.Helper()
	v.e.must(v.Apply(v.e.ctx))
}

// waitMounted waits for exactly one bind of disk.img and returns its id.
func (v *vm) waitMounted(vol simnode.Volume) int {
	v.e.t.Helper()
	id, err := v.WaitMounted(v.e.ctx, vol)
	v.e.must(err)
	return id
}

func (v *vm) waitGone(vol simnode.Volume) {
	v.e.t.Helper()
	v.e.must(v.WaitGone(v.e.ctx, vol))
}

func (v *vm) waitNode(vol simnode.Volume) {
	v.e.t.Helper()
	v.e.must(v.WaitNode(v.e.ctx, vol))
}

// roundTrip writes a pattern through the launcher and reads it back from
// the volume's own source.
func (v *vm) roundTrip(t *testing.T, vol simnode.Volume, pattern string) {
	t.Helper()
	if _, err := v.RoundTrip(vol, pattern); err != nil {
		t.Fatal(err)
	}
}
