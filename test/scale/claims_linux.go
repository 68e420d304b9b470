// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
)

// otherNamespaces hold the claims of the rest of the cluster.
const otherNamespaces = 20

// measureClaims fills the cluster with claims no VMI of the node names, up
// to --cluster-claims, and restarts the agent through a proxy that counts
// what the API server sends it for claims (issue #23). An informer of
// every claim, what the agent ran before, is measured beside it through
// another proxy, in the cluster as it was (only the node's claims) and as
// it is now.
func (e *env) measureClaims() error {
	node := e.total()
	if err := e.checkNode(); err != nil { // the step runs alone: mount first
		a, err := e.startAgent(time.Minute)
		if err != nil {
			return err
		}
		_, err = e.waitMounted(a, node)
		a.stop()
		if err != nil {
			return err
		}
	}
	small, err := e.claimInformer()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := e.ensureOtherClaims(); err != nil {
		return err
	}
	fmt.Printf("   %d more claims created in %s\n", e.opts.clusterClaims-node, time.Since(start).Round(time.Second))
	got, took, err := e.agentClaims()
	if err != nil {
		return err
	}
	large, err := e.claimInformer()
	if err != nil {
		return err
	}
	cl := fmt.Sprintf("%d claims in the cluster, %d on the node", e.opts.clusterClaims, node)
	e.report.add(row{what: "claims: bytes the agent received at start, " + cl, unit: "KiB",
		runs: []float64{kib(got.Bytes)}, target: kib(small.Bytes),
		note: fmt.Sprintf("%s; target: what an informer of every claim receives with only the node's %d claims in the cluster; "+
			"that informer (the agent before #23) received %s KiB in this cluster, %.0f× the agent's", requests(got.Requests), node,
			num(kib(large.Bytes)), float64(large.Bytes)/float64(got.Bytes))})
	e.report.add(row{what: "claims: different claims the agent received at start (it keeps those its attachment pods name), " + cl,
		unit: "claims", runs: []float64{float64(got.Distinct)}, target: float64(small.Distinct),
		note: fmt.Sprintf("%d objects in all; an informer of every claim holds %d in this cluster, %d with only the node's",
			got.Objects, large.Distinct, small.Distinct)})
	e.report.add(row{what: "cold start with everything mounted, " + cl + ", until every volume is verified", unit: "s",
		runs: []float64{took.Seconds()}, target: 1})
	e.report.explain("claims", "The claim rows restart the agent once more, through a proxy that counts what the API server "+
		"sends it for claims, after the cluster was filled with claims in namespaces where the node runs no VMI. "+
		"The comparison is an informer of every claim, run by the harness through another proxy before and after the filling: "+
		"what every agent listed and watched before issue #23. The agent now reads only the claims its attachment pods name: "+
		"one GET each, or one list of a namespace that holds at most twice what it wants from it.")
	return nil
}

func kib(b int64) float64 { return float64(b) / 1024 }

// requests says how many requests of each kind, e.g. "4 GET, 3 LIST".
func requests(byKind map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		parts = append(parts, fmt.Sprintf("%d %s", byKind[k], k))
	}
	return strings.Join(parts, ", ")
}

// agentClaims starts the agent through a counting proxy and returns what
// it received for claims until every volume was verified, and how long
// that took.
func (e *env) agentClaims() (harness.ProxyCount, time.Duration, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", e.agentKC)
	if err != nil {
		return harness.ProxyCount{}, 0, err
	}
	p, err := harness.StartCountingProxy(cfg, "persistentvolumeclaims")
	if err != nil {
		return harness.ProxyCount{}, 0, err
	}
	defer p.Close()
	kc := filepath.Join(e.dir, "claims.kubeconfig")
	if err := cluster.WriteKubeconfig(kc, p.Config(cfg)); err != nil {
		return harness.ProxyCount{}, 0, err
	}
	log, err := os.OpenFile(e.agentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return harness.ProxyCount{}, 0, err
	}
	defer log.Close()
	h, err := harness.StartAgent(harness.AgentOptions{Binary: e.opts.binary, Kubeconfig: kc, Node: e.node,
		Resync: time.Minute, Args: e.opts.agentArgs, Log: log})
	if err != nil {
		return harness.ProxyCount{}, 0, err
	}
	a := &agent{Agent: h, metrics: h.MetricsAddr, started: h.Started, cmd: h.Cmd, done: h.Done()}
	defer a.stop()
	took, err := e.waitMounted(a, e.total())
	if err != nil {
		return harness.ProxyCount{}, 0, err
	}
	got := p.Count()
	fmt.Printf("   agent: every volume verified in %s; received for claims %s\n", took.Round(time.Millisecond), got)
	return got, took, nil
}

// claimInformer runs an informer of every claim of the cluster, as the
// agent did before issue #23, through a counting proxy with the admin's
// credentials (the agent's may no longer watch claims), until it synced.
func (e *env) claimInformer() (harness.ProxyCount, error) {
	admin := e.cluster.AdminConfig()
	p, err := harness.StartCountingProxy(admin, "persistentvolumeclaims")
	if err != nil {
		return harness.ProxyCount{}, err
	}
	defer p.Close()
	kube, err := kubernetes.NewForConfig(p.Config(admin))
	if err != nil {
		return harness.ProxyCount{}, err
	}
	inf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "persistentvolumeclaims",
		metav1.NamespaceAll, fields.Everything()), &corev1.PersistentVolumeClaim{}, 0, cache.Indexers{})
	ctx, cancel := context.WithTimeout(e.ctx, waitLimit)
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return harness.ProxyCount{}, fmt.Errorf("an informer of every claim did not sync within %s", waitLimit)
	}
	got := p.Count()
	got.Distinct = len(inf.GetStore().ListKeys())
	fmt.Printf("   an informer of every claim: %d held, received %s\n", got.Distinct, got)
	return got, nil
}

// createOtherClaims creates n claims, bound to PVs of their own, spread
// over otherNamespaces namespaces where no VMI of the node runs.
func (e *env) createOtherClaims(n int) error {
	admin := rest.CopyConfig(e.cluster.AdminConfig())
	admin.QPS, admin.Burst = -1, 0
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	for i := range otherNamespaces {
		if err := e.ctrl.EnsureNamespace(e.ctx, fmt.Sprintf("other-%d", i)); err != nil {
			return err
		}
	}
	if err := inParallel(n, func(i int) error { return createOtherClaim(e.ctx, kube, i) }); err != nil {
		return fmt.Errorf("create claims: %w", err)
	}
	return nil
}

func createOtherClaim(ctx context.Context, kube kubernetes.Interface, i int) error {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("other-%d", i%otherNamespaces), Name: fmt.Sprintf("claim-%d", i)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeName:  fmt.Sprintf("pv-other-%d", i),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err := kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	return err
}

// inParallel calls fn for 0..n-1 on 16 goroutines, as many requests in
// flight as the harness's unthrottled client keeps the API server busy
// with, and returns one of the errors.
func inParallel(n int, fn func(int) error) error {
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 16 {
		wg.Go(func() {
			for i := range work {
				if err := fn(i); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}
