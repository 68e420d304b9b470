// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeFlags are kubectl's connection flags. The kubeconfig is found as
// kubectl finds it: --kubeconfig, else $KUBECONFIG (a path list, merged
// first-wins), else ~/.kube/config, else the in-cluster configuration of a
// pod's ServiceAccount.
type KubeFlags struct {
	Kubeconfig string
	Context    string
	// Namespace is -n; empty leaves the choice to the caller (see
	// ContextNamespace).
	Namespace string
}

// Bind adds --kubeconfig and --context, and -n/--namespace when
// namespaceHelp is not empty.
func (k *KubeFlags) Bind(f *pflag.FlagSet, namespaceHelp string) {
	f.StringVar(&k.Kubeconfig, "kubeconfig", k.Kubeconfig, "kubeconfig file; default $KUBECONFIG (a list of paths, merged), then ~/.kube/config, then the pod's in-cluster configuration")
	f.StringVar(&k.Context, "context", k.Context, "kubeconfig context to use; default its current-context")
	if namespaceHelp != "" {
		f.StringVarP(&k.Namespace, "namespace", "n", k.Namespace, namespaceHelp)
	}
}

// ClientConfig is client-go's deferred, non-interactive loader with these
// flags as overrides: what kubectl builds.
func (k *KubeFlags) ClientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.Context}
	overrides.Context.Namespace = k.Namespace
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

// RESTConfig loads the client configuration. Where none was found, the
// error names the files looked for: client-go's own says only to set
// KUBERNETES_MASTER.
func (k *KubeFlags) RESTConfig() (*rest.Config, error) {
	cc := k.ClientConfig()
	rc, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, fmt.Errorf("kubeconfig: none found in %s, and not running in a pod", strings.Join(k.lookedIn(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

// lookedIn are the kubeconfig files the loading rules tried, quoted.
func (k *KubeFlags) lookedIn() []string {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	paths := rules.Precedence
	if k.Kubeconfig != "" {
		paths = []string{k.Kubeconfig}
	}
	var out []string
	for _, p := range paths {
		out = append(out, fmt.Sprintf("%q", p))
	}
	return out
}

// ContextNamespace is -n if given, else the namespace the kubeconfig's
// context names, else fallback. Unlike clientcmd's Namespace, a pod's own
// namespace (in-cluster) is not taken: the agent's namespace holds no VMIs.
func (k *KubeFlags) ContextNamespace(fallback string) (string, error) {
	if k.Namespace != "" {
		return k.Namespace, nil
	}
	raw, err := k.ClientConfig().RawConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	name := raw.CurrentContext
	if k.Context != "" {
		name = k.Context
	}
	if c, ok := raw.Contexts[name]; ok && c.Namespace != "" {
		return c.Namespace, nil
	}
	return fallback, nil
}
