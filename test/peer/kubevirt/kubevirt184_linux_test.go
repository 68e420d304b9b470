// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build kubevirt184

package peer

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/hypervisor"
	virthandler "kubevirt.io/kubevirt/pkg/virt-handler"
	"kubevirt.io/kubevirt/pkg/virt-handler/cgroup"
)

// v1.8.4's signatures of the calls kubevirt170_linux_test.go names.

const (
	kubeVirtVersion = "v1.8.4"
	kubeVirtModFile = "go.kv184.mod"
)

// newCgroupManager is v1.8.4's getCgroupManager, which also allows the
// hypervisor's device: /dev/kvm, which this machine's launchers do not
// have, so emulation is allowed as the peer's cluster config says.
func newCgroupManager(vmi *v1.VirtualMachineInstance) (cgroup.Manager, error) {
	return cgroup.NewManagerFromVM(vmi, nodeName, hypervisor.NewHypervisorNodeInformation("").GetHypervisorDevice(), true)
}

// newVMController passes v1.8.4's two new arguments: an empty node store
// (its device plugins' node, which hotplug does not read) and no CBT
// handler (changed block tracking is off for the VMI, so the handler
// returns before it is used).
func newVMController(d vmControllerDeps) (*virthandler.VirtualMachineController, error) {
	nodes := cache.NewStore(cache.MetaNamespaceKeyFunc)
	return virthandler.NewVirtualMachineController(d.recorder, d.client, nodes, nodeName, d.privateDir, podsDir, d.launchers,
		d.vmis, d.all, d.domains, 10, d.config, d.isolation, d.migrationProxy,
		noDownwardMetrics{}, nil, "", noNetConf{}, noNetStat{}, nil)
}

// utilityVolumesVMI is testdata/utility-volumes.json built from v1.8.4's
// types, which have spec.utilityVolumes; the fixture must say the same.
func utilityVolumesVMI(t *testing.T) []byte {
	dump, backup := v1.MemoryDump, v1.Backup
	claim := func(name string, ro bool) k8sv1.PersistentVolumeClaimVolumeSource {
		return k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: name, ReadOnly: ro}
	}
	var fixture v1.VirtualMachineInstance
	raw, err := os.ReadFile("testdata/utility-volumes.json")
	must(t, err)
	must(t, json.Unmarshal(raw, &fixture))
	vmi := fixture.DeepCopy()
	vmi.Spec.UtilityVolumes = []v1.UtilityVolume{
		{Name: "dump-u", PersistentVolumeClaimVolumeSource: claim("dump-claim", false), Type: &dump},
		{Name: "backup-u", PersistentVolumeClaimVolumeSource: claim("backup-claim", false), Type: &backup},
		{Name: "plain-u", PersistentVolumeClaimVolumeSource: claim("plain-claim", true)},
	}
	if !reflect.DeepEqual(vmi.Spec.UtilityVolumes, fixture.Spec.UtilityVolumes) {
		t.Errorf("the fixture's utility volumes read by v1.8.4's types: %+v, want %+v", fixture.Spec.UtilityVolumes, vmi.Spec.UtilityVolumes)
	}
	out, err := json.Marshal(vmi)
	must(t, err)
	return out
}

// webhookAnnotations are the annotations virt-api's mutating webhook
// stamps on every new VMI at v1.8.4.
func webhookAnnotations() map[string]string {
	return map[string]string{v1.ControllerAPILatestVersionObservedAnnotation: "v1",
		v1.ControllerAPIStorageVersionObservedAnnotation: "v1",
		// Without it virt-handler patches one in on its sync (the
		// upgrade path), and its status update in the same sync then
		// conflicts on a real API server.
		v1.PciTopologyVersionAnnotation: v1.PciTopologyVersionV3,
	}
}
