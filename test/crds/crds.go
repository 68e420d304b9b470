package crds

import _ "embed"

// VirtualMachineInstances is the CRD for kubevirt.io/v1 VirtualMachineInstance
// as YAML. Like KubeVirt's own, it declares no subresources: status is written
// by updating or patching the object itself.
//
//go:embed virtualmachineinstances.yaml
var VirtualMachineInstances []byte
