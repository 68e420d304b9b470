// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// clusterClaims is the size of the large cluster. Creating them against
// this test's API server takes about 20 s on two cores.
const clusterClaims = 20000

// TestClaimsScaleWithTheNode: what an agent receives and holds for claims
// follows the claims of its node, not the cluster's (issue #23). An agent
// serving one VM with two hotplugged claims is started in a cluster of
// 1,000 claims and again, on the same node, in one of 20,000: it reads the
// same two claims and receives as many bytes for them either time, where
// an informer of every claim (what the agent ran before) receives twenty
// times as much. Then a claim is deleted and created again under its name,
// bound to another PV, and hotplugged through a new attachment pod: the
// agent mounts the new PV.
func TestClaimsScaleWithTheNode(t *testing.T) {
	e := newEnv(t)
	e.createOtherClaims(0, 1000-2)
	node, err := simnode.New("node-2", e.root.TempDir())
	e.must(err)
	e.root.Cleanup(node.Close)
	hv, err := harness.NewVM(e.ctx, e.ctrl, node, "tenant-claims", "vm1")
	e.must(err)
	v := &vm{VM: hv, e: e}
	data := v.addVolume("data", "ext4", 64<<20)
	raw := v.addVolume("raw", "", 32<<20)
	v.newAttachmentPod(data, raw)
	v.apply()

	var small, large claimTraffic
	e.step("1,000 claims in the cluster", func(t *testing.T) {
		small = e.claimsAtStart(node, 2, func() { v.waitMounted(data); v.waitNode(raw) })
		t.Logf("1,000 claims: agent received %s", small)
	})
	e.step(fmt.Sprintf("%d claims in the cluster", clusterClaims), func(t *testing.T) {
		start := time.Now()
		e.createOtherClaims(1000-2, clusterClaims-2)
		t.Logf("created %d more claims in %s", clusterClaims-1000, time.Since(start).Round(time.Second))
		large = e.claimsAtStart(node, 2, func() {})
		t.Logf("%d claims: agent received %s", clusterClaims, large)
		if small.agent.Distinct != 2 || large.agent.Distinct != 2 || large.agent.Bytes > small.agent.Bytes*3/2 {
			t.Fatalf("the agent received %s for claims in the large cluster, %s in the small one: it grows with the cluster",
				large.agent, small.agent)
		}
		if large.informer.Bytes < 10*small.informer.Bytes {
			t.Fatalf("an informer of every claim received %s, then %s: the clusters differ too little to show anything",
				small.informer, large.informer)
		}
	})
	e.step("a claim recreated under its name is followed", func(t *testing.T) {
		e.recreateClaim(v, data)
	})
}

// claimTraffic is what the agent and, for comparison, an informer of every
// claim received for claims.
type claimTraffic struct{ agent, informer harness.ProxyCount }

func (c claimTraffic) String() string {
	return fmt.Sprintf("%s (an informer of every claim: %s)", c.agent, c.informer)
}

// claimsAtStart starts an agent for node through a counting proxy, waits
// until it reconciled the node (want volumes mounted, and ready first),
// and counts what it received for claims; then an informer of every claim
// through another proxy, as the agent ran before.
func (e *env) claimsAtStart(node *simnode.Node, want int, ready func()) claimTraffic {
	e.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	e.must(err)
	p := e.startCountingProxy(cfg)
	bin, err := harness.Binary()
	e.must(err)
	a, err := harness.StartAgent(harness.AgentOptions{Binary: bin, Kubeconfig: p.kubeconfig, Node: node})
	e.must(err)
	defer a.Kill()
	e.eventually("agent of node-2 ready", 60*time.Second, a.Ready)
	ready()
	e.eventually("node-2's volumes counted mounted", 60*time.Second, func() error {
		text, err := a.Scrape()
		if err != nil {
			return err
		}
		vols, err := harness.Counters(text, "hpmount_volumes")
		if err != nil {
			return err
		}
		n := 0.0
		for labels, v := range vols {
			if strings.Contains(labels, `state="mounted"`) {
				n += v
			}
		}
		if int(n) != want {
			return fmt.Errorf("%v volumes mounted, want %d", n, want)
		}
		return nil
	})
	agent := p.Count()

	ip := e.startCountingProxy(e.cluster.AdminConfig())
	kube, err := kubernetes.NewForConfig(ip.config)
	e.must(err)
	inf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "persistentvolumeclaims",
		metav1.NamespaceAll, fields.Everything()), &corev1.PersistentVolumeClaim{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		e.t.Fatal("claim informer did not sync")
	}
	informer := ip.Count()
	informer.Distinct = len(inf.GetStore().ListKeys())
	return claimTraffic{agent: agent, informer: informer}
}

