// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hpmount/hpmount/test/crds"
)

// VMIResource is kubevirt.io/v1 virtualmachineinstances.
var VMIResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// tokenSeconds is the lifetime asked of TokenRequest for test credentials.
const tokenSeconds = 24 * 60 * 60

// WriteKubeconfig writes cfg (host, CA, bearer token or client certificate)
// as a kubeconfig file at path, for binaries run with --kubeconfig.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.TLSClientConfig.CAData,
		CertificateAuthority:     cfg.TLSClientConfig.CAFile,
	}
	kc.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		TokenFile:             cfg.BearerTokenFile,
		ClientCertificateData: cfg.TLSClientConfig.CertData,
		ClientKeyData:         cfg.TLSClientConfig.KeyData,
	}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	kc.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %q: %w", path, err)
	}
	return nil
}

// ServiceAccountConfig returns a client config that authenticates as service
// account namespace/name, creating the namespace and the account if missing.
// The token comes from the TokenRequest API (nothing else issues tokens here)
// with the given audiences, default the apiserver's.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string, audiences ...string) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %q: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	expiry := int64(tokenSeconds)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         audiences,
		ExpirationSeconds: &expiry,
	}}
	tr, err = cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request token for service account %s/%s: %w", namespace, name, err)
	}
	return c.tokenConfig(tr.Status.Token), nil
}

// InstallVMICRD applies the VirtualMachineInstance CRD from package crds and
// waits until it is Established and kubevirt.io/v1 is discoverable.
func (c *Cluster) InstallVMICRD(ctx context.Context) error {
	cfg := c.AdminConfig()
	if _, err := ApplyManifests(ctx, cfg, crds.VirtualMachineInstances, false); err != nil {
		return fmt.Errorf("install VirtualMachineInstance CRD: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	name := VMIResource.Resource + "." + VMIResource.Group
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !conditionTrue(crd.Object, "Established") {
			return false, nil
		}
		// Established comes slightly before discovery lists the resource,
		// and RESTMappers built from discovery need it listed.
		list, err := dc.ServerResourcesForGroupVersion(VMIResource.GroupVersion().String())
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, r := range list.APIResources {
			if r.Name == VMIResource.Resource {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for CRD %q to be established: %w", name, err)
	}
	return nil
}

// conditionTrue reports whether status.conditions has type typ with status True.
func conditionTrue(obj map[string]any, typ string) bool {
	status, _ := obj["status"].(map[string]any)
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// CanI asks the apiserver, as the user of cfg, whether verb is allowed on
// group/resource in namespace ("" for cluster scope or all namespaces).
func CanI(ctx context.Context, cfg *rest.Config, verb, group, resource, namespace string) (bool, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("client: %w", err)
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource, Namespace: namespace,
		},
	}}
	review, err = cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("self subject access review %s %s.%s in %q: %w", verb, resource, group, namespace, err)
	}
	return review.Status.Allowed, nil
}
