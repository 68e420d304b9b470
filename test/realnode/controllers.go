// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// RootCAConfigMap is the ConfigMap kube-controller-manager's
// root-ca-cert-publisher writes into every namespace; the projected
// ServiceAccount volume the admission plugin adds reads its ca.crt.
const RootCAConfigMap = "kube-root-ca.crt"

// NamespacePublisher does for every namespace what two controllers of
// kube-controller-manager do, which the cluster does not run: the
// serviceaccounts controller creates the "default" ServiceAccount and the
// root-ca-cert-publisher the kube-root-ca.crt ConfigMap. With the
// ServiceAccount admission plugin enabled (cluster.Options
// .ServiceAccountAdmission) a pod is refused without its ServiceAccount and
// never starts without the ConfigMap.
type NamespacePublisher struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// PublishNamespaceDefaults starts the publisher; it returns once the
// namespaces that exist now are served. Stop ends it.
func PublishNamespaceDefaults(ctx context.Context, kube kubernetes.Interface, caFile string) (*NamespacePublisher, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read cluster CA %q: %w", caFile, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &NamespacePublisher{cancel: cancel}
	factory := informers.NewSharedInformerFactory(kube, 0)
	inf := factory.Core().V1().Namespaces().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			p.record(publish(ctx, kube, ns.Name, string(ca)))
		}
	}})
	if err != nil {
		cancel()
		return nil, err
	}
	p.done.Add(1)
	go func() { defer p.done.Done(); factory.Start(ctx.Done()); <-ctx.Done(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		p.Stop()
		return nil, fmt.Errorf("namespace informer did not sync: %w", ctx.Err())
	}
	return p, nil
}

// publish creates the namespace's default ServiceAccount and root CA
// ConfigMap unless they exist.
func publish(ctx context.Context, kube kubernetes.Interface, ns, ca string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/default: %w", ns, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap, Namespace: ns},
		Data: map[string]string{"ca.crt": ca}}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s/%s: %w", ns, RootCAConfigMap, err)
	}
	return nil
}

func (p *NamespacePublisher) record(err error) {
	if err != nil {
		p.mu.Lock()
		p.errs = append(p.errs, err)
		p.mu.Unlock()
	}
}

// Stop ends the publisher and returns what it failed to create, if
// anything (a namespace deleted meanwhile is not a failure).
func (p *NamespacePublisher) Stop() error {
	p.cancel()
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	var kept []error
	for _, err := range p.errs {
		if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !errors.Is(err, context.Canceled) {
			kept = append(kept, err)
		}
	}
	if len(kept) > 0 {
		return fmt.Errorf("namespace publisher: %v", kept)
	}
	return nil
}
