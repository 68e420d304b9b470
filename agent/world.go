// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/kubevirt"
)

// world is what one reconcile of a VMI key starts from: everything read
// from the agent's caches and its own memory, and the PVs of the VMI's
// claims, which readWorld reads from the claim cache or, for a claim it
// does not hold, the API server (claims.go); nothing from the node.
// decide reads nothing else.
type world struct {
	Key, Namespace, Name string
	// VMI is nil when the key is in neither VMI cache: gone from this node
	// unless the API server says otherwise (gone.go). DecodeErr is set
	// when it is cached but cannot be read.
	VMI       *kubevirt.VMI
	DecodeErr error
	// Remembered is what the agent remembers of the key, nil when
	// nothing is. decide works on a copy; report alone writes it back.
	Remembered *vmiState
	// Resync: the periodic pass. Arrived: when the oldest VMI change not
	// yet reconciled arrived (the start of the attach latency). Now: the
	// reconcile's start.
	Resync bool
	// VerifyRules: the launcher's device rules were rewritten since the
	// last pass, by anyone (rules.go).
	VerifyRules  bool
	Arrived, Now time.Time
	Node         string
	// Pods reads the pod cache; Claims the PVs of the VMI's claims, read
	// by readWorld from the claim cache or the API server (claims.go).
	Pods   kubevirt.PodLookup
	Claims pvResolver
	// ReportVolumeStatus and GrowFilesystems are the agent's settings.
	ReportVolumeStatus, GrowFilesystems bool
}

// readWorld reads the caches, and the claims they lack, for one
// reconcile of key. ctx ends the claims' reads when the agent stops.
func (a *Agent) readWorld(ctx context.Context, key string, now time.Time) (world, error) {
	if !a.synced.Load() {
		return world{}, errors.New("informer caches not synced")
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	w := world{Key: key, Namespace: ns, Name: name, Now: now, Arrived: now, Node: a.cfg.NodeName, Pods: a, Claims: noClaims,
		ReportVolumeStatus: a.cfg.ReportVolumeStatus, GrowFilesystems: a.cfg.GrowFilesystems}
	w.Resync = a.takeResync(key)
	w.VerifyRules = a.takeRulesDue(key)
	r, exists, err := a.lookupVMI(key)
	if err != nil {
		return world{}, err
	}
	if exists {
		w.VMI, w.DecodeErr = r.vmi, r.decodeErr
	}
	if w.VMI != nil {
		needs := kubevirt.ClaimPods(w.VMI, a)
		w.Claims = a.claims.resolver(ctx, ns, needs, func() map[string][]types.UID { return a.namespaceNeeds(ns) })
	}
	a.mu.Lock()
	if st, ok := a.states[key]; ok {
		w.Remembered = st
	}
	if w.VMI != nil {
		if t, ok := a.arrived[key]; ok {
			w.Arrived = t
		}
		delete(a.arrived, key)
	}
	a.mu.Unlock()
	return w, nil
}

// lookupVMI returns the record of key from the node's own cache or,
// failing that, from the migration target cache: after the handoff
// completes both hold it, and the node's own is read.
func (a *Agent) lookupVMI(key string) (*vmiRecord, bool, error) {
	for _, inf := range [...]cache.SharedIndexInformer{a.vmiInformer, a.vmiTargetInformer} {
		if r, exists, err := cachedRecord(inf, key); err != nil || exists {
			return r, exists, err
		}
	}
	return nil, false, nil
}

// noClaims is the resolver of a world without a VMI: decide asks it
// nothing.
func noClaims(ns, claim string) (string, error) {
	return "", fmt.Errorf("persistentvolumeclaim %s/%s not read: no VMI", ns, claim)
}

// takeResync reports and clears whether key is due for a periodic pass.
func (a *Agent) takeResync(key string) bool { return a.take(a.resync, key) }

// takeRulesDue reports and clears whether key's launcher had its device
// rules rewritten since its last pass (rules.go).
func (a *Agent) takeRulesDue(key string) bool { return a.take(a.rulesDue, key) }

// take reports and clears key's mark in m, one of the agent's sets of
// keys guarded by a.mu.
func (a *Agent) take(m map[string]bool, key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	due := m[key]
	delete(m, key)
	return due
}
