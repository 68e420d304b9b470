// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hpmount/hpmount/kubevirt"
)

// vmiRecord is what the VMI caches hold for one VMI. The VMI is decoded
// once, when the informer receives it: the claim index, the claim lists
// and every pass read it, and each used to decode it again. The decoded
// VMI is also a fraction of the unstructured maps it came from. Readers
// share it and never modify it (kubevirt.ForLauncher copies).
//
// status.volumeStatus is kept as the API server sent it, as JSON: the
// status patch tests that value before it replaces an entry, and keeps the
// fields of an entry that kubevirt.VMI does not know (status.go).
type vmiRecord struct {
	metav1.ObjectMeta
	vmi          *kubevirt.VMI
	decodeErr    error
	volumeStatus json.RawMessage // nil when the VMI has none
}

// RecordVMI turns an unstructured VMI into the record the VMI caches hold.
// A VMI that cannot be decoded is cached with its error, which reconcile
// reports. Whatever is not an unstructured object passes through
// (tombstones, say).
func RecordVMI(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	r := &vmiRecord{}
	r.vmi, r.decodeErr = kubevirt.DecodeVMI(trimVMI(u))
	if r.decodeErr != nil {
		r.ObjectMeta = metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
			ResourceVersion: u.GetResourceVersion(), Labels: u.GetLabels()}
		return r, nil
	}
	r.ObjectMeta = r.vmi.ObjectMeta // trimmed: identity, labels, deletion
	if list, found, err := unstructured.NestedFieldNoCopy(u.Object, "status", "volumeStatus"); err == nil && found {
		if r.volumeStatus, err = json.Marshal(list); err != nil {
			r.vmi, r.decodeErr = nil, fmt.Errorf("encode status.volumeStatus of vmi %q: %w", u.GetNamespace()+"/"+u.GetName(), err)
		}
	}
	return r, nil
}

// volumeStatusList returns status.volumeStatus as the API server sent it,
// nil when the VMI has none. Numbers keep their text.
func (r *vmiRecord) volumeStatusList() ([]any, error) {
	if r.volumeStatus == nil {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(r.volumeStatus))
	dec.UseNumber()
	var list []any
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("read status.volumeStatus of vmi %q: %w", r.Namespace+"/"+r.Name, err)
	}
	return list, nil
}
