// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/kubevirt"
)

// namespaceNeeds is kubevirt.ClaimPods over every VMI of namespace ns in
// the node's caches: what a list of the namespace keeps (claims.go).
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
			for claim, pods := range kubevirt.ClaimPods(vmi, a) {
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
