// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/diag/storage"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/simnode"
)

const (
	snapTicket = "snapshot-controller-snapshot-a36bedf5-fb3b-4b30-a10d-ed98f9c0323a"
	csiHere    = "csi-3d3120f43480db87c91a6902d670c35899917c03f9f6f81db7bf26d9d66e45ec"
	csiThere   = "csi-5852f2d48d96311bb582eeeaad0e38361031d502899416c71cea10795748a84b"
)

// TestStorageSide runs diag against a real kube-apiserver as the agent's
// ServiceAccount: without the Longhorn CRDs, then with them but without
// the storage-view role (forbidden), then with it. data is mounted and its
// Longhorn volume attached here; moved is not published because its
// Longhorn volume stays attached to node-b, held there by a snapshot ticket
// while the csi-attacher ticket of this node waits.
func TestStorageSide(t *testing.T) {
	e := newStorageEnv(t)
	e.must(e.ctl.EnsureNamespace(e.ctx, "default"))
	m := e.addVM("vm", fsVol("data"), fsVol("moved"))
	e.attachFS(m, "data", "pv-data", e.disk("data", "ext4", 32<<20), true)
	node := e.node.Name
	e.must(e.ctl.CreateCSIAttachment(e.ctx, simnode.CSIAttachment{Name: "csi-data-a", PV: "pv-data", Node: node, Attached: true}))
	e.must(e.ctl.CreateCSIAttachment(e.ctx, simnode.CSIAttachment{Name: "csi-moved-a", PV: "pv-moved", Node: node,
		AttachError: "rpc error: code = Aborted desc = volume pv-moved is not ready for workloads"}))
	e.must(e.ctl.CreateCSIAttachment(e.ctx, simnode.CSIAttachment{Name: "csi-moved-b", PV: "pv-moved", Node: "node-b", Attached: true}))
	sa := e.agentClients()

	t.Run("no Longhorn", func(t *testing.T) {
		rep, vols := e.run(e.opts())
		if rep.Storage.VolumeAttachments != storage.SourceRead || rep.Storage.Longhorn != storage.SourceAbsent || !strings.Contains(rep.Storage.Note, "Longhorn is not installed") {
			t.Errorf("storage sources %+v", rep.Storage)
		}
		if st := vols["data"].Storage; st == nil || st.VolumeAttachment == nil || !st.VolumeAttachment.Attached || st.Longhorn != nil || st.Problem != "" {
			t.Errorf("data storage %+v", st)
		}
		mv := vols["moved"]
		if mv.Storage == nil || !strings.Contains(mv.Storage.Problem, "attach to this node failed: rpc error") ||
			!strings.Contains(mv.Storage.Problem, "the PV is attached to node node-b (VolumeAttachment csi-moved-b)") {
			t.Errorf("moved storage %+v", mv.Storage)
		}
		if mv.Verdict != NotMounted || !strings.HasPrefix(mv.Hint, "the storage side explains it: ") {
			t.Errorf("moved: verdict %s hint %q", mv.Verdict, mv.Hint)
		}
	})

	e.must(e.cl.InstallLonghornCRDs(e.ctx))
	e.must(e.ctl.CreateLonghornVolume(e.ctx, simnode.LonghornVolume{Namespace: "longhorn-system", PV: "pv-data",
		PVCNamespace: "default", PVC: "claim-data", State: "attached", Robustness: "healthy", Node: node,
		Tickets: []simnode.LonghornTicket{{ID: csiHere, Type: "csi-attacher", Node: node, Satisfied: true}}}))
	e.must(e.ctl.CreateLonghornVolume(e.ctx, simnode.LonghornVolume{Namespace: "longhorn-system", PV: "pv-moved",
		PVCNamespace: "default", PVC: "claim-moved", State: "attached", Robustness: "healthy", Node: "node-b",
		Tickets: []simnode.LonghornTicket{
			{ID: csiHere, Type: "csi-attacher", Node: node, Message: "waiting for volume pv-moved to be detached from node-b"},
			{ID: snapTicket, Type: "snapshot-controller", Node: "node-b", Satisfied: true},
		}}))

	t.Run("forbidden", func(t *testing.T) {
		rep, err := Run(e.ctx, e.opts(), sa)
		e.must(err)
		if rep.Storage.VolumeAttachments != storage.SourceForbidden || rep.Storage.Longhorn != storage.SourceForbidden ||
			strings.Count(rep.Storage.Note, "forbidden") != 2 || !strings.Contains(rep.Storage.Note, "deploy/storage-view") {
			t.Errorf("storage sources %+v", rep.Storage)
		}
		var table bytes.Buffer
		e.must(Render(&table, rep, FormatWide))
		if n := strings.Count(table.String(), "\nstorage"); n != 1 {
			t.Errorf("forbidden storage shows in %d lines, want the one note line:\n%s", n, table.String())
		}
		for _, v := range rep.Volumes {
			if v.Storage != nil {
				t.Errorf("%s: storage %+v without the right to read it", v.Volume, v.Storage)
			}
		}
		if v := rep.Volumes[0]; v.Volume != "data" || v.Verdict != OK {
			t.Errorf("the node side changed when the storage side is forbidden: %+v", v)
		}
	})

	e.applyManifest("../deploy/storage-view/rbac.yaml")
	t.Run("storage-view", func(t *testing.T) {
		rep, err := Run(e.ctx, e.opts(), sa)
		e.must(err)
		if rep.Storage != (storage.Sources{VolumeAttachments: storage.SourceRead, Longhorn: storage.SourceRead}) {
			t.Errorf("storage sources %+v", rep.Storage)
		}
		vols := map[string]Volume{}
		for _, v := range rep.Volumes {
			vols[v.Volume] = v
		}
		data := vols["data"]
		if lh := data.Storage.Longhorn; data.Verdict != OK || lh == nil || lh.State != "attached" || lh.Robustness != "healthy" ||
			lh.CurrentNode != node || len(lh.Tickets) != 1 || !lh.Tickets[0].Satisfied || data.Storage.Problem != "" {
			t.Errorf("data: verdict %s storage %+v longhorn %+v", data.Verdict, data.Storage, lh)
		}
		mv := vols["moved"]
		for _, want := range []string{
			"Longhorn volume longhorn-system/pv-moved is attached to node node-b, not this node",
			"held there by ticket " + snapTicket + " (snapshot-controller) for node node-b",
			"waiting: ticket " + csiHere + " (csi-attacher) for node " + node + " [waiting for volume pv-moved to be detached from node-b]",
		} {
			if !strings.Contains(mv.Storage.Problem, want) || !strings.Contains(mv.Hint, want) {
				t.Errorf("moved: problem %q / hint %q lack %q", mv.Storage.Problem, mv.Hint, want)
			}
		}
		var js bytes.Buffer
		e.must(Render(&js, rep, FormatJSON))
		var decoded struct {
			Volumes []struct {
				Volume  string       `json:"volume"`
				Storage storage.Side `json:"storage"`
			} `json:"volumes"`
		}
		e.must(json.Unmarshal(js.Bytes(), &decoded))
		for _, v := range decoded.Volumes {
			if v.Volume == "moved" && (v.Storage.Longhorn == nil || len(v.Storage.Longhorn.Tickets) != 2 || v.Storage.VolumeAttachment.AttachError == "") {
				t.Errorf("moved in JSON: %+v", v.Storage)
			}
		}
		var table bytes.Buffer
		e.must(Render(&table, rep, FormatTable))
		if !strings.Contains(table.String(), "storage default/vm moved: VolumeAttachment csi-moved-a not attached, attach error;") {
			t.Errorf("table lacks moved's storage line:\n%s", table.String())
		}
		t.Logf("diag -o table:\n%s", table.String())
	})
}

