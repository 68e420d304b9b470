// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/kubevirt"
)

// observation is what the pass found outside the caches: the API server's
// word on a VMI gone from them, and what each launcher the decision
// involves holds, on one mount-table snapshot.
type observation struct {
	// Gone is the result of confirming a gone VMI (one of the Gone*
	// results), "" when none was asked; GoneErr says why it is unknown.
	Gone    string
	GoneErr error
	Snap    Snapshot
	// Read is the mount-table read this pass made, nil when it shared
	// one; SnapErr is why none could be had.
	Read    *snapshotRead
	SnapErr error
	// Clean holds what each launcher to empty holds; Launcher what the
	// served launcher holds.
	Clean    map[types.UID]observedLauncher
	Launcher observedLauncher
	// GrowthReady reports whether a finished growth check of a volume of
	// the served launcher waits to be reported (growth.go).
	GrowthReady func(volume string) bool
	// Handler is virt-handler's record of the VMI's targets, read only
	// when the pass may detach something; HandlerErr is why it could not
	// be read, and then nothing is detached.
	Handler    HandlerRecord
	HandlerErr error
}

// observedLauncher is what one launcher's hotplug-disks holds. Refusal
// is set when the directory itself is unsafe.
type observedLauncher struct {
	Volumes []ObservedVolume
	Err     error
	Refusal *kubevirt.Refusal
}

// observe asks the API server and the node what the decision needs to
// know. It changes nothing.
func (a *Agent) observe(ctx context.Context, d decision) observation {
	var o observation
	if d.ConfirmGone {
		o.Gone, o.GoneErr = a.confirmGone(ctx, d.Key, d.State.uid)
		if !goneAllowsDetach(o.Gone) {
			return o
		}
	}
	involved := d.involved()
	if len(involved) == 0 {
		return o
	}
	if o.Snap, o.Read, o.SnapErr = a.snapshotFor(ctx, involved...); o.SnapErr != nil {
		return o
	}
	o.Clean = map[types.UID]observedLauncher{}
	for _, uid := range d.Clean {
		vols, err := a.engine.Observe(ctx, o.Snap, uid)
		if err != nil {
			err = fmt.Errorf("observe gone launcher %s: %w", uid, err)
		}
		o.Clean[uid] = observedLauncher{Volumes: vols, Err: err}
	}
	if l := d.Launcher; l != nil {
		vols, err := a.engine.Observe(ctx, o.Snap, l.UID)
		o.Launcher = observedLauncher{Volumes: vols, Refusal: kubevirt.RefusalOf(err)}
		if err != nil && o.Launcher.Refusal == nil {
			o.Launcher.Err = fmt.Errorf("observe launcher %s/%s: %w", l.Namespace, l.Name, err)
		}
		o.GrowthReady = a.growth.ready(d.Key, l.UID)
	}
	if d.State != nil && d.State.uid != "" && mayDetach(d, o) {
		o.Handler, o.HandlerErr = a.engine.HandlerRecord(ctx, d.State.uid)
		if o.HandlerErr != nil {
			o.HandlerErr = fmt.Errorf("read virt-handler's record of vmi %s: %w", d.State.uid, o.HandlerErr)
		}
	}
	return o
}

// mayDetach reports whether the pass's plan may detach anything: a
// launcher to empty holds something, or the served one holds a volume
// its VMI no longer keeps. Only then is virt-handler's record read.
func mayDetach(d decision, o observation) bool {
	for _, ol := range o.Clean {
		if len(ol.Volumes) > 0 {
			return true
		}
	}
	if d.Launcher == nil || d.VMI == nil {
		return false
	}
	return slices.ContainsFunc(o.Launcher.Volumes, func(v ObservedVolume) bool { return !d.VMI.Keeps(v.Name) })
}

// confirmGone asks the API server whether the VMI of key, remembered with
// uid, really left this node. Only the first three results allow a
// detach; err says why the answer is unknown.
func (a *Agent) confirmGone(ctx context.Context, key string, uid types.UID) (string, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return GoneUnknown, fmt.Errorf("split vmi key %q: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	u, err := a.dyn.Resource(kubevirt.VMIResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return GoneConfirmed, nil
	case err != nil:
		return GoneUnknown, fmt.Errorf("get vmi %s: %w", key, err)
	case uid != "" && u.GetUID() != uid:
		return GoneReplaced, nil
	}
	l := u.GetLabels()
	if l[kubevirt.LabelNodeName] == a.cfg.NodeName || l[kubevirt.LabelMigrationTargetNode] == a.cfg.NodeName {
		return GoneStillHere, nil
	}
	if vmi, err := kubevirt.DecodeVMI(u); err == nil && runsHere(vmi, a.cfg.NodeName) {
		return GoneStillHere, nil
	}
	return GoneElsewhere, nil
}

// runsHere reports whether the VMI's status puts its VM on node although
// no label does: the target label can go before kubevirt.io/nodeName moves
// to the target of a completed migration, and the VM already runs there.
func runsHere(vmi *kubevirt.VMI, node string) bool {
	if vmi.Status.NodeName == node {
		return true
	}
	m := kubevirt.MigrationOf(vmi, node)
	return m.Role == kubevirt.RoleTarget && m.Phase == kubevirt.MigrationSucceeded
}

// goneAllowsDetach reports whether a confirmation's result lets the
// launchers of a VMI that left the caches be emptied.
func goneAllowsDetach(result string) bool {
	return result == GoneConfirmed || result == GoneReplaced || result == GoneElsewhere
}
