// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// recorded is a record of virt-handler naming the launcher's volumes.
func recorded(stuck string, names ...string) map[types.UID]HandlerRecord {
	vols := map[string]bool{}
	for _, n := range names {
		vols[n] = true
	}
	return map[types.UID]HandlerRecord{kt.VMIUID: {Volumes: map[types.UID]map[string]bool{launcherUID: vols}, Stuck: stuck}}
}

// TestHandlerRecordRule: a volume that left the spec, or whose VMI was
// deleted, is left to virt-handler while its record names the target, it
// can act on its record and the launcher pod is there; otherwise hpmount
// detaches it. A record that cannot be read detaches nothing.
func TestHandlerRecordRule(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler map[types.UID]HandlerRecord
		readErr error
		deleted bool
		podGone bool
		want    []string
		result  outcome.Result
		wantErr bool
	}{
		{name: "recorded", handler: recorded("", "old"), want: nil, result: outcome.LeftToHandler},
		{name: "not recorded", handler: recorded("", "other"), want: []string{"detach launcher-uid old"}, result: outcome.Removed},
		{name: "no record", want: []string{"detach launcher-uid old"}, result: outcome.Removed},
		{name: "record stuck on a gone target", handler: recorded("/x/gone.img", "old"), want: []string{"detach launcher-uid old"}, result: outcome.Removed},
		{name: "record unreadable", readErr: errors.New("boom"), want: nil, wantErr: true},
		{name: "vmi deleted", handler: recorded("", "old"), deleted: true,
			want: []string{"detach launcher-uid hp"}, result: outcome.LeftToHandler},
		{name: "vmi and launcher pod deleted", handler: recorded("", "old", "hp"), deleted: true, podGone: true,
			want: []string{"detach launcher-uid hp", "detach launcher-uid old"}, result: outcome.Removed},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops := &opsSeen{}
			ta := standardAgent(t, func(cfg *Config) { cfg.Observer = ops })
			ta.engine.handler, ta.engine.handlerErr = c.handler, c.readErr
			u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
			ta.setVMI(t, u)
			ctx := context.Background()
			if err := ta.reconcile(ctx, testKey); err != nil {
				t.Fatal(err)
			}
			ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem), healthyObserved("old", kubevirt.Filesystem))
			ta.engine.reset()
			if c.deleted {
				if err := ta.vmiInformer.GetIndexer().Delete(u); err != nil {
					t.Fatal(err)
				}
			}
			if c.podGone {
				if err := ta.podInformer.GetIndexer().Delete(launcherPod()); err != nil {
					t.Fatal(err)
				}
			}
			err := ta.reconcile(ctx, testKey)
			if (err != nil) != c.wantErr {
				t.Fatalf("reconcile: %v, want an error: %v", err, c.wantErr)
			}
			if c.result != "" && !slices.Contains(ops.take(), "detach "+string(c.result)) {
				t.Errorf("operations reported: %v, want detach %s", ops.seen, c.result)
			}
			if got := ta.engine.changing(); !slices.Equal(got, c.want) {
				t.Fatalf("calls = %v, want %v", got, c.want)
			}
			if !slices.Contains(ta.engine.calls, "handler record "+string(kt.VMIUID)) {
				t.Errorf("calls = %v; want virt-handler's record read", ta.engine.calls)
			}
		})
	}
}

// opsSeen is an Observer that keeps the operations reported.
type opsSeen struct {
	NopObserver
	mu   sync.Mutex
	seen []string
}

var _ Observer = (*opsSeen)(nil)

func (o *opsSeen) OpAttempt(op, result string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, op+" "+result)
}

func (o *opsSeen) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seen)
}