// storageEnv is env with its control plane at hand, for CRDs and RBAC.
type storageEnv struct {
	*env
	cl *cluster.Cluster
}

func newStorageEnv(t *testing.T) *storageEnv {
	testutil.RequiresRoot(t)
	cl := cluster.Start(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cl.Logs(40))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	if err := cl.InstallVMICRD(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := cl.AdminConfig()
	kube, dyn := kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)
	node, err := simnode.New("node-a", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	return &storageEnv{env: &env{t: t, ctx: ctx, node: node, ctl: &simnode.Controller{Kube: kube, Dyn: dyn},
		c: Clients{Kube: kube, Dyn: dyn}}, cl: cl}
}

// agentClients applies deploy/rbac.yaml and returns clients of the agent's
// ServiceAccount, which diag runs as in the agent pod.
func (e *storageEnv) agentClients() Clients {
	e.t.Helper()
	e.applyManifest("../deploy/namespace.yaml")
	e.applyManifest("../deploy/rbac.yaml")
	cfg, err := e.cl.ServiceAccountConfig(e.ctx, "hpmount-system", "hpmount")
	e.must(err)
	return Clients{Kube: kubernetes.NewForConfigOrDie(cfg), Dyn: dynamic.NewForConfigOrDie(cfg)}
}

func (e *storageEnv) applyManifest(path string) {
	e.t.Helper()
	b, err := os.ReadFile(path)
	e.must(err)
	_, err = cluster.ApplyManifests(e.ctx, e.cl.AdminConfig(), b, false)
	e.must(err)
}
