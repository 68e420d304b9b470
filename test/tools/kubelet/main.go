// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command kubelet builds the upstream kubelet for the real-node tests
// (test/realnode); it is a separate module so the agent's own go.mod stays
// small. build.sh stamps its version through -ldflags, or it would report
// v0.0.0-master and the API server's version skew checks would read nonsense.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
