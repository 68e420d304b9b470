// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/cli"
)

// apiFlags say how to reach the API server and how fast. The kubeconfig is
// found the kubectl way (cli.KubeFlags); in the agent's pod that ends at
// the in-cluster configuration. client-go's default of 5 requests per
// second (burst 10) is far too low for a node with hundreds of VMIs: its
// limiter, not the API server, would set the pace of Events, status
// patches and diag's lists.
type apiFlags struct {
	kube  cli.KubeFlags
	qps   float32
	burst int
}

func defaultAPIFlags() apiFlags { return apiFlags{qps: 50, burst: 100} }

// bind adds the flags; namespaceHelp, when not empty, adds -n/--namespace.
func (a *apiFlags) bind(f *pflag.FlagSet, namespaceHelp string) {
	a.kube.Bind(f, namespaceHelp)
	f.Float32Var(&a.qps, "kube-api-qps", a.qps, "requests per second to the API server, sustained (per client)")
	f.IntVar(&a.burst, "kube-api-burst", a.burst, "requests to the API server allowed in a burst above --kube-api-qps")
}

func (a apiFlags) validate() error {
	if a.qps <= 0 || a.burst < 1 {
		return fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d must be positive", a.qps, a.burst)
	}
	return nil
}

// clients builds a typed and a dynamic client, each with a rate limiter of
// its own at these settings; every call makes a new pair.
func (a apiFlags) clients(userAgent string) (kubernetes.Interface, dynamic.Interface, error) {
	rc, err := a.kube.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	rc.UserAgent, rc.QPS, rc.Burst = userAgent, a.qps, a.burst
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("dynamic client: %w", err)
	}
	return kube, dyn, nil
}
