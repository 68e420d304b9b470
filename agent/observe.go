package agent

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

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
	return o
}
