// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// vm is the harness's VM, narrated: each change says what it did.
type vm struct {
	*harness.VM
	d *demo
}

// addVolume makes the loop device, filesystem and claim of a new hotplug
// volume; fstype "" makes a block volume.
func (v *vm) addVolume(name, fstype string, size int64) (simnode.Volume, error) {
	vol, err := v.AddVolume(v.d.ctx, name, fstype, size)
	if err != nil {
		return vol, err
	}
	kind := fstype
	if kind == "" {
		kind = "raw block"
	}
	item("volume %-6s %s, %d MiB on %s, claim %s, mode %s", name, kind, size>>20, v.Disks[name].Device, vol.Claim, mode(vol))
	return vol, nil
}

func mode(vol simnode.Volume) string {
	if vol.Block {
		return "Block"
	}
	return "Filesystem"
}

// newAttachmentPod creates an hp-volume pod carrying vols and publishes them
// for it, as the kubelet and the CSI driver do.
func (v *vm) newAttachmentPod(vols ...simnode.Volume) (*corev1.Pod, error) {
	pod, err := v.NewAttachmentPod(v.d.ctx, vols...)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, vol := range vols {
		names = append(names, vol.Name)
	}
	item("attachment pod %s created; kubelet published %s for it", pod.Name, strings.Join(names, ", "))
	return pod, nil
}

func (v *vm) unpublish(pod types.UID, vol simnode.Volume) error { return v.Unpublish(pod, vol) }

func (v *vm) deletePod(pod *corev1.Pod) error { return v.DeletePod(v.d.ctx, pod) }

// apply writes the VMI's spec and status as virt-controller would.
func (v *vm) apply() error {
	if err := v.Apply(v.d.ctx); err != nil {
		return err
	}
	var names []string
	for _, vol := range v.Vols {
		names = append(names, vol.Name+"("+vol.Capacity+")")
	}
	item("VMI %s/%s updated: hotplug volumes %s", v.NS, v.Name, strings.Join(names, " "))
	return nil
}

func (v *vm) waitMounted(vol simnode.Volume) (int, error) { return v.WaitMounted(v.d.ctx, vol) }

func (v *vm) waitNode(vol simnode.Volume) error { return v.WaitNode(v.d.ctx, vol) }

func (v *vm) waitGone(vol simnode.Volume) error { return v.WaitGone(v.d.ctx, vol) }

// roundTrip writes a pattern through the launcher and checks it on the
// volume's source.
func (v *vm) roundTrip(vol simnode.Volume, pattern string) error {
	where, err := v.RoundTrip(vol, pattern)
	if err != nil {
		return err
	}
	off := 1 << 20
	if vol.Block {
		off = 4096
	}
	ok("%s: wrote %q through the launcher at offset %d, read it back from %s", vol.Name, pattern, off, where)
	return nil
}
