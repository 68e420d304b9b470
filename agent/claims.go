// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Why claims are read by name and not from an informer (issue #23).
//
// The agent needs one fact of a claim: the PersistentVolume it is bound
// to, whose name the kubelet's directories carry. It used to list and
// watch every claim of the cluster on every node, so an agent held and
// received a copy of each of them (20,000 claims: every node lists all of
// them at start and after every outage) to use the few its VMIs name.
// Now it asks for those by name and remembers the answer, so what it
// holds and receives grows with the claims of its own node.
//
// A bound claim's spec.volumeName never changes, so the only way its
// answer goes stale is a claim deleted and created again under the same
// name (a new UID, maybe another PV). The API server's pvc-protection
// finalizer keeps a claim while a pod that is not terminated names it, so
// a recreated claim is always reached through another attachment pod: the
// old one had to end first. The cache therefore remembers, per claim, the
// attachment pods it was read for, and reads it again when a VMI names it
// through an attachment pod it was not read for. A claim that is not
// bound or being deleted is not remembered: it is read again on every pass
// that needs it. What brings such a pass is what brought a claim's update
// before, without a watch of claims: virt-controller writes
// an attachment pod's UID into the volume's status only once the pod's
// container is ready (updateVolumeStatus in pkg/virt-controller/watch/vmi),
// which the kubelet allows only once the claim is bound and published, and
// it moves the volume's phase from Pending to Bound when the claim binds:
// both are VMI updates, as is the pod's own status on this node. A pass
// that still finds the claim unbound is retried with the queue's backoff,
// and every VMI is reconciled once per resync period.
//
// A claim that is not found is not asked for again for a while, for the
// same attachment pods (absentFirst): a ready attachment pod carries
// every claim it names, so it is a VMI naming claims that do not exist,
// and what it names must not cost the node a read per claim and pass. A
// complete list of its namespace that does not hold it says so as well
// as a GET would, and the first wait is as long as a namespace waits
// between lists, so that claims found missing together are asked for
// again by one list, not one GET each: a VMI naming 3,000 claims that do
// not exist cost 3,000 GETs on its first pass and again at every expiry,
// at the client's 50 a second a minute of the node's API budget each
// time (#37). Whatever is left to read by name, a pass reads at most
// claimGetsPerPass of per namespace.
//
// A node starting with hundreds of VMIs would send one GET per claim at
// once, and the client's rate limit (50 a second) would set the pace: a
// thousand claims would take 18 s. So when many claims of one namespace
// are missing, the namespace is listed instead, if it holds at most
// fillFactor times what the node wants from it: one LIST with limit 1
// tells its size (remainingItemCount). What is received stays a multiple
// of what the node uses, and only the wanted claims are kept.

const (
	// fillMin is how many claims of one namespace must be missing before
	// a list of the namespace is considered instead of GETs.
	fillMin = 8
	// fillFactor bounds a namespace list: the namespace holds at most this
	// many times the claims the node wants from it.
	fillFactor = 2
	// fillEvery is how soon a namespace is listed or sized again: claims
	// that stay missing (not bound yet) do not make every pass list.
	fillEvery = 10 * time.Second
	// fillPage is the page size of a namespace list.
	fillPage = 500
	// claimReadTimeout bounds one read of a claim on the reconcile path.
	claimReadTimeout = 10 * time.Second
	// absentFirst and absentMax bound how long a claim found missing for
	// an attachment pod is not asked for again: the wait doubles from the
	// first to the most while the claim stays missing.
	absentFirst = fillEvery
	absentMax   = 5 * time.Minute
	// claimGetsPerPass bounds the claims of one namespace a pass reads by
	// name; the others wait for a later pass (a transient error, retried
	// with the queue's backoff).
	claimGetsPerPass = 64
)

// claimEntry is what the cache remembers of one bound claim.
type claimEntry struct {
	uid types.UID
	pv  string
	// pods are the attachment pods the claim was read for.
	pods map[types.UID]bool
}

// absentEntry is what the cache remembers of a claim the API server said
// does not exist: for which attachment pods, and until when it is not
// asked for again.
type absentEntry struct {
	pods        map[types.UID]bool
	until       time.Time
	wait        time.Duration
	notFoundErr error
}

// claimCache maps the claims the node's VMIs name to their bound PVs,
// read from the API server by name (see above).
type claimCache struct {
	kube kubernetes.Interface
	now  func() time.Time

	mu      sync.Mutex
	entries map[string]*claimEntry // by namespace/name
	// absent are the claims found missing (see absentFirst): an
	// attachment pod carries every claim it names once it is ready, so
	// one that does not exist is a VMI naming claims that are not there,
	// and must not cost a read on every pass.
	absent map[string]*absentEntry
	// sized is when each namespace was last sized for a list; missed
	// counts its claims found missing since.
	sized  map[string]time.Time
	missed map[string]int
	// filling holds the namespace lists in flight; closed when done.
	filling map[string]chan struct{}
}

