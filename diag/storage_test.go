// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"strings"
	"testing"

	"github.com/hpmount/hpmount/diag/storage"
)

// TestExplainStorage: a storage problem leads the hint of a verdict it can
// cause, and leaves an ok volume's verdict and hint alone.
func TestExplainStorage(t *testing.T) {
	st := &storage.Side{Longhorn: &storage.LonghornVolume{Namespace: "longhorn-system", Name: "pvc-0dc9"}, Problem: "Longhorn volume is attached to node x"}
	v := Volume{Verdict: NotMounted, Hint: "base hint"}
	explainStorage(&v, st)
	if !strings.HasPrefix(v.Hint, "the storage side explains it: Longhorn volume is attached to node x (`kubectl -n longhorn-system get volumeattachments.longhorn.io pvc-0dc9 -o yaml`") ||
		!strings.HasSuffix(v.Hint, "; base hint") || v.Storage != st {
		t.Errorf("not-mounted hint %q", v.Hint)
	}
	okv := Volume{Verdict: OK}
	explainStorage(&okv, st)
	if okv.Hint != "" || okv.Verdict != OK || okv.Storage != st {
		t.Errorf("ok volume: %+v", okv)
	}
}

// TestStorageTable: one compact line per volume, the sources note, and the
// problem marked; the table format keeps them within TableWidth.
func TestStorageTable(t *testing.T) {
	r := &Report{Node: "node-0", Storage: storage.Sources{VolumeAttachments: storage.SourceRead, Longhorn: storage.SourceAbsent, Note: "Longhorn is not installed"},
		Volumes: []Volume{
			{Namespace: "default", VMI: "vm", Volume: "data", Verdict: OK, Storage: &storage.Side{
				VolumeAttachment: &storage.CSIAttachment{Name: "csi-aaa", Node: "node-0", Attached: true},
				Longhorn: &storage.LonghornVolume{Name: "pvc-0dc9", State: "attached", Robustness: "healthy", CurrentNode: "node-0",
					Tickets: []storage.Ticket{{ID: "csi-0", Type: "csi-attacher", Node: "node-0", Satisfied: true}, {ID: "snapshot-2", Type: "snapshot-controller", Node: "node-2"}}}}},
			{Namespace: "default", VMI: "vm", Volume: "plain", Verdict: OK},
			{Namespace: "default", VMI: "vm", Volume: "stuck", Verdict: NotMounted, Hint: "h", Storage: &storage.Side{Problem: "detach stuck"}},
		}}
	var b strings.Builder
	if err := Render(&b, r, FormatTable); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if n := len([]rune(line)); n > TableWidth {
			t.Errorf("table line of %d columns: %q", n, line)
		}
	}
	b.Reset()
	if err := Render(&b, r, FormatWide); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"storage: Longhorn is not installed\n",
		"storage default/vm data: VolumeAttachment csi-aaa attached; Longhorn pvc-0dc9 attached/healthy on " + "node-0" +
			"; tickets: csi-attacher@" + "node-0" + " satisfied, snapshot-controller@" + "node-2" + " waiting\n",
		"storage default/vm stuck: no VolumeAttachment on this node; PROBLEM: detach stuck\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "storage default/vm plain") {
		t.Errorf("a volume without a storage side got a storage line:\n%s", out)
	}
}
