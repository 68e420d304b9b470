// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/kubevirt"
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

// Complete registers shell completion for cmd's --context (the
// kubeconfig's contexts) and, when bound, -n (the namespaces the API
// server lists), read with the flags given so far on the line.
func (k *KubeFlags) Complete(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		raw, err := k.ClientConfig().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		names := slices.Sorted(maps.Keys(raw.Contexts))
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	if cmd.Flags().Lookup("namespace") == nil {
		return
	}
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(c *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		names, err := k.namespaces(c.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
}

// Clientset is the client configuration and a typed client on it.
func (k *KubeFlags) Clientset() (*rest.Config, kubernetes.Interface, error) {
	cfg, err := k.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cfg, kube, nil
}

// namespaces lists the API server's namespaces by name.
func (k *KubeFlags) namespaces(ctx context.Context) ([]string, error) {
	_, kube, err := k.Clientset()
	if err != nil {
		return nil, err
	}
	list, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var names []string
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return names, nil
}

// VMINames lists the names of the VMIs in namespace ns (all namespaces
// when ns is ""): the completions of a VMI argument.
func (k *KubeFlags) VMINames(ctx context.Context, ns string) ([]string, error) {
	cfg, err := k.RESTConfig()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	list, err := dyn.Resource(kubevirt.VMIResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list VMIs: %w", err)
	}
	var names []string
	for _, v := range list.Items {
		names = append(names, v.GetName())
	}
	return names, nil
}

// CompleteVMIs completes VMI arguments from position first on, with the
// VMIs of the namespace -n or the context names (all with allNamespaces).
func (k *KubeFlags) CompleteVMIs(first int, allNamespaces *bool) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) < first {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ns := ""
		if !*allNamespaces {
			var err error
			if ns, err = k.ContextNamespace("default"); err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
		}
		names, err := k.VMINames(c.Context(), ns)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		return slices.DeleteFunc(names, func(n string) bool { return slices.Contains(args[first:], n) }), cobra.ShellCompDirectiveNoFileComp
	}
}
