// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

// Refusal reasons: the reason label of hpmount_refusals_total, the reason
// of diag's refused verdict, and the start of every HotplugRefused Event.
const (
	RefusedUnsafeName        = "unsafe-volume-name"
	RefusedUnsafeContent     = "unsafe-content"
	RefusedUnknownMode       = "unknown-volume-mode"
	RefusedAttachNamespace   = "attachment-pod-namespace"
	RefusedAttachLabel       = "attachment-pod-label"
	RefusedAttachOwner       = "attachment-pod-owner"
	RefusedLauncherNode      = "launcher-node"
	RefusedLauncherNamespace = "launcher-namespace"
	RefusedLauncherLabels    = "launcher-labels"
	RefusedLauncherNoHotplug = "launcher-no-hotplug-disks"
	RefusedLauncherAmbiguous = "launcher-ambiguous"
)

// RefusalReasons lists every refusal reason.
var RefusalReasons = []string{
	RefusedUnsafeName, RefusedUnsafeContent, RefusedUnknownMode,
	RefusedAttachNamespace, RefusedAttachLabel, RefusedAttachOwner,
	RefusedLauncherNode, RefusedLauncherNamespace, RefusedLauncherLabels,
	RefusedLauncherNoHotplug, RefusedLauncherAmbiguous,
}

// Refusal is a decision not to touch a volume or a launcher because
// something does not belong to the VMI or is unsafe. The agent reports it
// as a Warning Event and never detaches because of it; diag reports it as
// the refused verdict with the same Reason.
type Refusal struct {
	Reason  string
	Message string
	// Err is the error the refusal was made from, if any.
	Err error
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

func (r *Refusal) Unwrap() error { return r.Err }

func refusef(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// RefusalOf returns the refusal err carries: a *Refusal it wraps, or an
// unsafe-content refusal for an error wrapping isolation.ErrUnsafePath
// (tenant content the node refuses: a disk.img that is a link, a device
// node, a hard link...). Any other error is no refusal: nil.
func RefusalOf(err error) *Refusal {
	var r *Refusal
	switch {
	case errors.As(err, &r):
		return r
	case errors.Is(err, isolation.ErrUnsafePath):
		return &Refusal{Reason: RefusedUnsafeContent, Message: err.Error(), Err: err}
	}
	return nil
}

// CheckVolumeName refuses a volume name that cannot be a file name in the
// launcher's hotplug-disks directory.
func CheckVolumeName(name string) *Refusal {
	if err := kubelet.ValidName(name); err != nil {
		return &Refusal{Reason: RefusedUnsafeName, Message: err.Error(), Err: err}
	}
	return nil
}

// PodLookup finds a pod of this node by UID.
type PodLookup interface {
	PodByUID(uid types.UID) (*corev1.Pod, bool)
}

// PodMap is a PodLookup over a map, for callers that listed pods.
type PodMap map[types.UID]*corev1.Pod

// PodByUID implements PodLookup.
func (m PodMap) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	p, ok := m[uid]
	return p, ok
}