func newClaimCache(kube kubernetes.Interface) *claimCache {
	return &claimCache{kube: kube, now: time.Now, entries: map[string]*claimEntry{}, absent: map[string]*absentEntry{},
		sized: map[string]time.Time{}, missed: map[string]int{}, filling: map[string]chan struct{}{}}
}

// claimResult is one claim's PV, or why it has none.
type claimResult struct {
	pv  string
	err error
}

// cached returns the PV of namespace/name when the claim was read for
// every pod of pods.
func (c *claimCache) cached(ns, name string, pods []types.UID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[ns+"/"+name]
	if !ok {
		return "", false
	}
	for _, p := range pods {
		if !e.pods[p] {
			return "", false
		}
	}
	return e.pv, true
}

// read GETs namespace/name (a quorum read) and remembers it, read for
// pods, when it is bound and not being deleted.
func (c *claimCache) read(ctx context.Context, ns, name string, pods []types.UID) claimResult {
	ctx, cancel := context.WithTimeout(ctx, claimReadTimeout)
	defer cancel()
	pvc, err := c.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.forget(ns + "/" + name)
		return c.missing(ns+"/"+name, pods)
	case err != nil:
		return claimResult{err: fmt.Errorf("get persistentvolumeclaim %s/%s: %w", ns, name, err)}
	}
	return c.keep(pvc, pods)
}

