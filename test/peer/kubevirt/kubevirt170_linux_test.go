// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !kubevirt184

package peer

import (
	"os"
	"reflect"
	"testing"

	v1 "kubevirt.io/api/core/v1"
	virthandler "kubevirt.io/kubevirt/pkg/virt-handler"
	"kubevirt.io/kubevirt/pkg/virt-handler/cgroup"
)

// The calls whose signatures differ between the KubeVirt versions the peer
// runs; kubevirt184_linux_test.go has v1.8.4's.

// kubeVirtVersion is the KubeVirt this build of the peer runs, and
// kubeVirtModFile the module file that pins it.
const (
	kubeVirtVersion = "v1.7.0"
	kubeVirtModFile = "go.mod"
)

// newCgroupManager is virt-handler's getCgroupManager: a manager for the
// launcher found through its socket, with the VMI's device rules.
func newCgroupManager(vmi *v1.VirtualMachineInstance) (cgroup.Manager, error) {
	return cgroup.NewManagerFromVM(vmi, nodeName)
}

// newVMController is virt-handler's NewVirtualMachineController with
// hotplug's dependencies real and the rest stubbed (handler_linux_test.go).
func newVMController(d vmControllerDeps) (*virthandler.VirtualMachineController, error) {
	return virthandler.NewVirtualMachineController(d.recorder, d.client, nodeName, d.privateDir, podsDir, d.launchers,
		d.vmis, d.all, d.domains, 10, d.config, d.isolation, d.migrationProxy,
		noDownwardMetrics{}, nil, "", noNetConf{}, noNetStat{})
}

// utilityVolumesVMI is testdata/utility-volumes.json: v1.7.0's types have
// no spec.utilityVolumes to build it from.
func utilityVolumesVMI(t *testing.T) []byte {
	if f, ok := reflect.TypeFor[v1.VirtualMachineInstanceSpec]().FieldByName("UtilityVolumes"); ok {
		t.Errorf("kubevirt.io/api now has spec.%s: build this fixture from its Go type", f.Tag.Get("json"))
	}
	raw, err := os.ReadFile("testdata/utility-volumes.json")
	must(t, err)
	return raw
}

// webhookAnnotations are the annotations virt-api's mutating webhook
// stamps on every new VMI at v1.7.0.
func webhookAnnotations() map[string]string {
	return map[string]string{v1.ControllerAPILatestVersionObservedAnnotation: "v1",
		v1.ControllerAPIStorageVersionObservedAnnotation: "v1",
	}
}
