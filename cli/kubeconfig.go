// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/kubevirt"
)

// KubeFlags are kubectl's connection flags, cli-runtime's ConfigFlags:
// --kubeconfig, --context, --cluster, --user, --server, --token, --as,
// --as-group, --request-timeout, --insecure-skip-tls-verify and the rest,
// read as kubectl reads them. The kubeconfig is found as kubectl finds it:
// --kubeconfig, else $KUBECONFIG (a path list, merged first-wins), else
// ~/.kube/config, else the in-cluster configuration of a pod's
// ServiceAccount. Kubeconfig, Context and Namespace hold their flags.
type KubeFlags struct {
	Kubeconfig string
	Context    string
	// Namespace is -n; empty leaves the choice to the caller (see
	// ContextNamespace).
	Namespace string
	flags     *genericclioptions.ConfigFlags
}

// config is the ConfigFlags on k's fields, made once. It builds a new
// loader at each use (no persistent config), so a field set after it was
// made is read.
func (k *KubeFlags) config() *genericclioptions.ConfigFlags {
	if k.flags == nil {
		f := genericclioptions.NewConfigFlags(false)
		f.KubeConfig, f.Context, f.Namespace = &k.Kubeconfig, &k.Context, &k.Namespace
		// No discovery is made: its cache directory is no flag here.
		f.CacheDir = nil
		k.flags = f
	}
	return k.flags
}

// Bind adds kubectl's connection flags, with -n/--namespace only when
// namespaceHelp is not empty.
func (k *KubeFlags) Bind(f *pflag.FlagSet, namespaceHelp string) {
	c := k.config()
	if namespaceHelp == "" {
		c.Namespace = nil
	}
	c.AddFlags(f)
	f.Lookup("kubeconfig").Usage = "kubeconfig file; default $KUBECONFIG (a list of paths, merged), then ~/.kube/config, then the pod's in-cluster configuration"
	if namespaceHelp != "" {
		f.Lookup("namespace").Usage = namespaceHelp
	}
}

// ClientConfig is cli-runtime's deferred, non-interactive loader with
// these flags as overrides: what kubectl builds.
func (k *KubeFlags) ClientConfig() clientcmd.ClientConfig {
	return k.config().ToRawKubeConfigLoader()
}

// RESTConfig loads the client configuration. Where no kubeconfig file was
// found, no --server given and no pod's configuration is there, the error
// names the files looked for: kubectl would try localhost:8080, and
// client-go's own error says only to set KUBERNETES_MASTER.
func (k *KubeFlags) RESTConfig() (*rest.Config, error) {
	cc := k.ClientConfig()
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if len(raw.Clusters) == 0 && k.server() == "" && !inCluster() {
		return nil, fmt.Errorf("kubeconfig: none found in %s, and not running in a pod", strings.Join(k.lookedIn(), ", "))
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

// server is --server, if given.
func (k *KubeFlags) server() string {
	if s := k.config().APIServer; s != nil {
		return *s
	}
	return ""
}

// inCluster reports whether a pod's ServiceAccount configuration is there.
func inCluster() bool {
	_, err := rest.InClusterConfig()
	return err == nil
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
