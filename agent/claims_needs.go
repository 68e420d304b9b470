// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/kubevirt"
)

// claimNeeds maps each claim of vmi's hotplug volumes to the attachment
// pods of this node that carry it: the one its volume status names and the
// migration target's. A claim with no such pod yet is left out: no volume
// of it can be attached, and nothing is read for it.
func claimNeeds(vmi *kubevirt.VMI, pods kubevirt.PodLookup) map[string][]types.UID {
	out := map[string][]types.UID{}
	add := func(claim string, uid types.UID) {
		if claim == "" || uid == "" || slices.Contains(out[claim], uid) {
			return
		}
		if _, ok := pods.PodByUID(uid); ok {
			out[claim] = append(out[claim], uid)
		}
	}
	var target types.UID
	if m := vmi.Status.MigrationState; m != nil {
		target = m.TargetAttachmentPodUID
	}
	for _, nc := range vmi.Spec.HotplugClaims() {
		claim, st := nc.Claim, vmi.Status.VolumeStatusByName(nc.Name)
		if claim == "" && st != nil && st.PersistentVolumeClaimInfo != nil {
			claim = st.PersistentVolumeClaimInfo.ClaimName // as kubevirt.HotplugVolumes reads it
		}
		if st != nil && st.HotplugVolume != nil {
			add(claim, st.HotplugVolume.AttachPodUID)
		}
		add(claim, target)
	}
	return out
}

// claimResolver reads the PVs of vmi's claims for one pass: from the
// cache, else by a list of the namespace when many are missing, else by
// one GET each. The resolver it returns reads only what was read here,
// so decide makes no API call.
func (a *Agent) claimResolver(ctx context.Context, vmi *kubevirt.VMI) pvResolver {
	needs := claimNeeds(vmi, a)
	results := make(map[string]claimResult, len(needs))
	missing := a.fromClaimCache(vmi.Namespace, needs, results)
	if len(missing) > 0 {
		a.fillClaims(ctx, vmi.Namespace, len(missing))
		missing = a.fromClaimCache(vmi.Namespace, needs, results)
	}
	for _, claim := range missing {
		results[claim] = a.claims.read(ctx, vmi.Namespace, claim, needs[claim])
	}
	return func(ns, claim string) (string, error) {
		if claim == "" {
			return "", errors.New("volume names no claim")
		}
		r, ok := results[claim]
		if !ok { // no attachment pod of this node named it above
			r = a.claims.read(ctx, ns, claim, nil)
		}
		return r.pv, r.err
	}
}

// fromClaimCache puts the claims of needs that the cache holds for their
// pods into results and returns the others.
func (a *Agent) fromClaimCache(ns string, needs map[string][]types.UID, results map[string]claimResult) []string {
	var missing []string
	for claim, pods := range needs {
		if pv, ok := a.claims.cached(ns, claim, pods); ok {
			results[claim] = claimResult{pv: pv}
		} else {
			missing = append(missing, claim)
		}
	}
	slices.Sort(missing)
	return missing
}

// fillClaims lists namespace ns into the claim cache when n more missing
// claims make it due, or waits for such a list in flight.
func (a *Agent) fillClaims(ctx context.Context, ns string, n int) {
	due, wait := a.claims.startFill(ns, n)
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	if !due {
		return
	}
	defer a.claims.endFill(ns)
	a.claims.fill(ctx, ns, a.namespaceNeeds(ns))
}

// namespaceNeeds is claimNeeds over every VMI of namespace ns in the
// node's caches.
func (a *Agent) namespaceNeeds(ns string) map[string][]types.UID {
	out := map[string][]types.UID{}
	for _, inf := range [...]cache.SharedIndexInformer{a.vmiInformer, a.vmiTargetInformer} {
		objs, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		if err != nil {
			continue
		}
		for _, o := range objs {
			vmi, err := decodeCached(o)
			if err != nil {
				continue
			}
			for claim, pods := range claimNeeds(vmi, a) {
				for _, p := range pods {
					if !slices.Contains(out[claim], p) {
						out[claim] = append(out[claim], p)
					}
				}
			}
		}
	}
	return out
}

// pruneClaims drops from the claim cache what no VMI of the node names and
// the attachment pods gone from the node.
func (a *Agent) pruneClaims() {
	a.claims.prune(func(key string) bool {
		for _, inf := range [...]cache.SharedIndexInformer{a.vmiInformer, a.vmiTargetInformer} {
			if objs, err := inf.GetIndexer().ByIndex(claimIndex, key); err == nil && len(objs) > 0 {
				return true
			}
		}
		return false
	}, func(uid types.UID) bool {
		_, ok := a.PodByUID(uid)
		return ok
	})
}