// createOtherClaims creates claims number from to to-1, bound to PVs of
// their own, in 20 namespaces none of the node's VMs uses.
func (e *env) createOtherClaims(from, to int) {
	e.t.Helper()
	admin := e.cluster.AdminConfig()
	admin.QPS, admin.Burst = -1, 0
	kube := kubernetes.NewForConfigOrDie(admin)
	for i := range 20 {
		e.must(e.ctrl.EnsureNamespace(e.ctx, fmt.Sprintf("other-%d", i)))
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 16 {
		wg.Go(func() {
			for i := range work {
				pvc := &corev1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("other-%d", i%20), Name: fmt.Sprintf("claim-%d", i)},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						VolumeName:  fmt.Sprintf("pv-other-%d", i),
						Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				}
				if _, err := kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := failed.Load(); err != nil {
		e.t.Fatalf("create claims: %v", *err)
	}
}

// recreateClaim unplugs vol, deletes its claim and creates it again bound
// to a new PV on a new disk, and hotplugs it through a new attachment pod,
// as KubeVirt would: the agent must mount the new PV.
func (e *env) recreateClaim(v *vm, vol simnode.Volume) {
	e.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	e.must(err)
	p := e.startCountingProxy(cfg)
	bin, err := harness.Binary()
	e.must(err)
	a, err := harness.StartAgent(harness.AgentOptions{Binary: bin, Kubeconfig: p.kubeconfig, Node: v.Node})
	e.must(err)
	defer a.Kill()
	e.eventually("agent of node-2 ready", 60*time.Second, a.Ready)
	old := v.waitMounted(vol)

	pods := v.Ctrl.Kube.CoreV1().Pods(v.NS)
	list, err := pods.List(e.ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=hotplug-disk"})
	e.must(err)
	carried := append([]simnode.Volume(nil), v.Vols...)
	v.RemoveVolume(vol.Name)
	for i := range list.Items {
		v.replaceAttachmentPod(&list.Items[i], carried, v.Vols...)
	}
	delete(v.Attach, vol.Name)
	v.apply()
	v.waitGone(vol)

	claims := v.Ctrl.Kube.CoreV1().PersistentVolumeClaims(v.NS)
	e.must(claims.Delete(e.ctx, vol.Claim, metav1.DeleteOptions{}))
	// No controller removes kube-apiserver's pvc-protection finalizer here.
	_, err = claims.Patch(e.ctx, vol.Claim, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	e.must(err)
	e.eventually("claim deleted", 30*time.Second, func() error {
		if _, err := claims.Get(e.ctx, vol.Claim, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("claim %s still there", vol.Claim)
		}
		return nil
	})
	renewed := vol
	renewed.PV = vol.PV + "-new"
	d, err := v.Node.NewDisk(v.Name+"-"+vol.Name+"-new", "ext4", 64<<20)
	e.must(err)
	e.must(v.Ctrl.CreatePVC(e.ctx, v.NS, renewed))
	v.Disks[vol.Name] = d
	v.Vols = append(v.Vols, renewed)
	v.newAttachmentPod(renewed)
	v.apply()
	id := v.waitMounted(renewed)
	v.roundTrip(e.t, renewed, "recreated-claim")
	e.t.Logf("mount %d of the old claim's PV, %d of the new one's; agent received %s", old, id, p.Count())
}

// countingProxy is a harness.CountingProxy of claims and a kubeconfig
// through it.
type countingProxy struct {
	*harness.CountingProxy
	config     *rest.Config
	kubeconfig string
}

// startCountingProxy starts a proxy to the API server of cfg that counts
// what it sends for claims, and writes a kubeconfig with cfg's credentials
// through it.
func (e *env) startCountingProxy(cfg *rest.Config) *countingProxy {
	e.t.Helper()
	p, err := harness.StartCountingProxy(cfg, "persistentvolumeclaims")
	e.must(err)
	e.root.Cleanup(func() { _ = p.Close() })
	c := &countingProxy{CountingProxy: p, config: p.Config(cfg), kubeconfig: filepath.Join(e.root.TempDir(), "counted.kubeconfig")}
	e.must(cluster.WriteKubeconfig(c.kubeconfig, c.config))
	return c
}
