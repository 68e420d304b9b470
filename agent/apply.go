// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// applied is what one planned engine call did. Apply records it; summarize
// decides what it means.
type applied struct {
	Op   op
	Took time.Duration
	// Result is the change made, outcome.NotPublished, Refused or Error.
	Result outcome.Result
	// Err is the failure, for Error and NotPublished.
	Err error
	// Refusal is the engine's refusal of tenant content, for Refused.
	Refusal *kubevirt.Refusal
	// Grow is the growth check's report, for outcome.Grow.
	Grow GrowResult
	// Canceled: the agent is stopping; the failure says nothing about the
	// volume and is not reported.
	Canceled bool
	// NotPropagated says why the launcher does not see an attach that
	// was made on the host (Result says what was made).
	NotPropagated error
}

// passApplied is what the engine calls of one pass did, per launcher;
// Finished is when the last of them returned.
type passApplied struct {
	Done     map[types.UID][]applied
	Finished time.Time
}

// applyPass runs the pass's plans in order. It is the only caller of the
// engine's changing methods on the reconcile path.
func (a *Agent) applyPass(ctx context.Context, snap Snapshot, plans []launcherPlan) passApplied {
	out := passApplied{Done: map[types.UID][]applied{}}
	for _, p := range plans {
		out.Done[p.Launcher] = a.apply(ctx, p.Key, snap, p.Launcher, p.Ops)
	}
	out.Finished = time.Now()
	return out
}

// apply runs the plan of VMI key against launcher, in order. It never
// changes the plan or the intents. A growth check goes to the growth
// runner (growth.go) and its result is applied in a later pass, once it is
// there; it is skipped for a volume whose attach or verify failed in this
// pass.
func (a *Agent) apply(ctx context.Context, key string, snap Snapshot, launcher types.UID, plan []op) []applied {
	var out []applied
	failed := map[string]bool{}
	for _, o := range plan {
		if o.Kind != outcome.Grow {
			r := a.call(ctx, snap, launcher, o)
			if r.Result == outcome.Error || r.Result == outcome.Abandoned || r.Result == outcome.Refused || r.Result == outcome.NotPublished {
				failed[o.Name] = true
			}
			if r.Result.Changed() || r.Result == outcome.Error || r.Result == outcome.Abandoned {
				// What the launcher holds is no longer what snap says.
				a.snaps.touched(launcher)
			}
			out = append(out, r)
			continue
		}
		if failed[o.Name] {
			continue
		}
		// The finished check of o, made for the volume as it is desired
		// now, or a new one queued.
		k := growKey{key, launcher, o.Name}
		if r, ok := a.growth.take(k, o.Intent.Desired); ok {
			r.Op = o
			out = append(out, r)
		} else {
			a.growth.submit(k, o.Intent.Desired)
		}
	}
	return out
}

// call makes one engine call and classifies its result.
func (a *Agent) call(ctx context.Context, snap Snapshot, launcher types.UID, o op) applied {
	r := applied{Op: o}
	start := time.Now()
	var err error
	switch o.Kind {
	case outcome.Detach:
		if o.LeftToHandler {
			r.Result = outcome.LeftToHandler
			break
		}
		r.Result, err = a.engine.Detach(ctx, snap, launcher, *o.Observed)
	case outcome.Attach, outcome.Verify:
		r.Result, err = a.engine.Attach(ctx, snap, o.Intent.Desired)
	case outcome.Grow:
		r.Grow, err = a.engine.Grow(ctx, snap, o.Intent.Desired)
		r.Result = outcome.Unchanged
		if r.Grow.Grown || r.Grow.ImageGrown {
			r.Result = outcome.Grown
		}
	}
	r.Took = time.Since(start)
	if err == nil {
		return r
	}
	if errors.Is(err, ErrNotPropagated) {
		r.NotPropagated = err
		return r
	}
	attach := o.Kind == outcome.Attach || o.Kind == outcome.Verify
	// Only an attach is refused or waits for a publish: a detach or growth
	// check that fails on tenant content is a failure to report.
	switch refusal := kubevirt.RefusalOf(err); {
	case errors.Is(err, ErrStuck):
		r.Result, r.Err = outcome.Abandoned, err
	case attach && refusal != nil:
		r.Result, r.Refusal = outcome.Refused, refusal
	case attach && errors.Is(err, kubelet.ErrNotPublished):
		r.Result, r.Err = outcome.NotPublished, err
	default:
		r.Result, r.Err, r.Canceled = outcome.Error, err, ctx.Err() != nil
	}
	return r
}
