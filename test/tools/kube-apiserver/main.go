// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command kube-apiserver builds the upstream API server for the end-to-end
// harness; it is a separate module so the agent's own go.mod stays small.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
