// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"testing"

	"github.com/hpmount/hpmount/kubevirt"
)

// BenchmarkNoopReconcile is one reconcile of a VMI with four healthy
// volumes (three filesystem, one block) whose inputs did not change: the
// agent's own cost per VMI on a resync, the engine being a fake that
// answers at once. The node's cost (mountinfo, stat) is measured by the
// scale harness (make bench-node).
func BenchmarkNoopReconcile(b *testing.B) {
	for _, resync := range []bool{false, true} {
		b.Run(fmt.Sprintf("resync=%v", resync), func(b *testing.B) {
			ta := newBenchAgent(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if resync {
					ta.mu.Lock()
					ta.resync[testKey] = true
					ta.mu.Unlock()
				}
				if err := ta.reconcile(ctx, testKey); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func newBenchAgent(b *testing.B) *testAgent {
	ta := newTestAgent(b, func(c *Config) { c.GrowFilesystems = true },
		pvc("c1", "pv-1"), pvc("c2", "pv-2"), pvc("c3", "pv-3"), pvc("c4", "pv-4"))
	ta.addPods(b, launcherPod(), attachmentPod())
	ta.setVMI(b, vmiObject(
		vol{Name: "a", Claim: "c1", AttachUID: attachUID},
		vol{Name: "b", Claim: "c2", AttachUID: attachUID},
		vol{Name: "c", Claim: "c3", AttachUID: attachUID},
		vol{Name: "d", Claim: "c4", AttachUID: attachUID, Mode: "Block"},
	))
	ta.engine.setObserved(launcherUID,
		healthyObserved("a", kubevirt.Filesystem), healthyObserved("b", kubevirt.Filesystem),
		healthyObserved("c", kubevirt.Filesystem), healthyObserved("d", kubevirt.Block))
	// One pass records the capacities the growth checks ran for.
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		b.Fatal(err)
	}
	return ta
}
