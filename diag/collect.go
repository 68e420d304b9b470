// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"context"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/diag/storage"
	"github.com/hpmount/hpmount/kubevirt"
)

// cluster is what the API says about the node: its VMIs and pods.
type apiView struct {
	// selected are the VMIs the report is about, sorted by namespace/name.
	selected []*kubevirt.VMI
	// all are every VMI on the node, for the orphan search; nil when they
	// could not be listed.
	all []*kubevirt.VMI
	// pods are the node's pods by UID, from the namespaces listed.
	pods map[types.UID]*corev1.Pod
	// claims are the PV names of the claims listed, by namespace/name; ""
	// for a claim that is not bound.
	claims map[string]string
	// storage is the storage side of the PVs (package storage).
	storage *storage.View
	// attaches are the last attach of each volume, from its Events; nil
	// when they could not be listed.
	attaches *attachEvents
	c        Clients
}

// collect lists the VMIs of the node and the pods they refer to.
func collect(ctx context.Context, opts *Options, c Clients, warn func(string)) (*apiView, error) {
	cl := &apiView{pods: map[types.UID]*corev1.Pod{}, claims: map[string]string{}, c: c}
	ns := opts.Namespace
	if opts.AllNamespaces {
		ns = metav1.NamespaceAll
	} else if ns == "" {
		ns = metav1.NamespaceDefault
	}
	// The storage side and the Events need nothing listed below, and a
	// field-selected list of Events makes the API server filter every
	// Event of the namespace: they are read while the rest is.
	var side sync.WaitGroup
	defer side.Wait()
	var attachErr error
	side.Go(func() { cl.storage = storage.Collect(ctx, c.Kube, c.Dyn, currentList) })
	side.Go(func() { cl.attaches, attachErr = listAttaches(ctx, c.Kube, ns) })
	selected, err := listVMIs(ctx, c, ns, opts.NodeName)
	if err != nil {
		return nil, cannotRun("list VirtualMachineInstances", err)
	}
	if cl.selected, err = filterNames(selected, opts.VMIs, ns); err != nil {
		return nil, err
	}
	if ns == metav1.NamespaceAll {
		cl.all = selected
	} else if all, err := listVMIs(ctx, c, metav1.NamespaceAll, opts.NodeName); err == nil {
		cl.all = all
	} else {
		warn(fmt.Sprintf("orphans searched only in the launchers of namespace %q: list VMIs of all namespaces: %v", ns, err))
	}
	if err := cl.listPods(ctx, opts.NodeName, ns); err != nil {
		return nil, cannotRun("list pods", err)
	}
	if ns != metav1.NamespaceAll && cl.all != nil {
		// Orphans in other namespaces' launchers are named when allowed.
		_ = cl.listPods(ctx, opts.NodeName, metav1.NamespaceAll)
	}
	// One list, not a GET per volume: on a node with a thousand volumes
	// the client's rate limit, not the API server, would set the pace.
	if err := cl.listClaims(ctx, ns); err != nil {
		return nil, cannotRun("list PersistentVolumeClaims", err)
	}
	side.Wait()
	if attachErr != nil {
		warn(fmt.Sprintf("last attaches not shown: %v", attachErr))
	}
	return cl, nil
}

// currentList is how diag lists: at the current revision (no
// resourceVersion). A list at resourceVersion "0" may come from a watch
// cache that has not caught up with writes made just before the run (the
// demo's Longhorn tickets, created a moment before diag ran, were missing),
// and diag reports what is true now. Since Kubernetes 1.31 the API server
// serves such a list from its watch cache once that is as new as etcd
// (consistent reads from cache, KEP-2340); before, one quorum read per
// list and run.
var currentList = metav1.ListOptions{}

func (cl *apiView) listClaims(ctx context.Context, ns string) error {
	list, err := cl.c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, currentList)
	if err != nil {
		return err
	}
	for i := range list.Items {
		p := &list.Items[i]
		cl.claims[p.Namespace+"/"+p.Name] = p.Spec.VolumeName
	}
	return nil
}

func listVMIs(ctx context.Context, c Clients, ns, node string) ([]*kubevirt.VMI, error) {
	var out []*kubevirt.VMI
	seen := map[string]bool{}
	// The node's own VMIs, and those migrating to it, as the agent
	// watches them.
	for _, label := range []string{kubevirt.LabelNodeName, kubevirt.LabelMigrationTargetNode} {
		sel := labels.Set{label: node}.AsSelector().String()
		list, err := c.Dyn.Resource(kubevirt.VMIResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			vmi, err := kubevirt.DecodeVMI(&list.Items[i])
			if err != nil {
				return nil, err
			}
			if key := vmi.Namespace + "/" + vmi.Name; !seen[key] {
				seen[key] = true
				out = append(out, vmi)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// filterNames keeps the VMIs named; a name that is not on the node is an
// error, since the user asked about it.
func filterNames(vmis []*kubevirt.VMI, names []string, ns string) ([]*kubevirt.VMI, error) {
	if len(names) == 0 {
		return vmis, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []*kubevirt.VMI
	for _, v := range vmis {
		if want[v.Name] {
			out = append(out, v)
			delete(want, v.Name)
		}
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for n := range want {
			missing = append(missing, n)
		}
		sort.Strings(missing)
		return nil, cannotRunf("find VirtualMachineInstances", "%v not found on this node in namespace %q", missing, ns)
	}
	return out, nil
}

func (cl *apiView) listPods(ctx context.Context, node, ns string) error {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	list, err := cl.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return err
	}
	for i := range list.Items {
		p := &list.Items[i]
		cl.pods[p.UID] = p
	}
	return nil
}

// pvName returns the PV bound to claim.
func (cl *apiView) pvName(_ context.Context, ns, claim string) (string, error) {
	pv, ok := cl.claims[ns+"/"+claim]
	switch {
	case !ok:
		return "", fmt.Errorf("claim %s/%s not found", ns, claim)
	case pv == "":
		return "", fmt.Errorf("claim %s/%s is not bound", ns, claim)
	}
	return pv, nil
}
