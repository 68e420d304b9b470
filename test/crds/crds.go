// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package crds

import _ "embed"

// VirtualMachineInstances is the CRD for kubevirt.io/v1 VirtualMachineInstance
// as YAML. Like KubeVirt's own, it declares no subresources: status is written
// by updating or patching the object itself.
//
//go:embed virtualmachineinstances.yaml
var VirtualMachineInstances []byte

// Longhorn holds the CRDs of Longhorn's Volume and VolumeAttachment
// (longhorn.io/v1beta2), both with a status subresource, as two YAML
// documents.
//
//go:embed longhorn.yaml
var Longhorn []byte