// keep remembers pvc as read for pods and returns its PV.
func (c *claimCache) keep(pvc *corev1.PersistentVolumeClaim, pods []types.UID) claimResult {
	key := pvc.Namespace + "/" + pvc.Name
	c.mu.Lock()
	delete(c.absent, key) // it exists now
	c.mu.Unlock()
	if pvc.Spec.VolumeName == "" {
		c.forget(key)
		return claimResult{err: fmt.Errorf("persistentvolumeclaim %s is not bound", key)}
	}
	if pvc.DeletionTimestamp != nil {
		// Its name will hold another claim soon: not remembered.
		c.forget(key)
		return claimResult{pv: pvc.Spec.VolumeName}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.uid != pvc.UID || e.pv != pvc.Spec.VolumeName {
		e = &claimEntry{uid: pvc.UID, pv: pvc.Spec.VolumeName, pods: map[types.UID]bool{}}
		c.entries[key] = e
	}
	for _, p := range pods {
		e.pods[p] = true
	}
	return claimResult{pv: e.pv}
}

func (c *claimCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// missing remembers that the claim of key was not found for pods, and
// doubles the wait before it is asked for again.
func (c *claimCache) missing(key string, pods []types.UID) claimResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.absent[key]
	if !ok {
		e = &absentEntry{pods: map[types.UID]bool{}, notFoundErr: fmt.Errorf("persistentvolumeclaim %s not found", key)}
		c.absent[key] = e
	}
	e.wait = min(max(2*e.wait, absentFirst), absentMax)
	e.until = c.now().Add(e.wait)
	for _, p := range pods {
		e.pods[p] = true
	}
	return claimResult{err: e.notFoundErr}
}

// stillMissing returns the not-found result of a claim found missing for
// every pod of pods whose wait has not run out.
func (c *claimCache) stillMissing(ns, name string, pods []types.UID) (claimResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.absent[ns+"/"+name]
	if !ok || !c.now().Before(e.until) {
		return claimResult{}, false
	}
	for _, p := range pods {
		if !e.pods[p] {
			return claimResult{}, false
		}
	}
	return claimResult{err: e.notFoundErr}, true
}

// len is how many claims the cache holds.
func (c *claimCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// prune drops the claims no VMI of the node names, the pods that are gone
// from the node, and the namespaces' sizing that no longer holds anything
// back, so the cache holds what the node uses now.
func (c *claimCache) prune(named func(key string) bool, podExists func(types.UID) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ns, t := range c.sized {
		if c.now().Sub(t) >= fillEvery {
			delete(c.sized, ns)
		}
	}
	for ns := range c.missed {
		if _, ok := c.sized[ns]; !ok {
			delete(c.missed, ns)
		}
	}
	for key := range c.absent {
		if !named(key) {
			delete(c.absent, key)
		}
	}
	for key, e := range c.entries {
		if !named(key) {
			delete(c.entries, key)
			continue
		}
		for p := range e.pods {
			if !podExists(p) {
				delete(e.pods, p)
			}
		}
	}
}

// startFill counts n claims of namespace ns missing from the cache and
// reports whether the caller should list the namespace now: fillMin
// missed since it was last sized, fillEvery ago at least. done is then to
// be closed by endFill. wait is a fill of ns in flight, nil when none.
func (c *claimCache) startFill(ns string, n int) (due bool, wait <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if done, ok := c.filling[ns]; ok {
		return false, done
	}
	c.missed[ns] += n
	if t, ok := c.sized[ns]; c.missed[ns] < fillMin || ok && c.now().Sub(t) < fillEvery {
		return false, nil
	}
	c.sized[ns], c.missed[ns] = c.now(), 0
	c.filling[ns] = make(chan struct{})
	return true, nil
}

func (c *claimCache) endFill(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.filling[ns])
	delete(c.filling, ns)
}

// resolver reads the PVs of needs (claim name → attachment pods), the
// claims of namespace ns one pass wants: from the cache, else by a list of
// the namespace when many are missing (nsNeeds says what the node's VMIs
// want of it), else by one GET each. The resolver it returns reads only
// what was read here, so decide makes no API call.
func (c *claimCache) resolver(ctx context.Context, ns string, needs map[string][]types.UID, nsNeeds func() map[string][]types.UID) pvResolver {
	results := make(map[string]claimResult, len(needs))
	missing := c.fromCache(ns, needs, results)
	if len(missing) > 0 {
		c.fillIfDue(ctx, ns, len(missing), nsNeeds)
		missing = c.fromCache(ns, needs, results)
	}
	for i, claim := range missing {
		if i >= claimGetsPerPass {
			results[claim] = claimResult{err: fmt.Errorf("persistentvolumeclaim %s/%s: not read in this pass: %d claims of the namespace are to be read by name, %d a pass",
				ns, claim, len(missing), claimGetsPerPass)}
			continue
		}
		results[claim] = c.read(ctx, ns, claim, needs[claim])
	}
	return func(ns, claim string) (string, error) {
		if claim == "" {
			return "", errors.New("volume names no claim")
		}
		r, ok := results[claim]
		if !ok { // no attachment pod of this node named it above
			r = c.read(ctx, ns, claim, nil)
		}
		return r.pv, r.err
	}
}

// fromCache puts the claims of needs that the cache holds for their pods,
// or found missing for them not long ago, into results and returns the
// others.
func (c *claimCache) fromCache(ns string, needs map[string][]types.UID, results map[string]claimResult) []string {
	var missing []string
	for claim, pods := range needs {
		if pv, ok := c.cached(ns, claim, pods); ok {
			results[claim] = claimResult{pv: pv}
		} else if r, ok := c.stillMissing(ns, claim, pods); ok {
			results[claim] = r
		} else {
			missing = append(missing, claim)
		}
	}
	slices.Sort(missing)
	return missing
}

// fillIfDue lists namespace ns into the cache when n more missing claims
// make it due, or waits for such a list in flight.
func (c *claimCache) fillIfDue(ctx context.Context, ns string, n int, nsNeeds func() map[string][]types.UID) {
	due, wait := c.startFill(ns, n)
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
	defer c.endFill(ns)
	c.listNamespace(ctx, ns, nsNeeds())
}

// listNamespace lists namespace ns, if it holds at most fillFactor times the
// claims of wanted (claim name → attachment pods), remembers those of
// wanted found bound in it, and those a complete list did not hold as
// missing. A failed list changes nothing: the claims are then read one by
// one.
func (c *claimCache) listNamespace(ctx context.Context, ns string, wanted map[string][]types.UID) {
	ctx, cancel := context.WithTimeout(ctx, claimReadTimeout)
	defer cancel()
	if n, ok := c.size(ctx, ns); !ok || n > int64(fillFactor*len(wanted)) {
		return
	}
	opts := metav1.ListOptions{Limit: fillPage}
	found := map[string]bool{}
	for {
		list, err := c.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, opts)
		if err != nil {
			return
		}
		for i := range list.Items {
			found[list.Items[i].Name] = true
			if pods, ok := wanted[list.Items[i].Name]; ok {
				c.keep(&list.Items[i], pods)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	for claim, pods := range wanted {
		if !found[claim] {
			c.missing(ns+"/"+claim, pods)
		}
	}
}

// size is how many claims namespace ns holds, from a list of one item;
// false when the server does not say.
func (c *claimCache) size(ctx context.Context, ns string) (int64, bool) {
	list, err := c.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{Limit: 1})
	switch {
	case err != nil:
		return 0, false
	case list.Continue == "":
		return int64(len(list.Items)), true
	case list.RemainingItemCount == nil:
		return 0, false
	}
	return int64(len(list.Items)) + *list.RemainingItemCount, true
}
