// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/outcome"
)

// report carries a pass out, in order: its logs, the mount-table read,
// the summaries with their Events and metrics, the migration steps and the
// volumeStatus updates (to the status writer's queue). It is the only
// writer of what the agent remembers of the VMI, and returns the errors
// the pass is retried on.
func (a *Agent) report(r passReport) error {
	defer a.reportReconciled(r.Started)
	log := a.log.With("vmi", r.Key)
	writeLogs(log, r.Logs)
	a.reportSnapshot(r.Read)
	if r.GoneCheck != "" {
		a.reportGoneCheck(r.GoneCheck)
	}
	for _, m := range r.Migrations {
		a.obs.Migration(m.Event, m.Took)
	}
	for _, s := range r.Parts {
		a.reportPart(r.State, r.Ref, log.With(s.LogAttrs...), s)
	}
	for _, t := range r.Attaches {
		a.reportAttach(t)
	}
	for _, v := range r.Pending {
		a.reportState(r.Namespace, r.Name, v)
	}
	writeLogs(log, r.Closing)
	a.remember(r)
	if r.Requeue > 0 {
		a.queue.AddAfter(r.Key, r.Requeue)
	}
	if len(r.Status) > 0 {
		a.status.add(r.Key, r.Status)
	}
	return errors.Join(r.Errs...)
}

func writeLogs(log *slog.Logger, lines []logLine) {
	for _, l := range lines {
		log.Log(context.Background(), l.Level, l.Msg, l.Attrs...)
	}
}

// remember stores the state the pass leaves, or forgets the key, and
// drops the finished growth checks nobody will report.
func (a *Agent) remember(r passReport) {
	switch {
	case r.Forget:
		a.forget(r.Key)
		a.obs.ForgetVMI(r.Namespace, r.Name)
		return
	case r.State == nil:
		return
	}
	a.mu.Lock()
	a.states[r.Key] = r.State
	a.mu.Unlock()
	if r.GrowthLauncher != "" {
		a.growth.prune(r.Key, func(k growKey) bool { return k.launcher == r.GrowthLauncher && r.GrowthKeep[k.volume] })
	}
}

// forget drops everything remembered of key.
func (a *Agent) forget(key string) {
	a.growth.prune(key, nil)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.states, key)
	delete(a.resync, key)
	delete(a.arrived, key)
}

// reportSnapshot reports a read of the host mount table; nil is none.
// Lines that could not be parsed are logged once per distinct first
// error: they were left out, the node goes on.
func (a *Agent) reportSnapshot(r *snapshotRead) {
	if r == nil {
		return
	}
	a.obs.SnapshotTaken(r.Entries, r.Unparsed, r.Took)
	if r.Unparsed == 0 {
		return
	}
	msg := fmt.Sprint(r.Why)
	a.mu.Lock()
	seen := a.lastUnparsed == msg
	a.lastUnparsed = msg
	a.mu.Unlock()
	if !seen {
		a.log.Warn("lines of the host mount table could not be parsed and were left out", "lines", r.Unparsed, "first", msg)
	}
}

// reportPart carries one summary out: metrics, logs, Events (ref nil
// sends none) and the growth capacities to remember.
func (a *Agent) reportPart(st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, s summary) {
	for _, o := range s.Ops {
		a.obs.OpAttempt(string(o.Op), string(o.Result), o.Took)
		a.logOp(log, o)
	}
	for _, k := range s.Cleared {
		delete(st.warned, k)
	}
	for _, e := range s.Events {
		a.emit(st, ref, log, e)
	}
	for _, r := range s.Expansions {
		a.obs.Expansion(r)
	}
	if ref != nil {
		for name, r := range s.Sizes {
			a.obs.VolumeSizes(ref.Namespace, ref.Name, name, r)
		}
		for _, v := range s.Volumes {
			a.reportState(ref.Namespace, ref.Name, v)
			if v.State != StateUnmounted {
				a.obs.VolumeStaleOpen(ref.Namespace, ref.Name, v.Name, v.StaleOpen)
			}
		}
	}
	for name, c := range s.Capacity {
		st.capacity[name] = c
	}
	for name, n := range s.Busy {
		if n == 0 {
			delete(st.busy, name)
			continue
		}
		if st.busy == nil {
			st.busy = map[string]int{}
		}
		st.busy[name] = n
	}
}

// reportAttach observes what a pass measured of one volume's attach: a
// total or a phase that came out negative (the clocks disagree) is not
// observed.
func (a *Agent) reportAttach(t attachTiming) {
	if t.Total >= 0 {
		a.obs.AttachLatency(t.Mode, t.Total)
	}
	for _, p := range t.Phases {
		if p.Took >= 0 {
			a.obs.AttachPhase(p.Phase, p.Took)
		}
	}
}

// reportReconciled observes one reconcile of a VMI, or one orphan sweep,
// from its start; a zero start is none.
func (a *Agent) reportReconciled(start time.Time) {
	if !start.IsZero() {
		a.obs.Reconciled(time.Since(start))
	}
}

func (a *Agent) logOp(log *slog.Logger, o opReport) {
	vlog := log.With("volume", o.Name, "op", string(o.Op))
	switch {
	case o.Result == outcome.Error:
		vlog.Error(string(o.Op)+" failed", "error", o.Err.Error())
	case o.Result == outcome.NotPublished:
		vlog.Debug("volume not published by the attachment pod", "error", o.Err.Error())
	case o.Result.Changed():
		vlog.Info("volume changed", "result", string(o.Result))
	}
}

// emit sends one Event. A Once Warning is skipped while its last message
// for the volume and reason is the same; a refusal is logged and counted
// only when its Event is sent.
func (a *Agent) emit(st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, e event) {
	if e.Once {
		if st.warned[e.key()] == e.Message {
			return
		}
		st.warned[e.key()] = e.Message
	}
	if e.Refusal != nil {
		log.Warn("hotplug refused", "volume", e.Volume, "reason", e.Refusal.Reason, "message", e.Refusal.Message)
		a.obs.Refusal(e.Refusal.Reason)
	}
	if ref != nil {
		a.recorder.Event(ref, e.Type, e.Reason, e.Message)
	}
}

// reportState reports one volume's state, with its claim when known.
func (a *Agent) reportState(namespace, vmi string, v volumeState) {
	if v.Claim != "" {
		a.obs.VolumeClaim(namespace, vmi, v.Name, v.Claim)
	}
	a.obs.VolumeState(namespace, vmi, v.Name, v.Mode, v.State)
}

// reportGoneCheck observes one live read confirming a VMI gone, of a
// reconcile or of the orphan sweep.
func (a *Agent) reportGoneCheck(result string) {
	a.obs.GoneCheck(result)
}
